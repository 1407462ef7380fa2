// Torch-free CUDA kernels of the WFST beam search. Same semantics as the CPU reference
// (decoders/csrc/wfst_cpu.cpp, the executable spec); the per-step pipeline is
//
//   ScanKernel    (block per lane)  phase, k2 dynamic beam, per-token arc ranges + exclusive scan;
//                                   the last block to finish scans the lanes' slot counts (fused LaneScan)
//   LaneScanKernel (one block)      [unfused path only] exclusive scan of per-lane slot counts
//   MaxKernel     (1-D grid)        exact per-lane maximum over every candidate of the step
//   ExpandKernel  (1-D grid)        admit end > max - beam, hash recombination by destination state
//   ResolveKernel (block per lane)  claims -> next frontier + back-pointers (arena)
//   [TLG: passes x (Expand(eps) -> Resolve(eps) + next pass's scan, fused), then ClearKernel; the passes
//    are the epsilon depth + 1, computed at graph upload (decoders/wfst.py)]
//
// The 1-D grids walk the flattened slot space of ALL lanes (each warp a contiguous span), so one hot lane
// spreads over the whole device instead of serialising its batchmates. Every launch has a fixed,
// capacity-sized grid and reads its work size from device memory: the loop never synchronises the host.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "wfst_defs.h"
#include "wfst_launch.h"

namespace wfst {
namespace kernels {

constexpr uint32_t kEmptyKey = 0xffffffffu;
constexpr int kMaxProbes = 256;
constexpr int kBlock = 512;  // threads of the per-lane kernels
constexpr int kWalkBlock = 256;

enum Phase : int32_t { kDone = 0, kEmit = 1, kFinal = 2, kRedirect = 3 };
enum Mode : int32_t { kModeStep = 0, kModeEps = 1 };

struct LaneState {
  int32_t len;
  int32_t phase;       // phase of the current step (kEmit during its epsilon closure)
  int32_t n_front;     // tokens of the frontier being expanded / built
  int32_t n_claims;    // distinct destination states claimed in this step (may exceed F: overflow)
  int32_t n_resolved;  // eps: claims already turned into tokens
  int32_t n_cands;     // candidates appended in this pass
  int32_t total;       // slots (arcs) to walk in this pass
  uint32_t max_ord;    // ordered-int max of this step's candidate ends (0: none)
  float beam;          // k2 dynamic beam
  float cutoff;        // admission threshold of this step (kept for the epsilon closure)
  int32_t overflow;
  int32_t eps_dirty;   // tokens changed by the last epsilon resolve
  int32_t final_winner;
  float final_score;
  int32_t flags;
};

struct Workspace {
  LaneState* lanes;        // (B,)
  int32_t* lane_offsets;   // (B+1,)
  int32_t* front_state[2];  // (B, F) each
  float* front_score[2];
  int32_t* front_winner[2];
  int32_t* tok_first;      // (B, F) first arc expanded by each token in this pass
  int32_t* arc_offsets;    // (B, F+1) exclusive prefix sum of the tokens' degrees
  int32_t* dirty;          // (B, F)
  int32_t* claims;         // (B, F) hash slot of each claimed state
  uint32_t* hash_key;      // (B, H)
  unsigned long long* hash_val;  // (B, H): ordered end << 32 | candidate index
  int2* cands;             // (B, C) {prev winner, arc}
  int2* arena;             // (arena,) {prev winner, arc}
  unsigned long long* arena_cursor;  // (1,)
  unsigned int* arrive;              // (1,) blocks of the current per-lane kernel done (fused lane scan)
};

// ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ float load_lp(const float* p) { return *p; }
__device__ __forceinline__ float load_lp(const __half* p) { return __half2float(*p); }

__device__ __forceinline__ unsigned long long pack(float end, uint32_t cand) {
  return (static_cast<unsigned long long>(float_to_ordered(end)) << 32) | cand;
}

// Block-wide exclusive scan of one int per thread (blockDim.x == kBlock); `total` gets the block sum.
// Ends with a barrier so the shared scratch can be reused by the next call.
__device__ __forceinline__ int block_exclusive_scan(int x, int& total) {
  constexpr int kWarps = kBlock / 32;
  __shared__ int warp_sums[kWarps];
  __shared__ int block_total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inc = x;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, inc, d);
    if (lane >= d) inc += y;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    const int v = lane < kWarps ? warp_sums[lane] : 0;
    int w = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += y;
    }
    if (lane < kWarps) warp_sums[lane] = w - v;
    if (lane == kWarps - 1) block_total = w;
  }
  __syncthreads();
  const int result = warp_sums[warp] + inc - x;
  total = block_total;
  __syncthreads();
  return result;
}

