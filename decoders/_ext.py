"""Build and load the compiled extension (`torch.ops.beamdec.*`).

One extension holds both decoders: a CPU reference op per decoder (always built) and, when torch sees a
CUDA device, the CUDA ops. Sources are picked by file name in `decoders/csrc/`:

  bindings.cpp             the single TORCH_LIBRARY registration file (schemas + per-backend impls)
  <component>_cpu.cpp      CPU reference implementation (torch tensors in, torch tensors out)
  <component>_cuda.cpp     torch-facing CUDA op: validates, allocates, takes the current stream
  <component>_launch.cu    torch-free launchers over raw pointers (kernels in include/<component>_*.cuh)
  common_*.cpp|.cu         shared by every component

The build is compiled on first use (JIT, `torch.utils.cpp_extension.load`), cached under
`$BEAMDEC_CACHE_DIR` (default `~/.cache/beamdec`) by a hash of the sources, flags, GPU architectures and the Python
environment (interpreter prefix and executable, Python version, torch version and its CUDA build), so two virtual
environments on one machine keep one build each instead of rebuilding over each other's, and guarded by torch's own
file lock so concurrent processes build once. A build (not a cache hit) says so on stderr, one line before and one
after ("building beamdec extension (first use, ~1 min)..."), since it takes a minute on two cores. For development,
`BEAMDEC_COMPONENTS=ctc` (comma-separated) builds a subset; each component's registrations in
bindings.cpp are guarded by `BEAMDEC_WITH_<COMPONENT>`. A process holds one build (torch registers the `beamdec`
namespace once), so these switches are read when the first decode loads it.
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
# The per-call path (every decode call asks for the ops): torch.ops.beamdec once a build is loaded, with no environment
# read, driver query or lock. A process holds one build: torch lets one library define the `beamdec` namespace, and
# loading a second build (other components, the CPU-only build) aborts the process (checked on torch 2.x: "Only a
# single TORCH_LIBRARY can be used to register the namespace", then terminate). Session 28 measured the driver query
# at ~20 % of one CUDA stream's chunk call on the H100 host; session 30 the two environment reads and the device
# lookup that replaced it at ~4 us of a ~10 us Python path on this project's 2-core CPU machine.
_ns = None


def _build_key() -> tuple:
    """What selects a build: the components and the CUDA architectures (None: the CPU-only build)."""
    return _components(), _cuda_arch()


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
    """The architectures of every visible GPU, e.g. "9.0" or "8.0;9.0" (one build serves all of a process's devices:
    it can load only one), or None for the CPU-only build."""
    if os.environ.get("BEAMDEC_FORCE_CPU") == "1" or not torch.cuda.is_available():
        return None
    caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    return ";".join(f"{major}.{minor}" for major, minor in caps)


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
    """Build (once) and load the extension; returns the loaded module. Ops live in `torch.ops.beamdec`.

    A process holds one build (see `_ns`): once one is loaded, switches that now select another (BEAMDEC_COMPONENTS,
    BEAMDEC_FORCE_CPU) are a one-line ValueError instead of a second load that would abort the process."""
    key = _build_key()
    if _loaded:
        if key in _loaded:
            return _loaded[key]
        (have,) = _loaded
        raise ValueError(f"this process has loaded the beamdec build for components={','.join(have[0])} "
                         f"cuda={have[1] or 'none'}; the environment now selects components={','.join(key[0])} "
                         f"cuda={key[1] or 'none'} (BEAMDEC_COMPONENTS / BEAMDEC_FORCE_CPU), and torch registers the "
                         f"beamdec ops once per process: set them before the first decode, or start a new process")
    from torch.utils import cpp_extension

    components, arch = key
    with _lock:
        if key in _loaded:
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
            # sm_XY machine code for every visible device's architecture, plus PTX for newer chips.
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{arch}+PTX"
        tag = "cuda" + arch.replace(".", "").replace(";", "_") if with_cuda else "cpu"
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
        return module


def ops():
    """The `torch.ops.beamdec` namespace, building the extension on first use (the per-call path: see `_ns`)."""
    global _ns
    ns = _ns
    if ns is None:
        load_extension()
        ns = _ns = torch.ops.beamdec
    return ns
