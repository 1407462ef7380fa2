// CUDA kernels of the lattice forward pass (torch-free; launched by decoders/csrc/wfst_lattice_launch.cu).
//
// The executable spec is lattice_forward in decoders/csrc/wfst_lattice_cpu.cpp; this is the same pass over every lane
// at once, one kernel per phase of a step:
//   final_flag -> setup (k2 dynamic beam, allow_partial redirect) -> max (exact maximum of the step's candidate ends)
//   -> cutoff -> expand (admit end > cutoff, recombine by destination state with an atomic max, record the arc)
//   -> resolve (the new frame's tokens and scores) -> [epsilon closure: eps_iterations Jacobi passes of
//   pass_setup -> eps_expand -> resolve(eps), then eps_finish and record_eps] -> commit_alloc -> commit_copy -> clear.
// Scores use the CPU reference's float operations in the same order (__fadd_rn / __fmul_rn: no FMA contraction),
// and max / recombination are order-independent, so every token score equals the CPU's bit for bit and the
// admitted arc sets are the same; only the order tokens are created in differs (the host prune renumbers
// canonically). States of the frame being built are found through a dense per-lane map (B x N) of frame-local
// token indices plus a dense per-lane ordered-score map for the atomic max; both are cleared for exactly the
// frame's states after each step.
//
// Two arc walks for expand / max / epsilon expand / epsilon record (template kWarpWalk; BEAMDEC_LATTICE_WALK, read by
// the launcher): one frontier item per warp, its arcs over the warp's threads (the launcher's choice below 64 lanes),
// or warp_walk_arcs (32 items per warp, their arcs 32 at a time, with warp-aggregated token claims and arc records;
// from 64 lanes up). Both give the same
// tokens, scores and arc sets; tests/test_wfst_lattice_gpu.py runs every case with both.
//
// Memory (per lane): F staging tokens (+ two dirty lists), C step arcs, the dense maps (8 B per graph state); the
// token and arc arenas are shared by the batch. Overflow bits per lane (wfst_defs.h): kOverflowFrontier (> F
// states in a frame), kOverflowCandidates (> C arcs in a step), kOverflowArena (an arena is full),
// kOverflowEpsilon (closure not converged, as on the CPU). decoders/lattice.py re-decodes flagged lanes with
// larger capacities.
#pragma once
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "wfst_defs.h"
#include "wfst_lattice_launch.h"