__device__ __forceinline__ int block_sum(int x) {
  int total;
  block_exclusive_scan(x, total);
  return total;
}

// Warp-aggregated atomicAdd: threads of the converged group with the same `key` share one atomic.
__device__ __forceinline__ int aggregated_add(int* counter, int key) {
  const unsigned active = __activemask();
  const unsigned peers = __match_any_sync(active, key);
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(peers) - 1;
  const int rank = __popc(peers & ((1u << lane) - 1u));
  int base = 0;
  if (lane == leader) base = atomicAdd(counter, __popc(peers));
  base = __shfl_sync(peers, base, leader);
  return base + rank;
}

// ---------------------------------------------------------------------------------------------------
// Init: one thread per lane. Frontier = {start}, dynamic beam = search_beam. With epsilon arcs the
// start token is registered in the hash so the start closure (cutoff -search_beam) can run.
__global__ void InitKernel(DeviceGraph g, SearchOptions opt, Workspace ws, const int32_t* lengths, int32_t batch,
                           int32_t F, int32_t H) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  LaneState& L = ws.lanes[b];
  L.len = lengths[b];
  L.phase = kEmit;
  L.n_front = 1;
  L.n_claims = 1;
  L.n_resolved = 1;
  L.n_cands = 0;
  L.total = 0;
  L.max_ord = 0;
  L.beam = opt.search_beam;
  L.cutoff = 0.0f - opt.search_beam;
  L.overflow = 0;
  L.eps_dirty = 1;
  L.final_winner = -1;
  L.final_score = -INFINITY;
  L.flags = 0;
  ws.front_state[0][(int64_t)b * F] = g.start_state;
  ws.front_score[0][(int64_t)b * F] = 0.0f;
  ws.front_winner[0][(int64_t)b * F] = -1;
  ws.dirty[(int64_t)b * F] = 1;
  if (g.has_eps) {
    uint32_t h = hash_u32(static_cast<uint32_t>(g.start_state)) & static_cast<uint32_t>(H - 1);
    ws.hash_key[(int64_t)b * H + h] = static_cast<uint32_t>(g.start_state);
    ws.hash_val[(int64_t)b * H + h] = pack(0.0f, 0u);
    ws.claims[(int64_t)b * F] = static_cast<int32_t>(h);
  }
}

