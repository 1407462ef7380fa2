"""Build and load the compiled extension (`torch.ops.beamdec.*`).

One extension holds both decoders: a CPU reference op per decoder (always built) and, when torch sees a
CUDA device, the CUDA ops. Sources are picked by file name in `decoders/csrc/`:

  bindings.cpp             the single TORCH_LIBRARY registration file (schemas + per-backend impls)
  <component>_cpu.cpp      CPU reference implementation (torch tensors in, torch tensors out)
  <component>_cuda.cpp     torch-facing CUDA op: validates, allocates, takes the current stream
  <component>_launch.cu    torch-free launchers over raw pointers (kernels in include/<component>_*.cuh)
  common_*.cpp|.cu         shared by every component

The build is compiled on first use (JIT, `torch.utils.cpp_extension.load`), cached under
`$BEAMDEC_CACHE_DIR` (default `~/.cache/beamdec`) by a hash of the sources, flags, GPU architecture and the Python
environment (interpreter prefix and executable, Python version, torch version and its CUDA build), so two virtual
environments on one machine keep one build each instead of rebuilding over each other's, and guarded by torch's own
file lock so concurrent processes build once. A build (not a cache hit) says so on stderr, one line before and one
after ("building beamdec extension (first use, ~1 min)..."), since it takes a minute on two cores. For development,
`BEAMDEC_COMPONENTS=ctc` (comma-separated) builds a subset; each component's registrations in
bindings.cpp are guarded by `BEAMDEC_WITH_<COMPONENT>`.
"""
from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path

import torch

CSRC = Path(__file__).resolve().parent / "csrc"
INCLUDE = Path(__file__).resolve().parent / "include"
ALL_COMPONENTS = ("ctc", "wfst")

_lock = threading.Lock()
_loaded: dict[tuple, object] = {}
# The per-call path (every decode call asks for the ops): the loaded module by what selects a build without asking
# the driver, so a call costs two environment reads and a dict lookup, not a device-capability query (session 28:
# load_extension took ~20 % of one CUDA stream's chunk call on the host, by cProfile on the H100 host).
_by_env: dict[tuple, object] = {}


def _env_key() -> tuple:
    """What selects the build without a driver query: the two environment switches and, once CUDA is initialised,
    the current device (a host with GPUs of two architectures gets one build per architecture, as before)."""
    dev = torch.cuda.current_device() if torch.cuda.is_initialized() else -1
    return os.environ.get("BEAMDEC_COMPONENTS"), os.environ.get("BEAMDEC_FORCE_CPU"), dev


def _components() -> tuple[str, ...]:
    env = os.environ.get("BEAMDEC_COMPONENTS")
    if not env:
        return ALL_COMPONENTS
    names = tuple(c.strip() for c in env.split(",") if c.strip())
    bad = [c for c in names if c not in ALL_COMPONENTS]
    if bad:
        raise ValueError(f"BEAMDEC_COMPONENTS: unknown component(s) {bad}; valid: {list(ALL_COMPONENTS)}")
    return names


def _cuda_arch() -> str | None:
    if os.environ.get("BEAMDEC_FORCE_CPU") == "1" or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def _sources(components: tuple[str, ...], with_cuda: bool) -> list[Path]:
    picked = [CSRC / "bindings.cpp"]
    prefixes = ("common",) + components
    for path in sorted(CSRC.iterdir()):
        if path.name == "bindings.cpp" or not path.name.startswith(prefixes):
            continue
        if path.suffix == ".cpp" and (with_cuda or not path.stem.endswith("_cuda")):
            picked.append(path)
        elif path.suffix == ".cu" and with_cuda:
            picked.append(path)
    return picked


def environment_key() -> str:
    """What a compiled extension is bound to besides its sources: the interpreter (its prefix and executable: one
    per virtual environment; the executable with its links resolved, so `python` and `python3` of one environment
    share a build), the Python version, and the torch build it links against."""
    import sys

    return "|".join([sys.prefix, os.path.realpath(sys.executable), sys.version.split()[0], torch.__version__,
                     str(torch.version.cuda), str(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", ""))])


def _digest(paths: list[Path], flags: list[str]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths) + sorted(INCLUDE.glob("*")) + sorted(CSRC.glob("*.h")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(" ".join(flags).encode())
    h.update(environment_key().encode())
    return h.hexdigest()[:16]


def _is_built(cache: Path, name: str) -> bool:
    """Whether a loadable build of `name` is in `cache` already (then loading takes a second, not a minute)."""
    return any(cache.glob(f"{name}*.so")) or any(cache.glob(f"{name}*.pyd"))


def _say(text: str) -> None:
    import sys

    print(text, file=sys.stderr, flush=True)


def load_extension(verbose: bool | None = None):
    """Build (once) and load the extension; returns the loaded module. Ops live in `torch.ops.beamdec`."""
    fast = _env_key()
    module = _by_env.get(fast)
    if module is not None:
        return module
    from torch.utils import cpp_extension

    components = _components()
    arch = _cuda_arch()
    key = (components, arch)
    with _lock:
        if key in _loaded:
            _by_env[_env_key()] = _loaded[key]
            return _loaded[key]
        with_cuda = arch is not None
        defines = [f"-DBEAMDEC_WITH_{c.upper()}" for c in components]
        if with_cuda:
            defines.append("-DBEAMDEC_WITH_CUDA")
        # -fopenmp: at::parallel_for (the CPU references' loop over the batch, the lattice host work) is an OpenMP
        # region compiled into this extension; without the flag it silently runs on one thread. Threads:
        # torch.get_num_threads() (OMP_NUM_THREADS / torch.set_num_threads), recorded in every result row.
        cflags = ["-O3", "-std=c++17", *(["-fopenmp"] if sys.platform.startswith("linux") else []), *defines]
        cuda_flags = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo", *defines]
        sources = _sources(components, with_cuda)
        if with_cuda:
            # sm_XY machine code for the device we run on, plus PTX for newer chips.
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{arch}+PTX"
        tag = "cuda" + arch.replace(".", "") if with_cuda else "cpu"
        digest = _digest(sources, cflags + cuda_flags + [tag])
        name = f"beamdec_{tag}_{'_'.join(components)}_{digest}"
        cache = Path(os.environ.get("BEAMDEC_CACHE_DIR", Path.home() / ".cache" / "beamdec")) / name
        cache.mkdir(parents=True, exist_ok=True)
        if verbose is None:
            verbose = os.environ.get("BEAMDEC_VERBOSE_BUILD") == "1"
        building = not _is_built(cache, name)
        if building:
            import time

            t0 = time.perf_counter()
            _say(f"building beamdec extension ({tag}, first use, ~1 min{', more with CUDA' if with_cuda else ''}) "
                 f"into {cache} ...")
        module = cpp_extension.load(
            name=name,
            sources=[str(s) for s in sources],
            extra_include_paths=[str(INCLUDE), str(CSRC)],
            extra_cflags=cflags,
            extra_cuda_cflags=cuda_flags,
            extra_ldflags=["-fopenmp"] if sys.platform.startswith("linux") else [],
            build_directory=str(cache),
            with_cuda=with_cuda,
            is_python_module=False,
            verbose=verbose,
        )
        if building:
            _say(f"building beamdec extension: done in {time.perf_counter() - t0:.0f} s")
        _loaded[key] = module
        _by_env[_env_key()] = module  # after the build: _cuda_arch may have initialised CUDA
        return module


def ops():
    """The `torch.ops.beamdec` namespace, building the extension on first use."""
    load_extension()
    return torch.ops.beamdec
