"""Shared pytest configuration: the `gpu` marker skips without CUDA."""
import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def demo_bpe_compact_dir():
    """The embedded workload's BPE compact graphs (`make demo`'s, data/graphs/tiny/bpe_blanklast/compact), built here
    when missing or stale (staged and locked, so parallel test workers share one build) instead of a skip that
    depended on which test had run first. Built with the recipe's defaults (HLG included), exactly as `make demo` and
    `eval.run` build it: a second configuration of the same directory would rebuild it under a test that is reading it
    in another worker (CI saw k2py's HLG vanish that way)."""
    import os
    from pathlib import Path

    from recipes.build_graphs import build_graphs
    from recipes.workload import prepare_workload

    root = Path(os.environ.get("BEAMDEC_TEST_GRAPH_ROOT", "data/graphs"))
    build_graphs(workload=prepare_workload("tiny"), token_kind="bpe", blank="last", topologies=["compact"],
                 out_root=root)
    return root / "tiny" / "bpe_blanklast" / "compact"