// Scan (block per lane). kModeStep: decide the step's phase, update the dynamic beam, give each token its
// arc range for the phase. kModeEps: tokens changed by the last resolve expand their epsilon arcs.
__device__ __forceinline__ void scan_lane(const DeviceGraph& g, const SearchOptions& opt, Workspace& ws, int32_t t,
                                          int32_t mode, int32_t buf, int32_t F) {
  const int b = blockIdx.x;
  LaneState& L = ws.lanes[b];
  const int32_t* st = ws.front_state[buf] + (int64_t)b * F;
  const float* sc = ws.front_score[buf] + (int64_t)b * F;
  int32_t* first = ws.tok_first + (int64_t)b * F;
  int32_t* off = ws.arc_offsets + (int64_t)b * (F + 1);
  const int32_t* dirty = ws.dirty + (int64_t)b * F;
  __shared__ int32_t s_phase;
  const int32_t n = L.n_front;
  if (mode == kModeStep) {
    if (threadIdx.x == 0) {
      int32_t phase = t < L.len ? kEmit : (t == L.len ? kFinal : kDone);
      s_phase = phase;
    }
    __syncthreads();
    int32_t phase = s_phase;
    if (phase == kFinal && opt.allow_partial) {
      int has_final = 0;
      for (int i = threadIdx.x; i < n; i += kBlock) {
        int32_t s = st[i];
        has_final |= (g.final_begin[s] < g.row_splits[s + 1]) ? 1 : 0;
      }
      if (__syncthreads_or(has_final) == 0) phase = kRedirect;
    }
    if (threadIdx.x == 0) {
      if (phase != kDone) {
        L.beam = k2_dynamic_beam(L.beam, opt.search_beam, opt.min_active, opt.max_active, n, t, L.len + 1);
        L.n_claims = 0;
        L.n_resolved = 0;
      }
      L.phase = phase;
      L.max_ord = 0;
      L.n_cands = 0;
    }
    if (phase == kDone) {
      if (threadIdx.x == 0) L.total = 0;
      return;
    }
    int running = 0;
    for (int base = 0; base < n; base += kBlock) {
      int i = base + threadIdx.x;
      int deg = 0, begin = 0;
      if (i < n) {
        int32_t s = st[i];
        if (sc[i] != -INFINITY) {
          int32_t rb = g.row_splits[s], re = g.row_splits[s + 1];
          if (phase == kEmit) {
            begin = rb;
            deg = g.eps_begin[s] - rb;
          } else if (phase == kFinal) {
            begin = g.final_begin[s];
            deg = re - begin;
          } else {
            begin = rb;
            deg = re - rb;
          }
        }
        first[i] = begin;
      }
      int chunk_total;
      int ex = block_exclusive_scan(deg, chunk_total);
      if (i < n) off[i] = running + ex;
      running += chunk_total;
    }
    if (threadIdx.x == 0) {
      off[n] = running;
      L.total = running;
    }
  } else {  // epsilon pass
    if (L.phase != kEmit || !L.eps_dirty) {
      if (threadIdx.x == 0) L.total = 0;
      return;
    }
    int running = 0;
    for (int base = 0; base < n; base += kBlock) {
      int i = base + threadIdx.x;
      int deg = 0;
      if (i < n) {
        int32_t s = st[i];
        if (dirty[i] && sc[i] != -INFINITY) deg = g.final_begin[s] - g.eps_begin[s];
        first[i] = g.eps_begin[s];
      }
      int chunk_total;
      int ex = block_exclusive_scan(deg, chunk_total);
      if (i < n) off[i] = running + ex;
      running += chunk_total;
    }
    if (threadIdx.x == 0) {
      off[n] = running;
      L.total = running;
      L.n_cands = 0;
    }
  }
}

// Exclusive scan of the lanes' slot counts into lane_offsets (one block).
__device__ __forceinline__ void lane_scan_block(Workspace& ws, int32_t batch) {
  int running = 0;
  for (int base = 0; base < batch; base += kBlock) {
    int i = base + threadIdx.x;
    int x = i < batch ? *reinterpret_cast<volatile int32_t*>(&ws.lanes[i].total) : 0;
    int chunk_total;
    int ex = block_exclusive_scan(x, chunk_total);
    if (i < batch) ws.lane_offsets[i] = running + ex;
    running += chunk_total;
  }
  if (threadIdx.x == 0) ws.lane_offsets[batch] = running;
}

// One block: exclusive scan of the lanes' slot counts.
__global__ void __launch_bounds__(kBlock) LaneScanKernel(Workspace ws, int32_t batch) { lane_scan_block(ws, batch); }

// Fused lane scan: called by EVERY block of a block-per-lane kernel (grid = batch) after its thread 0 wrote
// its lane's `total`; the last block to arrive scans all lanes (threadFenceReduction pattern) and re-arms
// the counter. Saves the LaneScanKernel launch.
__device__ __forceinline__ void arrive_and_lane_scan(Workspace& ws, int32_t batch) {
  __shared__ bool s_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned prev = atomicAdd(ws.arrive, 1u);
    s_last = prev == gridDim.x - 1;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  lane_scan_block(ws, batch);
  if (threadIdx.x == 0) *ws.arrive = 0u;
}

__global__ void __launch_bounds__(kBlock) ScanKernel(DeviceGraph g, SearchOptions opt, Workspace ws, int32_t t,
                                                     int32_t mode, int32_t buf, int32_t F, int32_t batch,
                                                     bool fuse_lane_scan) {
  scan_lane(g, opt, ws, t, mode, buf, F);
  if (fuse_lane_scan) arrive_and_lane_scan(ws, batch);
}

// Largest index i in [lo, hi) with a[i] <= x (a non-decreasing, a[lo] <= x).
__device__ __forceinline__ int32_t upper_index(const int32_t* a, int32_t lo, int32_t hi, int32_t x) {
  while (hi - lo > 1) {
    int32_t mid = (lo + hi) >> 1;
    if (a[mid] <= x) lo = mid;
    else hi = mid;
  }
  return lo;
}