namespace wfst {
namespace lattice_kernels {

constexpr int kWarp = 32;

struct LaneState {
  int32_t len;
  int32_t active;      // this step: t <= len (init: 1)
  int32_t final_step;  // t == len
  int32_t redirect;    // allow_partial final step without FINAL arcs in the frontier
  int32_t has_final;   // some frontier state has a FINAL arc (final step only)
  int32_t closure;     // run the epsilon closure on the frame being built
  float beam;          // k2 dynamic beam
  float cutoff;
  uint32_t max_ord;    // ordered key of the step's maximum candidate end (0: none)
  int32_t front_begin; // token arena range of the current frame
  int32_t front_count;
  int32_t next_count;  // claims of the frame being built (> F: overflow)
  int32_t prev_count;  // tokens before the current closure pass
  int32_t cand_count;  // arcs of this step (> C: overflow)
  int32_t dirty_count[2];
  int32_t overflow;
  int32_t redirected;
};

struct Workspace {
  LaneState* lanes;       // (B,)
  // The state map of the frame being built, per lane: entry = state (dense, Sizes::H = 0: (B, N)) or a hash entry
  // (Sizes::H > 0: (B, H); map_key names its state), see map_insert / map_find.
  int32_t* slot;          // frame-local token index of the entry's state; -1 none, -2 claiming
  uint32_t* dscore;       // ordered best end of the entry's state (0: none)
  uint32_t* map_key;      // (B, H) hash only: state + 1 (0: free)
  int32_t* st_map;        // (B, F) hash only: the map entry of each staging token
  int32_t* st_state;      // (B, F) staging tokens of the frame being built
  float* st_score;        // (B, F)
  int32_t* dirty_idx[2];  // (B, F) closure work lists (frame-local indices)
  float* dirty_score[2];  // (B, F) their scores at the start of the pass (Jacobi)
  LatticeArc* cands;      // (B, C) this step's arcs; dst is a graph state until commit_copy
};

// Work list q picked by a select, not by indexing `ws.dirty_*[q]` with a runtime q: the indexed form makes nvcc copy
// the kernel-parameter Workspace to local memory (ptxas: 96 B stack frames), as wfst_kernels.cuh's `frontier` notes.
struct DirtyList {
  int32_t* idx;
  float* score;
};
__device__ __forceinline__ DirtyList dirty_list(const Workspace& ws, int32_t q) {
  return q ? DirtyList{ws.dirty_idx[1], ws.dirty_score[1]} : DirtyList{ws.dirty_idx[0], ws.dirty_score[0]};
}

struct Sizes {
  int32_t B, T, V, N, F, C, S;
  int64_t tok_cap, arc_cap;
  // items per warp of the warp-cooperative walk (warp_walk_arcs): 32 (BEAMDEC_LATTICE_WALK=warp), or 0 = adaptive
  // (BEAMDEC_LATTICE_WALK=adaptive: ceil(count / warps of the lane), 1..32, per kernel and lane)
  int32_t walk_items = 32;
  int32_t H = 0;  // LatticeCapacities::map_slots: 0 = dense state maps, else hash entries per lane
};

__device__ __forceinline__ float load_lp(const float* p) { return *p; }
__device__ __forceinline__ float load_lp(const __half* p) { return __half2float(*p); }

// The arc's score: acoustic_scale * log-prob (emitting arcs on real frames) + weight + boosts, in the CPU's order.
template <typename scalar_t>
__device__ __forceinline__ float arc_ll(const DeviceGraph& g, const SearchOptions& opt, int32_t a,
                                        const scalar_t* row, bool acoustic_term, const int32_t* bk, const float* bv,
                                        int32_t bc, int32_t lane) {
  const float acoustic = acoustic_term ? __fmul_rn(load_lp(row + g.ilabel[a]), opt.acoustic_scale) : 0.0f;
  float ll = __fadd_rn(acoustic, g.weight[a]);
  if (bc > 0) {
    int32_t wb, we;
    arc_word_range(g, a, wb, we);
    for (int32_t k = wb; k < we; ++k)
      ll = __fadd_rn(ll, boost_lookup(bk + static_cast<int64_t>(lane) * bc, bv + static_cast<int64_t>(lane) * bc, bc,
                                      g.words[k]));
  }
  return ll;
}

__device__ __forceinline__ bool has_eps_arcs(const DeviceGraph& g, int32_t s) { return g.eps_begin[s] < g.final_begin[s]; }

// Arc range of a frontier state on this step (wfst_lattice_cpu.cpp arc_range).
__device__ __forceinline__ void arc_range(const DeviceGraph& g, const LaneState& L, int32_t s, int32_t& b, int32_t& e) {
  if (!L.final_step) {
    b = g.row_splits[s];
    e = g.eps_begin[s];
  } else if (L.redirect) {
    b = g.row_splits[s];
    e = g.row_splits[s + 1];
  } else {
    b = g.final_begin[s];
    e = g.row_splits[s + 1];
  }
}

// walk_arcs' item description for frontier token i of a lane (its arcs on this step, its score).
__device__ __forceinline__ auto frontier_item(const DeviceGraph& g, const LaneState& L, const int32_t* tok_state,
                                              const float* tok_score) {
  return [&g, &L, tok_state, tok_score](int32_t i, int32_t& begin, int32_t& deg, float& score) {
    int32_t end;
    arc_range(g, L, tok_state[L.front_begin + i], begin, end);
    deg = end - begin;
    score = tok_score[L.front_begin + i];
  };
}

// The next index of a lane's counter `ctr`. kAggregate (the warp walk): the threads of a warp taking one at the same
// time (all of one lane: blk.y) share one atomic, the first one's, instead of one each.
template <bool kAggregate>
__device__ __forceinline__ int32_t take_index(int32_t* ctr) {
  if constexpr (kAggregate) {
    const cooperative_groups::coalesced_group active = cooperative_groups::coalesced_threads();
    int32_t base = 0;
    if (active.thread_rank() == 0) base = atomicAdd(ctr, static_cast<int32_t>(active.size()));
    return active.shfl(base, 0) + static_cast<int32_t>(active.thread_rank());
  } else {
    return atomicAdd(ctr, 1);
  }
}

// The state map. Dense (P.H == 0): state d of lane b is entry b * N + d. Hashed (P.H > 0: BEAMDEC_LATTICE_MAP=hash, or
// the default once the batch's dense maps pass 1 GiB; gpu-tested on the H200 in session 7): lane b's H entries, open addressing with linear probing on
// key d + 1 (0 = free), at most kMapProbes probes; the frame's entries are freed one by one by clear_kernel (every
// entry of a frame belongs to one of its tokens, so the table is empty again after it: no tombstones). Both give the
// same claims, so the same tokens, scores and arcs.
constexpr int kMapProbes = 256;

// The entry of state d in lane b's map, inserted when absent; -1 when the probe bound is hit (hash only).
__device__ __forceinline__ int64_t map_insert(const Workspace& ws, const Sizes& P, int32_t b, int32_t d) {
  if (P.H == 0) return static_cast<int64_t>(b) * P.N + d;
  uint32_t* keys = ws.map_key + static_cast<int64_t>(b) * P.H;
  const uint32_t key = static_cast<uint32_t>(d) + 1u, mask = static_cast<uint32_t>(P.H - 1);
  uint32_t h = hash_u32(key) & mask;
  for (int p = 0; p < kMapProbes && p < P.H; ++p) {
    const uint32_t k = *reinterpret_cast<volatile uint32_t*>(keys + h);
    if (k == key) return static_cast<int64_t>(b) * P.H + h;
    if (k == 0u) {
      const uint32_t old = atomicCAS(keys + h, 0u, key);
      if (old == 0u || old == key) return static_cast<int64_t>(b) * P.H + h;
    }
    h = (h + 1u) & mask;
  }
  return -1;
}

// The entry of state d in lane b's map, or -1 when d is not in the frame being built (read after the frame's claims).
__device__ __forceinline__ int64_t map_find(const Workspace& ws, const Sizes& P, int32_t b, int32_t d) {
  if (P.H == 0) return static_cast<int64_t>(b) * P.N + d;
  const uint32_t* keys = ws.map_key + static_cast<int64_t>(b) * P.H;
  const uint32_t key = static_cast<uint32_t>(d) + 1u, mask = static_cast<uint32_t>(P.H - 1);
  uint32_t h = hash_u32(key) & mask;
  for (int p = 0; p < kMapProbes && p < P.H; ++p) {
    const uint32_t k = keys[h];
    if (k == key) return static_cast<int64_t>(b) * P.H + h;
    if (k == 0u) return -1;
    h = (h + 1u) & mask;
  }
  return -1;
}

// Staging token idx of lane b is state d, whose map entry is k (map_insert's); token_entry reads k back.
__device__ __forceinline__ void stage_token(const Workspace& ws, const Sizes& P, int32_t b, int32_t idx, int32_t d,
                                            int64_t k) {
  const int64_t bF = static_cast<int64_t>(b) * P.F;
  ws.st_state[bF + idx] = d;
  if (P.H > 0) ws.st_map[bF + idx] = static_cast<int32_t>(k - static_cast<int64_t>(b) * P.H);
}

__device__ __forceinline__ int64_t token_entry(const Workspace& ws, const Sizes& P, int32_t b, int32_t idx,
                                               int32_t d) {
  const int64_t bF = static_cast<int64_t>(b) * P.F;
  return P.H == 0 ? static_cast<int64_t>(b) * P.N + d : static_cast<int64_t>(b) * P.H + ws.st_map[bF + idx];
}

// Claims destination state d for the frame being built with score `end` (kAggregate: take_index's).
template <bool kAggregate = false>
__device__ __forceinline__ void claim(const Workspace& ws, const Sizes& P, int32_t b, int32_t d, float end) {
  const int64_t k = map_insert(ws, P, b, d);
  if (k < 0) {
    atomicOr(&ws.lanes[b].overflow, kOverflowHash);
    return;
  }
  atomicMax(ws.dscore + k, float_to_ordered(end));
  if (atomicCAS(ws.slot + k, -1, -2) == -1) {
    const int32_t idx = take_index<kAggregate>(&ws.lanes[b].next_count);
    if (idx < P.F)
      stage_token(ws, P, b, idx, d, k);
    else
      atomicOr(&ws.lanes[b].overflow, kOverflowFrontier);
  }
}

// Appends `arc` to the lane's arcs of this step (kAggregate: take_index's).
template <bool kAggregate = false>
__device__ __forceinline__ void record_arc(const Workspace& ws, const Sizes& P, int32_t b, LatticeArc arc) {
  const int32_t ci = take_index<kAggregate>(&ws.lanes[b].cand_count);
  if (ci < P.C)
    ws.cands[static_cast<int64_t>(b) * P.C + ci] = arc;
  else
    atomicOr(&ws.lanes[b].overflow, kOverflowCandidates);
}

// The block a kernel body runs as: x of nx blocks of lane y (per-lane kernels), or x of nx blocks over the lanes
// (lane kernels). The plain kernels pass their blockIdx / gridDim; the persistent kernel (opt-in,
// BEAMDEC_LATTICE_PERSISTENT=1) runs every body over the same virtual grid from fewer resident blocks.
struct Blk {
  int32_t x, y, nx;
};
__device__ __forceinline__ Blk this_blk() {
  return Blk{static_cast<int32_t>(blockIdx.x), static_cast<int32_t>(blockIdx.y), static_cast<int32_t>(gridDim.x)};
}

// Warp-per-item loop over `count` items of lane blk.y.
#define LAT_WARP_LOOP(blk, i, count)                                                             \
  const int32_t lane_id_ = threadIdx.x % kWarp;                                                  \
  const int32_t warps_ = blockDim.x / kWarp;                                                     \
  for (int32_t i = (blk).x * warps_ + threadIdx.x / kWarp; i < (count); i += (blk).nx * warps_)

// The warp-cooperative arc walk (kWarpWalk = true; BEAMDEC_LATTICE_WALK=warp, wfst_lattice_launch.cu): a warp takes 32
// consecutive items of lane blk.y (one per thread), scans their arc counts with shuffles and visits the arcs 32 at
// a time, each thread finding its arc's item by a shuffle binary search -- the warp stays busy whatever the fan-out,
// where LAT_WARP_LOOP's one item per warp leaves 30 of 32 threads idle on a 2-arc state. `item(i, begin, deg, score)`
// describes item i (its arcs [begin, begin + deg)); `on_arc(i, a, score)` runs once per arc a of item i. The loop
// bounds are warp-uniform (the shuffles need the whole warp). Every atomic the callers use (max, claim, record) is
// order-independent, so the walk changes no token, score or arc set, only the order arcs are recorded in (which the
// host numbering makes canonical).
constexpr unsigned kFullMask = 0xffffffffu;

//
// Items per warp: `per_warp` (32: the walk above), or with per_warp = 0 as few as spread the lane's items over all of
// its warps (ceil(count / warps), 1..32; the default walk since session 7, BEAMDEC_LATTICE_WALK=adaptive). The fixed 32
// lost at small batches because it leaves most of a lane's warps idle (batch 1: expand 22.8 us per launch vs 6.5 us
// for one item per warp, reports/evidence/h200_2026-12-02/README_session6.md); adaptive is within 2 % of one item per
// warp at batch 1 and the fastest at 200 (README_session7.md). Threads past the warp's `k` items hold no arcs.
template <typename ItemFn, typename ArcFn>
__device__ __forceinline__ void warp_walk_arcs(const Blk& blk, int32_t count, int32_t per_warp, ItemFn item,
                                               ArcFn on_arc) {
  const int32_t lane = threadIdx.x % kWarp;
  const int32_t warps = blockDim.x / kWarp;
  const int32_t lane_warps = blk.nx * warps;
  const int32_t k = per_warp > 0 ? min(per_warp, kWarp) : max(1, min(kWarp, (count + lane_warps - 1) / lane_warps));
  const int32_t stride = lane_warps * k;
  for (int32_t base = (blk.x * warps + threadIdx.x / kWarp) * k; base < count; base += stride) {
    const int32_t i = base + lane;
    int32_t begin = 0, deg = 0;
    float score = -INFINITY;
    if (lane < k && i < count) item(i, begin, deg, score);
    int32_t incl = deg;
#pragma unroll
    for (int d = 1; d < kWarp; d <<= 1) {
      const int32_t y = __shfl_up_sync(kFullMask, incl, d);
      if (lane >= d) incl += y;
    }
    const int32_t excl = incl - deg;
    const int32_t total = __shfl_sync(kFullMask, incl, kWarp - 1);
    for (int32_t j0 = 0; j0 < total; j0 += kWarp) {
      const int32_t j = j0 + lane;
      int32_t owner = 0;  // the number of items whose inclusive arc count is <= j: the item arc j belongs to
#pragma unroll
      for (int step = kWarp / 2; step; step >>= 1) {
        const int32_t v = __shfl_sync(kFullMask, incl, owner + step - 1);
        if (v <= j) owner += step;
      }
      const int32_t a = __shfl_sync(kFullMask, begin, owner) + (j - __shfl_sync(kFullMask, excl, owner));
      const float sc = __shfl_sync(kFullMask, score, owner);
      if (j < total) on_arc(base + owner, a, sc);
    }
  }
}

// The arc walk of the expand / max / epsilon kernels over `count` items of lane blk.y (item and on_arc as in
// warp_walk_arcs): kWarpWalk, warp_walk_arcs; else one item per warp, its arcs over the warp's threads.
template <bool kWarpWalk, typename ItemFn, typename ArcFn>
__device__ __forceinline__ void walk_arcs(const Blk& blk, const Sizes& P, int32_t count, ItemFn item, ArcFn on_arc) {
  if constexpr (kWarpWalk) {
    warp_walk_arcs(blk, count, P.walk_items, item, on_arc);
  } else {
    LAT_WARP_LOOP(blk, i, count) {
      int32_t begin, deg;
      float score;
      item(i, begin, deg, score);
      for (int32_t a = begin + lane_id_; a < begin + deg; a += kWarp) on_arc(i, a, score);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
__device__ __forceinline__ void init_body(const Blk& blk, Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt,
                                          const int32_t* lengths) {
  const int32_t b = blk.x * blockDim.x + threadIdx.x;
  if (b >= P.B) return;
  LaneState L{};
  L.len = lengths[b];
  L.active = 1;
  L.closure = g.has_eps ? 1 : 0;
  L.beam = opt.search_beam;
  L.cutoff = __fsub_rn(0.0f, opt.search_beam);
  L.next_count = 1;
  ws.lanes[b] = L;
  const int64_t k = map_insert(ws, P, b, g.start_state);  // the lane's map is empty: never -1
  ws.dscore[k] = float_to_ordered(0.0f);
  ws.slot[k] = -2;  // resolve() writes the index
  stage_token(ws, P, b, 0, g.start_state, k);
}
__global__ void init_kernel(Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt, const int32_t* lengths) {
  init_body(this_blk(), ws, P, g, opt, lengths);
}

// Per step t: does some frontier state of a lane on its final step have a FINAL arc?
__device__ __forceinline__ void final_flag_body(const Blk& blk, Workspace ws, Sizes P, DeviceGraph g,
                                                const int32_t* tok_state, int32_t t) {
  const int32_t b = blk.y;
  LaneState& L = ws.lanes[b];
  if (t != L.len) return;
  for (int32_t i = blk.x * blockDim.x + threadIdx.x; i < L.front_count; i += blk.nx * blockDim.x) {
    const int32_t s = tok_state[L.front_begin + i];
    if (g.final_begin[s] < g.row_splits[s + 1]) L.has_final = 1;
  }
}
__global__ void final_flag_kernel(Workspace ws, Sizes P, DeviceGraph g, const int32_t* tok_state, int32_t t) {
  final_flag_body(this_blk(), ws, P, g, tok_state, t);
}

__device__ __forceinline__ void setup_body(const Blk& blk, Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt,
                                           int32_t t) {
  const int32_t b = blk.x * blockDim.x + threadIdx.x;
  if (b >= P.B) return;
  LaneState& L = ws.lanes[b];
  L.active = t <= L.len ? 1 : 0;
  if (!L.active) {
    L.closure = 0;
    return;
  }
  L.final_step = t == L.len ? 1 : 0;
  L.redirect = (opt.allow_partial && L.final_step && !L.has_final) ? 1 : 0;
  L.beam = k2_dynamic_beam(L.beam, opt.search_beam, opt.min_active, opt.max_active, L.front_count, t, L.len + 1);
  L.max_ord = 0u;
  L.next_count = 0;
  L.cand_count = 0;
  L.dirty_count[0] = L.dirty_count[1] = 0;
  L.closure = (g.has_eps && !L.final_step) ? 1 : 0;
}
__global__ void setup_kernel(Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt, int32_t t) {
  setup_body(this_blk(), ws, P, g, opt, t);
}

template <bool kWarpWalk, typename scalar_t>
__device__ __forceinline__ void max_body(const Blk& blk, Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt,
                                         const scalar_t* lp, const int32_t* tok_state, const float* tok_score,
                                         const int32_t* bk, const float* bv, int32_t bc, int32_t t) {
  const int32_t b = blk.y;
  const LaneState& L = ws.lanes[b];
  if (!L.active) return;
  const scalar_t* row = lp + (static_cast<int64_t>(b) * P.T + (L.final_step ? 0 : t)) * P.V;
  float m = -INFINITY;
  walk_arcs<kWarpWalk>(blk, P, L.front_count, frontier_item(g, L, tok_state, tok_score),
                       [&](int32_t, int32_t a, float sc) {
    m = fmaxf(m, __fadd_rn(sc, arc_ll(g, opt, a, row, !L.final_step, bk, bv, bc, b)));
  });
  for (int off = kWarp / 2; off > 0; off /= 2) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
  if (threadIdx.x % kWarp == 0 && m > -INFINITY) atomicMax(&ws.lanes[b].max_ord, float_to_ordered(m));
}
template <bool kWarpWalk, typename scalar_t>
__global__ void max_kernel(Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt, const scalar_t* lp,
                           const int32_t* tok_state, const float* tok_score, const int32_t* bk, const float* bv,
                           int32_t bc, int32_t t) {
  max_body<kWarpWalk, scalar_t>(this_blk(), ws, P, g, opt, lp, tok_state, tok_score, bk, bv, bc, t);
}

__device__ __forceinline__ void cutoff_body(const Blk& blk, Workspace ws, Sizes P) {
  const int32_t b = blk.x * blockDim.x + threadIdx.x;
  if (b >= P.B) return;
  LaneState& L = ws.lanes[b];
  if (!L.active) return;
  const float best = L.max_ord == 0u ? -INFINITY : ordered_to_float(L.max_ord);
  L.cutoff = __fsub_rn(best, L.beam);
}
__global__ void cutoff_kernel(Workspace ws, Sizes P) {
  cutoff_body(this_blk(), ws, P);
}

template <bool kWarpWalk, typename scalar_t>
__device__ __forceinline__ void expand_body(const Blk& blk, Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt,
                                            const scalar_t* lp, const int32_t* tok_state, const float* tok_score,
                                            const int32_t* bk, const float* bv, int32_t bc, int32_t t) {
  const int32_t b = blk.y;
  const LaneState& L = ws.lanes[b];
  if (!L.active) return;
  const scalar_t* row = lp + (static_cast<int64_t>(b) * P.T + (L.final_step ? 0 : t)) * P.V;
  const float cutoff = L.cutoff;
  walk_arcs<kWarpWalk>(blk, P, L.front_count, frontier_item(g, L, tok_state, tok_score),
                       [&](int32_t i, int32_t a, float sc) {
    const float ll = arc_ll(g, opt, a, row, !L.final_step, bk, bv, bc, b);
    const float end = __fadd_rn(sc, ll);
    if (!(end > cutoff)) return;
    const int32_t d = L.redirect ? g.final_state : g.dest[a];
    claim<kWarpWalk>(ws, P, b, d, end);
    record_arc<kWarpWalk>(ws, P, b, LatticeArc{L.front_begin + i, d, a, ll});
  });
}
template <bool kWarpWalk, typename scalar_t>
__global__ void expand_kernel(Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt, const scalar_t* lp,
                              const int32_t* tok_state, const float* tok_score, const int32_t* bk, const float* bv,
                              int32_t bc, int32_t t) {
  expand_body<kWarpWalk, scalar_t>(this_blk(), ws, P, g, opt, lp, tok_state, tok_score, bk, bv, bc, t);
}

// After an emitting step (eps = false) or a closure pass writing dirty list `q` (eps = true): the new frame's
// tokens get their indices and scores; tokens created or strictly improved go on the next closure work list.
__device__ __forceinline__ void resolve_body(const Blk& blk, Workspace ws, Sizes P, DeviceGraph g, bool eps,
                                             int32_t q) {
  const int32_t b = blk.y;
  LaneState& L = ws.lanes[b];
  if (!L.active || (eps && !L.closure)) return;
  const int32_t n = min(L.next_count, P.F);
  const int64_t bF = static_cast<int64_t>(b) * P.F;
  for (int32_t idx = blk.x * blockDim.x + threadIdx.x; idx < n; idx += blk.nx * blockDim.x) {
    const int32_t d = ws.st_state[bF + idx];
    const int64_t k = token_entry(ws, P, b, idx, d);
    const float ns = ordered_to_float(ws.dscore[k]);
    bool dirty;
    if (!eps || idx >= L.prev_count) {  // a new token of the frame
      ws.slot[k] = idx;
      ws.st_score[bF + idx] = ns;
      dirty = true;
    } else {
      dirty = ns > ws.st_score[bF + idx];
      if (dirty) ws.st_score[bF + idx] = ns;
    }
    if (dirty && L.closure && has_eps_arcs(g, d)) {
      const int32_t w = atomicAdd(&L.dirty_count[q], 1);
      dirty_list(ws, q).idx[bF + w] = idx;
      dirty_list(ws, q).score[bF + w] = ns;
    }
  }
}
__global__ void resolve_kernel(Workspace ws, Sizes P, DeviceGraph g, bool eps, int32_t q) {
  resolve_body(this_blk(), ws, P, g, eps, q);
}

__device__ __forceinline__ void pass_setup_body(const Blk& blk, Workspace ws, Sizes P, int32_t q) {
  const int32_t b = blk.x * blockDim.x + threadIdx.x;
  if (b >= P.B) return;
  LaneState& L = ws.lanes[b];
  if (!L.active || !L.closure) return;
  L.prev_count = min(L.next_count, P.F);
  L.dirty_count[q] = 0;
}
__global__ void pass_setup_kernel(Workspace ws, Sizes P, int32_t q) {
  pass_setup_body(this_blk(), ws, P, q);
}

// One Jacobi closure pass: the epsilon arcs of the tokens on work list r, with their scores from the pass start.
template <bool kWarpWalk>
__device__ __forceinline__ void eps_expand_body(const Blk& blk, Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt,
                                                const int32_t* bk, const float* bv, int32_t bc, int32_t r) {
  const int32_t b = blk.y;
  const LaneState& L = ws.lanes[b];
  if (!L.active || !L.closure) return;
  const int64_t bF = static_cast<int64_t>(b) * P.F;
  const float cutoff = L.cutoff;
  walk_arcs<kWarpWalk>(
      blk, P, L.dirty_count[r],
      [&](int32_t i, int32_t& begin, int32_t& deg, float& score) {
        const int32_t s = ws.st_state[bF + dirty_list(ws, r).idx[bF + i]];
        begin = g.eps_begin[s];
        deg = g.final_begin[s] - begin;
        score = dirty_list(ws, r).score[bF + i];
      },
      [&](int32_t, int32_t a, float sc) {
        const float end = __fadd_rn(sc, arc_ll<float>(g, opt, a, nullptr, false, bk, bv, bc, b));
        if (end > cutoff) claim<kWarpWalk>(ws, P, b, g.dest[a], end);
      });
}
template <bool kWarpWalk>
__global__ void eps_expand_kernel(Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt, const int32_t* bk,
                                  const float* bv, int32_t bc, int32_t r) {
  eps_expand_body<kWarpWalk>(this_blk(), ws, P, g, opt, bk, bv, bc, r);
}

__device__ __forceinline__ void eps_finish_body(const Blk& blk, Workspace ws, Sizes P, int32_t last) {
  const int32_t b = blk.x * blockDim.x + threadIdx.x;
  if (b >= P.B) return;
  LaneState& L = ws.lanes[b];
  if (L.active && L.closure && L.dirty_count[last] > 0) L.overflow |= kOverflowEpsilon;
}
__global__ void eps_finish_kernel(Workspace ws, Sizes P, int32_t last) {
  eps_finish_body(this_blk(), ws, P, last);
}

// The closed frame's epsilon arcs: source score + arc > cutoff and destination in the frame (CPU record_eps_arcs).
template <bool kWarpWalk>
__device__ __forceinline__ void record_eps_body(const Blk& blk, Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt,
                                                const int32_t* bk, const float* bv, int32_t bc) {
  const int32_t b = blk.y;
  const LaneState& L = ws.lanes[b];
  if (!L.active || !L.closure) return;
  const int64_t bF = static_cast<int64_t>(b) * P.F;
  const float cutoff = L.cutoff;
  walk_arcs<kWarpWalk>(
      blk, P, min(L.next_count, P.F),
      [&](int32_t i, int32_t& begin, int32_t& deg, float& score) {
        const int32_t s = ws.st_state[bF + i];
        begin = g.eps_begin[s];
        deg = g.final_begin[s] - begin;
        score = ws.st_score[bF + i];
      },
      [&](int32_t i, int32_t a, float sc) {
        const float ll = arc_ll<float>(g, opt, a, nullptr, false, bk, bv, bc, b);
        if (!(__fadd_rn(sc, ll) > cutoff)) return;
        const int64_t k = map_find(ws, P, b, g.dest[a]);
        if (k >= 0 && ws.slot[k] >= 0)
          record_arc<kWarpWalk>(ws, P, b, LatticeArc{i, g.dest[a], a | kLatticeEpsArcBit, ll});
      });
}
template <bool kWarpWalk>
__global__ void record_eps_kernel(Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt, const int32_t* bk,
                                  const float* bv, int32_t bc) {
  record_eps_body<kWarpWalk>(this_blk(), ws, P, g, opt, bk, bv, bc);
}

// Allocates the frame's tokens and the step's arcs in the arenas (one thread per lane).
__device__ __forceinline__ void commit_alloc_body(const Blk& blk, Workspace ws, Sizes P, LatticeOutputs out,
                                                  int32_t frame) {
  const int32_t b = blk.x * blockDim.x + threadIdx.x;
  if (b >= P.B) return;
  LaneState& L = ws.lanes[b];
  if (!L.active) return;
  int32_t n = min(L.next_count, P.F);
  int32_t m = min(L.cand_count, P.C);
  unsigned long long base = atomicAdd(out.cursors, static_cast<unsigned long long>(n));
  if (base + n > static_cast<unsigned long long>(P.tok_cap)) {
    L.overflow |= kOverflowArena;
    n = 0;
    base = 0;
  }
  unsigned long long abase = atomicAdd(out.cursors + 1, static_cast<unsigned long long>(m));
  if (abase + m > static_cast<unsigned long long>(P.arc_cap)) {
    L.overflow |= kOverflowArena;
    m = 0;
    abase = 0;
  }
  const int64_t k = static_cast<int64_t>(b) * P.S + frame;
  out.frame_begin[k] = static_cast<int32_t>(base);
  out.frame_count[k] = n;
  out.block_begin[k] = static_cast<int64_t>(abase);
  out.block_count[k] = m;
  L.front_begin = static_cast<int32_t>(base);
  L.front_count = n;
  if (L.final_step) L.redirected = L.redirect;
  out.lane_result[2 * b] = L.overflow;
  out.lane_result[2 * b + 1] = L.redirected;
}
__global__ void commit_alloc_kernel(Workspace ws, Sizes P, LatticeOutputs out, int32_t frame) {
  commit_alloc_body(this_blk(), ws, P, out, frame);
}

__device__ __forceinline__ void commit_copy_body(const Blk& blk, Workspace ws, Sizes P, LatticeOutputs out,
                                                 int32_t frame) {
  const int32_t b = blk.y;
  const LaneState& L = ws.lanes[b];
  if (!L.active) return;
  const int64_t k = static_cast<int64_t>(b) * P.S + frame;
  const int32_t n = out.frame_count[k], base = out.frame_begin[k];
  const int32_t m = out.block_count[k];
  const int64_t abase = out.block_begin[k];
  const int64_t bF = static_cast<int64_t>(b) * P.F, bC = static_cast<int64_t>(b) * P.C;
  for (int32_t i = blk.x * blockDim.x + threadIdx.x; i < n; i += blk.nx * blockDim.x) {
    out.tok_state[base + i] = ws.st_state[bF + i];
    out.tok_score[base + i] = ws.st_score[bF + i];
  }
  for (int32_t i = blk.x * blockDim.x + threadIdx.x; i < m; i += blk.nx * blockDim.x) {
    LatticeArc c = ws.cands[bC + i];
    const int64_t e = map_find(ws, P, b, c.dst);
    const int32_t j = e >= 0 ? ws.slot[e] : -1;
    if (j >= 0 && j < n) {
      c.src = (c.arc & kLatticeEpsArcBit) ? base + c.src : c.src;
      c.dst = base + j;
    } else {
      c.src = c.dst = -1;
    }
    out.arcs[abase + i] = c;
  }
}
__global__ void commit_copy_kernel(Workspace ws, Sizes P, LatticeOutputs out, int32_t frame) {
  commit_copy_body(this_blk(), ws, P, out, frame);
}

__device__ __forceinline__ void clear_body(const Blk& blk, Workspace ws, Sizes P) {
  const int32_t b = blk.y;
  const LaneState& L = ws.lanes[b];
  if (!L.active) return;
  const int32_t n = min(L.next_count, P.F);
  const int64_t bF = static_cast<int64_t>(b) * P.F;
  for (int32_t i = blk.x * blockDim.x + threadIdx.x; i < n; i += blk.nx * blockDim.x) {
    const int64_t k = token_entry(ws, P, b, i, ws.st_state[bF + i]);
    ws.slot[k] = -1;
    ws.dscore[k] = 0u;
    if (P.H > 0) ws.map_key[k] = 0u;
  }
}
__global__ void clear_kernel(Workspace ws, Sizes P) {
  clear_body(this_blk(), ws, P);
}

// The forward pass as ONE cooperative launch (opt-in BEAMDEC_LATTICE_PERSISTENT=1, wfst_lattice_launch.cu;
// compile-checked only so far): the bodies above in the plain launcher's order (enqueue), each over the grid its
// plain launch has -- `lane_blocks` blocks over the lanes, or `lane_x` blocks per lane x B -- handed out round-robin
// to the resident blocks, and a grid-wide barrier where a launch ended. The lattice pass launches ~16 kernels a
// frame (closure passes included), ~10 us each at batch 200 on the H200 whatever their work (session 7:
// resolve 10.0, eps_expand 9.6 us per launch); the 1-best's persistent loop saved 23-41 % of its kernel time the
// same way. blockDim.x must be the plain launches' (the bodies read it).
template <bool kWarpWalk, typename scalar_t>
__global__ void persistent_kernel(Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt, const scalar_t* lp,
                                  const int32_t* lengths, const int32_t* bk, const float* bv, int32_t bc,
                                  LatticeOutputs out, int32_t max_length, int32_t passes, int32_t lane_blocks,
                                  int32_t lane_x) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  auto lanes = [&](auto body) {  // a lane kernel's grid, then the barrier its launch boundary was
    for (int32_t v = blockIdx.x; v < lane_blocks; v += gridDim.x) body(Blk{v, 0, lane_blocks});
    grid.sync();
  };
  auto per_lane = [&](auto body) {  // a per-lane kernel's grid (lane_x blocks of each lane), then the barrier
    const int32_t n = lane_x * P.B;
    for (int32_t v = blockIdx.x; v < n; v += gridDim.x) body(Blk{v % lane_x, v / lane_x, lane_x});
    grid.sync();
  };
  auto closure_and_commit = [&](int32_t frame) {
    if (g.has_eps) {
      for (int32_t p = 0; p < passes; ++p) {
        const int32_t r = p & 1, q = (p + 1) & 1;
        lanes([&](const Blk& k) { pass_setup_body(k, ws, P, q); });
        per_lane([&](const Blk& k) { eps_expand_body<kWarpWalk>(k, ws, P, g, opt, bk, bv, bc, r); });
        per_lane([&](const Blk& k) { resolve_body(k, ws, P, g, true, q); });
      }
      lanes([&](const Blk& k) { eps_finish_body(k, ws, P, passes & 1); });
      per_lane([&](const Blk& k) { record_eps_body<kWarpWalk>(k, ws, P, g, opt, bk, bv, bc); });
    }
    lanes([&](const Blk& k) { commit_alloc_body(k, ws, P, out, frame); });
    per_lane([&](const Blk& k) { commit_copy_body(k, ws, P, out, frame); });
    per_lane([&](const Blk& k) { clear_body(k, ws, P); });
  };
  lanes([&](const Blk& k) { init_body(k, ws, P, g, opt, lengths); });
  per_lane([&](const Blk& k) { resolve_body(k, ws, P, g, false, 0); });
  closure_and_commit(0);
  for (int32_t t = 0; t <= max_length; ++t) {
    per_lane([&](const Blk& k) { final_flag_body(k, ws, P, g, out.tok_state, t); });
    lanes([&](const Blk& k) { setup_body(k, ws, P, g, opt, t); });
    per_lane([&](const Blk& k) {
      max_body<kWarpWalk, scalar_t>(k, ws, P, g, opt, lp, out.tok_state, out.tok_score, bk, bv, bc, t);
    });
    lanes([&](const Blk& k) { cutoff_body(k, ws, P); });
    per_lane([&](const Blk& k) {
      expand_body<kWarpWalk, scalar_t>(k, ws, P, g, opt, lp, out.tok_state, out.tok_score, bk, bv, bc, t);
    });
    per_lane([&](const Blk& k) { resolve_body(k, ws, P, g, false, 0); });
    closure_and_commit(t + 1);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Backward output-beam prune on the device: the CPU reference's prune_lattice (wfst_lattice_cpu.cpp) over the arenas
// the forward pass left, one block per lane walking its frames backwards. The final token's backward score is
// -forward(final); per frame f, first the emitting arcs f -> f + 1 (committed with frame f + 1), then the frame's
// epsilon arcs in decreasing epsilon level of their source, one level per pass with a barrier between, so every
// arc's destination is complete when the arc is visited (an epsilon arc s -> d has level(d) > level(s)). An arc is
// kept iff forward(src) + (arc + backward(dst)) >= -output_beam; a state's backward score is the max over its kept
// arcs (an atomic max on the ordered encoding: order-independent, and the same float additions as the CPU, so the
// scores are the CPU's bit for bit). Arcs and tokens outside the frame ranges a lane committed are skipped as the
// host does. Kept tokens get their lane and frame (tok_frame >= 0 marks them), kept arcs a 1 in arc_keep; per lane
// [final token or -1, tokens before, arcs before, final score bits] go to lane_out.
struct PruneOutputs {
  uint32_t* bwd;       // (token capacity) ordered backward score, 0: none (caller zeroes)
  int32_t* tok_frame;  // (token capacity) frame of a kept token, -1: not kept (caller fills -1)
  int32_t* tok_lane;   // (token capacity) lane of a kept token
  uint8_t* arc_keep;   // (arc capacity) 1: kept (caller zeroes)
  int32_t* lane_out;   // (B, 4)
};

__device__ __forceinline__ void frame_range(const LatticeOutputs& out, const Sizes& P, int64_t n_tok, int32_t b,
                                            int32_t f, int32_t& base, int32_t& n) {
  const int64_t k = static_cast<int64_t>(b) * P.S + f;
  base = out.frame_begin[k];
  n = out.frame_count[k];
  if (!(base >= 0 && static_cast<int64_t>(base) + n <= n_tok)) n = 0;  // a frame lost to an overflowed arena
}

__device__ __forceinline__ bool in_range(int32_t id, int32_t base, int32_t n) { return id >= base && id < base + n; }

__global__ void prune_kernel(LatticeOutputs out, Sizes P, const int32_t* lengths, const int32_t* eps_level,
                             int32_t final_state, float neg_beam, PruneOutputs po) {
  const int32_t b = blockIdx.x;
  const int64_t n_tok = min(static_cast<int64_t>(out.cursors[0]), P.tok_cap);
  const int64_t n_arc = min(static_cast<int64_t>(out.cursors[1]), P.arc_cap);
  const int32_t frames = lengths[b] + 2;
  __shared__ int32_t s_final, s_maxlev;
  __shared__ unsigned long long s_toks, s_arcs;
  if (threadIdx.x == 0) {
    s_final = -1;
    s_toks = s_arcs = 0ull;
  }
  __syncthreads();
  unsigned long long toks = 0, arcs_seen = 0;
  for (int32_t f = threadIdx.x; f < frames; f += blockDim.x) {
    int32_t base, n;
    frame_range(out, P, n_tok, b, f, base, n);
    toks += static_cast<unsigned long long>(n);
  }
  {
    int32_t base, n;
    frame_range(out, P, n_tok, b, frames - 1, base, n);
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
      if (out.tok_state[base + i] == final_state) s_final = base + i;  // unique in the frame
  }
  __syncthreads();
  const int32_t fin = s_final;
  if (threadIdx.x == 0 && fin >= 0) po.bwd[fin] = float_to_ordered(-out.tok_score[fin]);
  __syncthreads();

  auto visit = [&](int64_t k, const LatticeArc& a, int32_t fs, int32_t fd) {
    const uint32_t bo = po.bwd[a.dst];
    if (bo == 0u) return;
    const float ab = __fadd_rn(a.ll, ordered_to_float(bo));  // k2: backward_loglike at the start of the arc
    if (__fadd_rn(ab, out.tok_score[a.src]) >= neg_beam) {
      po.arc_keep[k] = 1;
      atomicMax(po.bwd + a.src, float_to_ordered(ab));
      po.tok_frame[a.src] = fs;
      po.tok_frame[a.dst] = fd;
      po.tok_lane[a.src] = b;
      po.tok_lane[a.dst] = b;
    }
  };
  auto block_of = [&](int32_t f, int64_t& base, int32_t& m) {
    const int64_t k = static_cast<int64_t>(b) * P.S + f;
    base = out.block_begin[k];
    m = out.block_count[k];
    if (!(base >= 0 && base + m <= n_arc)) m = 0;
  };

  int32_t nb = 0, nn = 0;  // the frame after f
  for (int32_t f = frames - 1; f >= 0; --f) {
    int32_t fb, fn;
    frame_range(out, P, n_tok, b, f, fb, fn);
    if (f + 1 < frames) {  // emitting arcs f -> f + 1, committed with frame f + 1
      int64_t ab;
      int32_t m;
      block_of(f + 1, ab, m);
      for (int32_t i = threadIdx.x; i < m; i += blockDim.x) {
        const LatticeArc a = out.arcs[ab + i];
        if (a.src < 0 || (a.arc & kLatticeEpsArcBit) || !in_range(a.src, fb, fn) || !in_range(a.dst, nb, nn)) continue;
        ++arcs_seen;
        visit(ab + i, a, f, f + 1);
      }
    }
    if (threadIdx.x == 0) s_maxlev = -1;
    __syncthreads();
    int64_t eb;
    int32_t em;
    block_of(f, eb, em);
    for (int32_t i = threadIdx.x; i < em; i += blockDim.x) {
      const LatticeArc a = out.arcs[eb + i];
      if (a.src < 0 || !(a.arc & kLatticeEpsArcBit) || !in_range(a.src, fb, fn) || !in_range(a.dst, fb, fn)) continue;
      ++arcs_seen;
      atomicMax(&s_maxlev, eps_level[out.tok_state[a.src]]);
    }
    __syncthreads();
    const int32_t top = s_maxlev;
    for (int32_t lev = top; lev >= 0; --lev) {  // epsilon arcs by decreasing level of their source
      for (int32_t i = threadIdx.x; i < em; i += blockDim.x) {
        const LatticeArc a = out.arcs[eb + i];
        if (a.src < 0 || !(a.arc & kLatticeEpsArcBit) || !in_range(a.src, fb, fn) || !in_range(a.dst, fb, fn) ||
            eps_level[out.tok_state[a.src]] != lev)
          continue;
        visit(eb + i, a, f, f);
      }
      __syncthreads();
    }
    nb = fb;
    nn = fn;
    __syncthreads();  // s_maxlev is reset next; the frame's backward scores are complete
  }
  atomicAdd(&s_toks, toks);
  atomicAdd(&s_arcs, arcs_seen);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* lo = po.lane_out + 4 * static_cast<int64_t>(b);
    lo[0] = fin;
    lo[1] = static_cast<int32_t>(min(s_toks, 0x7fffffffull));
    lo[2] = static_cast<int32_t>(min(s_arcs, 0x7fffffffull));
    lo[3] = fin >= 0 ? __float_as_int(out.tok_score[fin]) : 0;
  }
}

#undef LAT_WARP_LOOP

}  // namespace lattice_kernels
}  // namespace wfst
