"""Tiny CUDA WFST decode (epsilon and epsilon-free random graphs, boosts, fp16, -inf log-probs; the default
persistent kernel, its single-cluster form BEAMDEC_WFST_CLUSTER=16, both forms of its walks -- one round at a time
without the admitted-arc queue, 2 rounds ahead with it -- on wide states too, and the per-kernel launches,
BEAMDEC_WFST_PERSISTENT=0) and lattice decode (every walk x map with the per-kernel launches,
BEAMDEC_LATTICE_PERSISTENT=0, and the persistent forward pass, the default below 32 lanes)
(forward pass + device prune, with a capacity rescue) for compute-sanitizer runs.

    BEAMDEC_COMPONENTS=wfst compute-sanitizer --tool memcheck python -m eval.bench.wfst_smoke
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from test_wfst_lattice import acyclic_eps_graph  # noqa: E402
from wfst_testlib import random_graph, random_log_probs  # noqa: E402

from decoders.wfst import WfstDecoder, WfstDecoderConfig  # noqa: E402
from eval.bench.common import environment  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(0)
    for eps in (False, True):
        g = random_graph(rng, epsilon=eps, num_states=50, num_tokens=29)
        lp = random_log_probs(rng, 3, 9, 29).cuda()
        dec = WfstDecoder(g, WfstDecoderConfig(frontier_capacity=16, candidate_factor=1, max_rescues=1), "cuda")
        os.environ["BEAMDEC_WFST_PERSISTENT"] = "0"  # the per-kernel launches
        r = dec.decode(lp, [9, 0, 1], boosts=[{3: 1.0}, {}, {"w2": -1.0}])
        r16 = dec.decode(lp.half(), [9, 0, 1])
        # -inf (log 0) entries and a frame that is -inf everywhere: valid input, no path through the dead frame
        lp_inf = lp.masked_fill(torch.from_numpy(rng.random(tuple(lp.shape)) < 0.2).cuda(), float("-inf"))
        lp_inf[2, 0] = float("-inf")
        rinf = dec.decode(lp_inf, [9, 0, 1])
        print("eps" if eps else "noeps", r.words, r.scores.tolist(), r.overflow, r16.overflow, rinf.has_path)
        os.environ.pop("BEAMDEC_WFST_PERSISTENT")  # the default: the step loop as one cooperative kernel
        rp = dec.decode(lp, [9, 0, 1], boosts=[{3: 1.0}, {}, {"w2": -1.0}])
        rp16 = dec.decode(lp.half(), [9, 0, 1])
        print("persistent", "eps" if eps else "noeps", rp.words, rp.scores.tolist(), rp.overflow, rp16.overflow)
        with environment({"BEAMDEC_WFST_CLUSTER": "16"}):  # the opt-in single-cluster form of the persistent kernel
            rc = dec.decode(lp, [9, 0, 1], boosts=[{3: 1.0}, {}, {"w2": -1.0}])
        print("cluster", "eps" if eps else "noeps", rc.scores.tolist() == rp.scores.tolist(), rc.overflow)
        # the persistent walks' forms (their defaults depend on the graph): one round of arcs at a time without the
        # admitted-arc queue, and 2 rounds ahead with the queue, on wide states (up to 60 emitting arcs: several
        # rounds and queue flushes a token)
        one, two = ({"BEAMDEC_WFST_ARC_AHEAD": "1", "BEAMDEC_WFST_ADMIT_QUEUE": "0"},
                    {"BEAMDEC_WFST_ARC_AHEAD": "2", "BEAMDEC_WFST_ADMIT_QUEUE": "1"})
        with environment(one if not eps else two):  # the form the default did not run
            r1 = dec.decode(lp, [9, 0, 1], boosts=[{3: 1.0}, {}, {"w2": -1.0}])
        gw = random_graph(rng, epsilon=eps, num_states=120, num_tokens=29, max_emitting=60,
                          words_on_epsilon_cycles=False)
        lpw = random_log_probs(rng, 6, 14, 29).cuda()
        wide = WfstDecoder(gw, WfstDecoderConfig(search_beam=30.0), "cuda")
        with environment(two):
            rw = wide.decode(lpw, [14, 0, 1, 14, 7, 14], boosts=[{3: 1.0}] + [{}] * 5)
        with environment(one):
            rw1 = wide.decode(lpw, [14, 0, 1, 14, 7, 14], boosts=[{3: 1.0}] + [{}] * 5)
        with environment({**two, "BEAMDEC_WFST_SPREAD": "0"}):  # `two` has the spread walks (on by default in
            rws = wide.decode(lpw, [14, 0, 1, 14, 7, 14], boosts=[{3: 1.0}] + [{}] * 5)  # this form): here without
        # launcher switches of the 1-best walks against the default: the fence.sc arrive counter (acq_rel is the
        # default), and the opt-in HLG-form kernels: the Resolve walk's early loads, with the carried arc ranges, and
        # the bound max (no Max walk at this batch of 6)
        for label, switch in (("fenced arrive", {"BEAMDEC_WFST_ACQ_REL_ARRIVE": "0"}),
                              ("early loads", {"BEAMDEC_WFST_EARLY_LOADS": "1"}),
                              ("carried ranges", {"BEAMDEC_WFST_EARLY_LOADS": "2"}),
                              ("bound max", {"BEAMDEC_WFST_BOUND_MAX": "1"})):
            with environment(switch):
                rsw = wide.decode(lpw, [14, 0, 1, 14, 7, 14], boosts=[{3: 1.0}] + [{}] * 5)
            print(label, "eps" if eps else "noeps", rsw.scores.tolist() == rw1.scores.tolist(), rsw.overflow)
        print("walk forms", "eps" if eps else "noeps", r1.scores.tolist() == rp.scores.tolist(),
              rw.scores.tolist() == rw1.scores.tolist(), rws.scores.tolist() == rw1.scores.tolist(), rw.overflow)
    # WFST_SMOKE_LATTICE=0 leaves the lattice decodes out (a sanitizer run after a change to the 1-best kernels only)
    for eps in ((False, True) if os.environ.get("WFST_SMOKE_LATTICE", "1") != "0" else ()):
        # lattices: the forward pass, the device prune, an overflow rescue
        g = acyclic_eps_graph(rng, num_states=60, num_tokens=29, num_words=20, finals="some") if eps \
            else random_graph(rng, num_states=50, num_tokens=29)
        lp = random_log_probs(rng, 4, 12, 29).cuda()
        # every arc walk of the lattice kernels (BEAMDEC_LATTICE_WALK) with the dense state map, and the hashed
        # state map (BEAMDEC_LATTICE_MAP) with each of them, through the per-kernel launches (the default at this
        # batch is the persistent pass, run below)
        os.environ["BEAMDEC_LATTICE_PERSISTENT"] = "0"
        for state_map, walks in (("dense", ("token", "warp", "adaptive")), ("hash", ("token", "warp", "adaptive"))):
            os.environ["BEAMDEC_LATTICE_MAP"] = state_map
            for walk in walks:
                os.environ["BEAMDEC_LATTICE_WALK"] = walk
                for cfg in (WfstDecoderConfig(output_beam=6.0),
                            WfstDecoderConfig(output_beam=6.0, frontier_capacity=4, candidate_factor=1, max_rescues=2)):
                    lats = WfstDecoder(g, cfg, "cuda").decode_lattice(lp, [12, 0, 1, 7],
                                                                      boosts=[{3: 1.0}, {}, None, {}])
                    print("lattice", state_map, walk, "eps" if eps else "noeps", lats.has_path, lats.overflow,
                          int(lats.arcs.shape[0]))
        os.environ.pop("BEAMDEC_LATTICE_MAP", None)
        os.environ.pop("BEAMDEC_LATTICE_WALK", None)
        os.environ["BEAMDEC_LATTICE_PERSISTENT"] = "1"  # the forward pass as one cooperative kernel
        for walk in ("token", "adaptive"):
            os.environ["BEAMDEC_LATTICE_WALK"] = walk
            lats = WfstDecoder(g, WfstDecoderConfig(output_beam=6.0, frontier_capacity=4, candidate_factor=1,
                                                    max_rescues=2), "cuda").decode_lattice(lp, [12, 0, 1, 7],
                                                                                            boosts=[{3: 1.0}, {}, None, {}])
            print("lattice persistent", walk, "eps" if eps else "noeps", lats.has_path, lats.overflow,
                  int(lats.arcs.shape[0]))
        os.environ.pop("BEAMDEC_LATTICE_PERSISTENT")
        os.environ.pop("BEAMDEC_LATTICE_WALK")
    torch.cuda.synchronize()
    print("smoke ok")


if __name__ == "__main__":
    main()