// A candidate slot resolved to (lane, token, arc) and its end score.
struct Slot {
  int32_t lane;
  int32_t tok;
  int32_t arc;
  float end;
};

// Walks the global slot space: each warp owns a contiguous span; each thread keeps its lane / token
// cursors (slots only increase along a thread's walk, so searches start from the last position).
template <typename scalar_t, typename Visit>
__device__ __forceinline__ void walk_slots(const DeviceGraph& g, const SearchOptions& opt, const Workspace& ws,
                                           const scalar_t* lp, int32_t T, int32_t V, int32_t t, int32_t buf,
                                           int32_t F, int32_t batch, const int32_t* boost_keys,
                                           const float* boost_values, int32_t boost_cap, Visit visit) {
  const int32_t total = ws.lane_offsets[batch];
  if (total == 0) return;
  const int32_t warps = (gridDim.x * blockDim.x) >> 5;
  const int32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int32_t span = (total + warps - 1) / warps;
  span = (span + 31) & ~31;
  const int32_t begin = warp * span;
  const int32_t end = min(total, begin + span);
  int32_t lane_id = -1, lane_begin = 0, lane_end = 0, tok = 0, n = 0, phase = 0;
  const int32_t *off = nullptr, *first = nullptr, *st = nullptr;
  const float* sc = nullptr;
  const scalar_t* row = nullptr;
  for (int32_t slot = begin + (threadIdx.x & 31); slot < end; slot += 32) {
    if (slot >= lane_end) {
      lane_id = upper_index(ws.lane_offsets, lane_id < 0 ? 0 : lane_id, batch, slot);
      lane_begin = ws.lane_offsets[lane_id];
      lane_end = ws.lane_offsets[lane_id + 1];
      const LaneState& L = ws.lanes[lane_id];
      n = L.n_front;
      phase = L.phase;
      off = ws.arc_offsets + (int64_t)lane_id * (F + 1);
      first = ws.tok_first + (int64_t)lane_id * F;
      st = ws.front_state[buf] + (int64_t)lane_id * F;
      sc = ws.front_score[buf] + (int64_t)lane_id * F;
      row = lp + ((int64_t)lane_id * T + (phase == kEmit ? t : 0)) * V;
      tok = 0;
    }
    const int32_t local = slot - lane_begin;
    tok = upper_index(off, tok, n, local);
    const int32_t arc = first[tok] + (local - off[tok]);
    float acoustic = 0.0f;
    // Acoustic term only for emitting arcs of an emitting step (not for epsilon passes, whose arcs
    // have ilabel EPSILON, nor for final / redirect steps).
    const int32_t il = g.ilabel[arc];
    if (phase == kEmit && il >= 0) acoustic = __fmul_rn(load_lp(row + il), opt.acoustic_scale);
    float arc_ll = __fadd_rn(acoustic, g.weight[arc]);
    if (boost_cap > 0) {
      for (int32_t k = g.aux_splits[arc]; k < g.aux_splits[arc + 1]; ++k)
        arc_ll = __fadd_rn(arc_ll, boost_lookup(boost_keys + (int64_t)lane_id * boost_cap,
                                                boost_values + (int64_t)lane_id * boost_cap, boost_cap,
                                                g.aux_words[k]));
    }
    Slot s{lane_id, tok, arc, __fadd_rn(sc[tok], arc_ll)};
    visit(s, phase, st);
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kWalkBlock)
    MaxKernel(DeviceGraph g, SearchOptions opt, Workspace ws, const scalar_t* lp, int32_t T, int32_t V, int32_t t,
              int32_t buf, int32_t F, int32_t batch, const int32_t* boost_keys, const float* boost_values,
              int32_t boost_cap) {
  int32_t cur_lane = -1;
  uint32_t cur_max = 0;
  auto flush = [&]() {
    if (cur_lane >= 0 && cur_max > 0) {
      uint32_t* p = &ws.lanes[cur_lane].max_ord;
      if (cur_max > *reinterpret_cast<volatile uint32_t*>(p)) atomicMax(p, cur_max);
    }
  };
  walk_slots<scalar_t>(g, opt, ws, lp, T, V, t, buf, F, batch, boost_keys, boost_values, boost_cap,
                       [&](const Slot& s, int32_t, const int32_t*) {
                         if (s.lane != cur_lane) {
                           flush();
                           cur_lane = s.lane;
                           cur_max = 0;
                         }
                         uint32_t o = float_to_ordered(s.end);
                         if (o > cur_max) cur_max = o;
                       });
  flush();
}

// Hash insert of `key` in a lane's table: returns the slot (and whether this thread claimed it) or -1.
__device__ __forceinline__ int32_t hash_insert(uint32_t* keys, int32_t H, uint32_t key, bool& claimed) {
  claimed = false;
  uint32_t h = hash_u32(key) & static_cast<uint32_t>(H - 1);
  const int probes = H < kMaxProbes ? H : kMaxProbes;
  for (int p = 0; p < probes; ++p) {
    uint32_t k = *reinterpret_cast<volatile uint32_t*>(&keys[h]);
    if (k == key) return static_cast<int32_t>(h);
    if (k == kEmptyKey) {
      uint32_t old = atomicCAS(&keys[h], kEmptyKey, key);
      if (old == kEmptyKey) {
        claimed = true;
        return static_cast<int32_t>(h);
      }
      if (old == key) return static_cast<int32_t>(h);
    }
    h = (h + 1) & static_cast<uint32_t>(H - 1);
  }
  return -1;
}

template <typename scalar_t>
__global__ void __launch_bounds__(kWalkBlock)
    ExpandKernel(DeviceGraph g, SearchOptions opt, Workspace ws, const scalar_t* lp, int32_t T, int32_t V, int32_t t,
                 int32_t buf, int32_t mode, int32_t F, int32_t C, int32_t H, int32_t batch,
                 const int32_t* boost_keys, const float* boost_values, int32_t boost_cap) {
  walk_slots<scalar_t>(
      g, opt, ws, lp, T, V, t, buf, F, batch, boost_keys, boost_values, boost_cap,
      [&](const Slot& s, int32_t phase, const int32_t*) {
        LaneState& L = ws.lanes[s.lane];
        // k2: cutoff = best - beam (float), admit iff end > cutoff.
        const float cutoff = mode == kModeEps ? L.cutoff : ordered_to_float(L.max_ord) - L.beam;
        if (!(s.end > cutoff)) return;
        const int32_t dest = phase == kRedirect ? g.final_state : g.dest[s.arc];
        uint32_t* keys = ws.hash_key + (int64_t)s.lane * H;
        unsigned long long* vals = ws.hash_val + (int64_t)s.lane * H;
        bool claimed;
        const int32_t h = hash_insert(keys, H, static_cast<uint32_t>(dest), claimed);
        if (h < 0) {
          atomicOr(&L.overflow, kOverflowHash);
          return;
        }
        if (claimed) {
          int32_t c = atomicAdd(&L.n_claims, 1);
          if (c < F) ws.claims[(int64_t)s.lane * F + c] = h;
          else atomicOr(&L.overflow, kOverflowFrontier);
        }
        const unsigned long long packed_end = static_cast<unsigned long long>(float_to_ordered(s.end)) << 32;
        const unsigned long long cur = *reinterpret_cast<volatile unsigned long long*>(&vals[h]);
        if (cur != 0 && packed_end < (cur & 0xffffffff00000000ull)) return;  // dominated: cannot win
        const int32_t c = aggregated_add(&L.n_cands, s.lane);
        if (c >= C) {
          atomicOr(&L.overflow, kOverflowCandidates);
          return;
        }
        const int32_t prev = ws.front_winner[buf][(int64_t)s.lane * F + s.tok];
        ws.cands[(int64_t)s.lane * C + c] = make_int2(prev, s.arc);
        atomicMax(&vals[h], packed_end | static_cast<uint32_t>(c));
      });
}

// Resolve (block per lane). kModeStep: the step's claims become the next frontier (buffer `out_buf`);
// kModeEps: new claims become tokens, tokens whose hash payload strictly improved get a new back-pointer.
__device__ __forceinline__ void resolve_lane(const DeviceGraph& g, Workspace& ws, int32_t mode, int32_t out_buf,
                                             int32_t F, int32_t C, int32_t H, int64_t arena_cap, bool keep_hash) {
  const int b = blockIdx.x;
  LaneState& L = ws.lanes[b];
  __shared__ int32_t s_phase, s_n, s_first_new, s_eps_dirty, s_claims_overflow;
  __shared__ long long s_base;
  if (threadIdx.x == 0) {
    s_phase = L.phase;
    s_n = min(L.n_claims, F);
    s_claims_overflow = L.n_claims > F;
    s_first_new = mode == kModeStep ? 0 : L.n_resolved;
    s_eps_dirty = L.eps_dirty;
  }
  __syncthreads();
  const int32_t phase = s_phase, n = s_n, first_new = s_first_new;
  if (phase == kDone) return;
  if (mode == kModeEps && (phase != kEmit || !s_eps_dirty)) return;
  // Epsilon graphs keep the table through the closure of an emitting step (ClearKernel clears it).
  keep_hash = keep_hash && phase == kEmit;
  int32_t* st = ws.front_state[out_buf] + (int64_t)b * F;
  float* sc = ws.front_score[out_buf] + (int64_t)b * F;
  int32_t* win = ws.front_winner[out_buf] + (int64_t)b * F;
  int32_t* dirty = ws.dirty + (int64_t)b * F;
  const int32_t* claims = ws.claims + (int64_t)b * F;
  const uint32_t* keys = ws.hash_key + (int64_t)b * H;
  const unsigned long long* vals = ws.hash_val + (int64_t)b * H;
  const int2* cands = ws.cands + (int64_t)b * C;
  int any_dirty = 0;
  for (int base = 0; base < n; base += kBlock) {
    const int i = base + threadIdx.x;
    int need = 0, alloc = 0;
    float score = -INFINITY;
    int2 cand = make_int2(-2, 0);
    if (i < n) {
      const int32_t h = claims[i];
      const unsigned long long v = vals[h];
      if (v != 0) {
        score = ordered_to_float(static_cast<uint32_t>(v >> 32));
        cand = cands[static_cast<uint32_t>(v & 0xffffffffull)];
      }
      if (i >= first_new) {
        st[i] = static_cast<int32_t>(keys[h]);
        need = v != 0;
        if (!need) {
          sc[i] = -INFINITY;  // claimed but its candidate was dropped (overflow): a dead token
          win[i] = -2;
        }
      } else {
        need = score > sc[i];
      }
      dirty[i] = need;
      // Word links only: the arena stores a back-pointer just for an arc that outputs words; a token reached
      // by any other arc passes its predecessor's link on (the backtrack reads words and nothing else), so
      // the arena grows with word ends, not with every surviving token.
      alloc = need && g.aux_splits[cand.y + 1] > g.aux_splits[cand.y];
    }
    any_dirty |= need;
    int chunk_total;
    const int ex = block_exclusive_scan(alloc, chunk_total);
    if (threadIdx.x == 0) {
      unsigned long long at = chunk_total ? atomicAdd(ws.arena_cursor, (unsigned long long)chunk_total) : 0ull;
      s_base = static_cast<long long>(at);
      if (chunk_total && static_cast<long long>(at) + chunk_total > arena_cap) atomicOr(&L.overflow, kOverflowArena);
    }
    __syncthreads();
    if (need && !alloc) {
      sc[i] = score;
      win[i] = cand.x;
    } else if (need) {
      const long long w = s_base + ex;
      sc[i] = score;
      if (w < arena_cap) {
        ws.arena[w] = cand;
        win[i] = static_cast<int32_t>(w);
      } else {
        win[i] = -2;  // broken chain (arena overflow is flagged)
      }
    }
    __syncthreads();
  }
  any_dirty = __syncthreads_or(any_dirty);
  if (threadIdx.x == 0) {
    L.n_front = n;
    L.n_resolved = n;
    L.eps_dirty = any_dirty;
    // The epsilon closure of this step admits against the step's cutoff (k2: best - beam).
    if (mode == kModeStep) L.cutoff = ordered_to_float(L.max_ord) - L.beam;
    if (mode == kModeStep && (phase == kFinal || phase == kRedirect)) {
      for (int i = 0; i < n; ++i) {
        if (st[i] == g.final_state && win[i] != -2) {
          L.final_winner = win[i];
          L.final_score = sc[i];
          L.flags = kFlagHasPath | (phase == kFinal ? kFlagReachedFinal : 0);
        }
      }
    }
  }
  if (!keep_hash) {  // clear exactly the claimed slots (all of them if the claims list overflowed)
    uint32_t* kw = ws.hash_key + (int64_t)b * H;
    unsigned long long* vw = ws.hash_val + (int64_t)b * H;
    if (s_claims_overflow) {
      for (int h = threadIdx.x; h < H; h += kBlock) kw[h] = kEmptyKey, vw[h] = 0ull;
    } else {
      for (int i = threadIdx.x; i < n; i += kBlock) {
        const int32_t h = claims[i];
        kw[h] = kEmptyKey;
        vw[h] = 0ull;
      }
    }
  }
}

// Resolve kernel. With fuse_eps_scan (epsilon graphs) the same block then prepares the next epsilon pass
// (ScanKernel's kModeEps part on the buffer just built) and the last block scans the lanes: an epsilon pass
// is then Expand + Resolve (2 launches instead of 4).
__global__ void __launch_bounds__(kBlock) ResolveKernel(DeviceGraph g, SearchOptions opt, Workspace ws, int32_t mode,
                                                        int32_t out_buf, int32_t F, int32_t C, int32_t H,
                                                        int64_t arena_cap, bool keep_hash, int32_t batch,
                                                        bool fuse_eps_scan) {
  resolve_lane(g, ws, mode, out_buf, F, C, H, arena_cap, keep_hash);
  if (fuse_eps_scan) {
    __syncthreads();  // thread 0's lane updates (n_front, eps_dirty) visible to the block
    scan_lane(g, opt, ws, 0, kModeEps, out_buf, F);
    arrive_and_lane_scan(ws, batch);
  }
}

// End of an epsilon closure: flag non-convergence, clear the lane's hash table.
__global__ void __launch_bounds__(kBlock) ClearKernel(Workspace ws, int32_t F, int32_t H) {
  const int b = blockIdx.x;
  LaneState& L = ws.lanes[b];
  if (L.phase != kEmit) return;
  const int32_t* claims = ws.claims + (int64_t)b * F;
  uint32_t* kw = ws.hash_key + (int64_t)b * H;
  unsigned long long* vw = ws.hash_val + (int64_t)b * H;
  const int32_t n_claims = L.n_claims;
  if (n_claims > F) {
    for (int h = threadIdx.x; h < H; h += kBlock) kw[h] = kEmptyKey, vw[h] = 0ull;
  } else {
    for (int i = threadIdx.x; i < n_claims; i += kBlock) {
      const int32_t h = claims[i];
      kw[h] = kEmptyKey;
      vw[h] = 0ull;
    }
  }
  if (threadIdx.x == 0 && L.eps_dirty) atomicOr(&L.overflow, kOverflowEpsilon);
}

// Backtrack (thread per lane): winners chain -> words, written oldest first; one result row per lane.
__global__ void BacktrackKernel(DeviceGraph g, Workspace ws, int32_t batch, int32_t W, int64_t arena_cap,
                                int32_t* result) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const LaneState& L = ws.lanes[b];
  int32_t* row = result + (int64_t)b * (kResultHeader + W);
  int32_t overflow = L.overflow;
  int32_t count = 0;
  if (L.flags & kFlagHasPath) {
    int64_t hops = 0;
    for (int32_t w = L.final_winner; w >= 0 && hops < arena_cap; w = ws.arena[w].x, ++hops)
      count += g.aux_splits[ws.arena[w].y + 1] - g.aux_splits[ws.arena[w].y];
    int32_t pos = count;
    hops = 0;
    for (int32_t w = L.final_winner; w >= 0 && hops < arena_cap; w = ws.arena[w].x, ++hops) {
      const int32_t a = ws.arena[w].y;
      for (int32_t k = g.aux_splits[a + 1] - 1; k >= g.aux_splits[a]; --k) {
        --pos;
        if (pos < W) row[kResultHeader + pos] = g.aux_words[k];
      }
    }
    if (count > W) overflow |= kOverflowWords;
  }
  row[kColNumWords] = count;
  row[kColOverflow] = overflow;
  row[kColFlags] = L.flags;
  float score = (L.flags & kFlagHasPath) ? L.final_score : -INFINITY;
  row[kColScore] = __float_as_int(score);
}

}  // namespace kernels
}  // namespace wfst
