#!/usr/bin/env bash
# The SASS (machine code) of a kernel, on this machine without a GPU: the schedule ptxas chose, to read before a device
# call. nvcc here has no cuobjdump / nvdisasm; the PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm carry
# them (fetched once into $SASS_TOOLS, default ~/.cache/beamdec-sass-tools).
#   bash eval/bench/probes/sass.sh decoders/csrc/ctc_launch.cu ctc_decode_warp_kernelIfLb0ELb1EE [> out.sass]
#   args: a .cu file of decoders/csrc (compiled -O3 for sm_90 with the project's include paths), a substring of the
#   mangled kernel name (the first function whose name contains it is printed; with no substring, the list of names)
# Session 24 used it to see why removing instructions beside the CTC round's dependent path gained nothing: the
# REDUX result is copied to a vector register right after the REDUX (IMAD.U32 Rx, RZ, RZ, UR5), and in-order issue
# waits there (ncu: the round's largest short-scoreboard stall) before the refill behind it can issue.
set -euo pipefail
src=${1:?usage: sass.sh FILE.cu [KERNEL_SUBSTRING]}; pat=${2:-}
tools=${SASS_TOOLS:-$HOME/.cache/beamdec-sass-tools}
if [ ! -x "$tools/bin/nvdisasm" ] || [ ! -x "$tools/bin/cuobjdump" ]; then
  echo "sass.sh: fetching cuobjdump and nvdisasm (PyPI wheels, ~30 MB, once) into $tools ..." >&2
  mkdir -p "$tools/whl" "$tools/bin"
  python3 -m pip download -q --no-deps -d "$tools/whl" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >&2
  for w in "$tools"/whl/*.whl; do python3 -m zipfile -e "$w" "$tools/unpacked" >&2; done
  for b in cuobjdump nvdisasm; do
    f=$(find "$tools/unpacked" -type f -name "$b" | head -1)
    [ -n "$f" ] || { echo "sass.sh: $b not found in the wheels" >&2; exit 1; }
    cp "$f" "$tools/bin/$b"; chmod +x "$tools/bin/$b"
  done
fi
export PATH=$tools/bin:$PATH
obj=$(mktemp --suffix=.o); trap 'rm -f "$obj"' EXIT
echo "sass.sh: compiling $src (nvcc -O3 sm_90, ~30 s) ..." >&2
nvcc -c -std=c++17 -arch=sm_90 -O3 -Idecoders/include -Idecoders/csrc "$src" -o "$obj"
if [ -z "$pat" ]; then
  cuobjdump -sass "$obj" | grep "Function :" | sed 's/.*Function : //'
  exit 0
fi
name=$(cuobjdump -sass "$obj" | grep "Function :" | sed 's/.*Function : //' | grep -F -- "$pat" | head -1)
[ -n "$name" ] || { echo "sass.sh: no kernel name contains '$pat' (run without it for the list)" >&2; exit 1; }
echo "sass.sh: $name" >&2
cuobjdump -sass -fun "$name" "$obj" | sed 's|/\* 0x[0-9a-f]* \*/||; s/  */ /g' | grep -v '^ *$'
