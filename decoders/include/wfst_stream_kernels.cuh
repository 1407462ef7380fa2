// Torch-free CUDA kernels of STREAMING WFST decoding (decoders/wfst_stream.py). The search steps are the offline
// decoder's own kernels (wfst_kernels.cuh: Max, Expand, Resolve, the epsilon closure, Backtrack) run over a
// persistent workspace whose lanes are stream slots; the kernels here only move a slot between calls and keep its
// memory bounded. Semantics: the CPU reference decoders/csrc/wfst_stream_cpu.cpp.
//
// Between calls every slot's frontier lives in buffer 0 and its lane is parked (phase kDone). A call:
//   StreamBeginKernel   per lane: the frames it reads in this call (len; -1 = not in this call), full hash clear
//                       after a claims overflow, then `prepare` of step 0 (opt.stream_chunk: a chunk never reaches
//                       a final step; finalize: len = 0, so step 0 is the final step)
//   steps (wfst_kernels.cuh), then StreamParityKernel: a lane whose frames were odd ended in buffer 1: copy back.
// Opening a slot: StreamOpenKernel (the offline InitKernel for one lane) + the start closure, which `prepare`
// gives to open lanes only (kWalkStart counts live lanes; every other lane is parked).
//
// Bounded memory (word-link garbage collection, between calls, when the shared arena is half full):
//   GcMarkKernel    per frontier token: walk its chain, marking links reachable (a walk stops at a link already
//                   marked: O(reachable links)), count token references per link and tokens without a link
//   GcKidsKernel    per reachable link: count its reachable children, note one child; count each lane's roots
//   GcDrainKernel   per lane: the links from its single root down the unary chain to the first branch (or token)
//                   are on EVERY frontier token's path: drained (their arcs go to the host, which keeps the words)
//   keep = reachable and not drained; newidx = exclusive scan (cub); GcRewriteKernel compacts into `tmp`,
//   GcRemapKernel renumbers the frontier tokens' links, GcCopyBackKernel moves `tmp` back and sets the cursor.
// The arena then holds the unconverged tails only, so a stream's memory does not grow with its length.
#pragma once
#include "wfst_kernels.cuh"

namespace wfst {
namespace kernels {
namespace {

struct GcScratch {
  int32_t* mark;         // (A,) 0 unreachable, 1 reachable (kept), 2 drained
  int32_t* kids;         // (A,) reachable links whose predecessor is this link
  int32_t* tokref;       // (A,) frontier tokens whose link is this link
  int32_t* child;        // (A,) one reachable child (THE child when kids == 1)
  int32_t* owner;        // (A,) lane of a reachable link
  int32_t* keep;         // (A,) 1 = survives (input of the scan)
  int32_t* newidx;       // (A,) exclusive scan of keep
  int2* tmp;             // (A,) the compacted arena
  int32_t* roots;        // (S,) reachable links of the lane without a predecessor
  int32_t* root_id;      // (S,)
  int32_t* null_tok;     // (S,) frontier tokens without a word link (-1) or with a broken one (-2)
  int32_t* drain_count;  // (S,)
};

__device__ __forceinline__ int32_t arena_used(const Workspace& ws, int64_t arena_cap) {
  const unsigned long long c = *ws.arena_cursor;
  return static_cast<int32_t>(c < static_cast<unsigned long long>(arena_cap) ? c : arena_cap);
}

// Opens lane `lane` (the offline InitKernel for one lane), then prepares the start closure (epsilon graphs).
__global__ void __launch_bounds__(kInitBlock)
    StreamOpenKernel(DeviceGraph g, SearchOptions opt, Workspace ws, int32_t batch, int32_t F, int32_t C, int32_t H,
                     int32_t lane) {
  for (int b = threadIdx.x; b < batch; b += blockDim.x) ws.lanes[b].len = -1;  // nobody steps in this call
  if (threadIdx.x == 0) {
    LaneState& L = ws.lanes[lane];
    L.phase = g.has_eps ? kEmit : kDone;
    L.n_front = 1;
    L.n_claims = 1;
    L.n_cands = 0;
    L.pass_begin = 0;
    L.pass_end = 0;
    L.eps_pending = 0;
    L.max_ord = 0;
    L.beam = opt.search_beam;
    L.cutoff = 0.0f - opt.search_beam;
    L.overflow = 0;
    L.any_final = g.final_begin[g.start_state] < g.row_splits[g.start_state + 1];
    L.final_winner = -1;
    L.final_score = -INFINITY;
    L.flags = 0;
    const int64_t t0 = (int64_t)lane * F;
    ws.front_state[0][t0] = g.start_state;
    ws.front_score[0][t0] = 0.0f;
    ws.front_winner[0][t0] = -1;
    if (g.has_eps) {  // the start closure recombines into the start token: register it (the table is clean)
      const uint32_t h0 = hash_u32(static_cast<uint32_t>(g.start_state) + 1u) & static_cast<uint32_t>(H - 1);
      HashSlot& slot = ws.hash[(int64_t)lane * H + h0];
      slot.key = static_cast<uint32_t>(g.start_state) + 1u;
      slot.tok = 0;
      slot.val = pack(0.0f, kNoCand);
      ws.claims[t0] = static_cast<int32_t>(h0);
    } else {
      ws.claims[t0] = -1;
    }
  }
  __syncthreads();
  if (g.has_eps) prepare(g, opt, ws, batch, F, C, Prepare{kWalkStart, 0, false, false, false});
}

// Per lane: its frames in this call (lane_len, -1: not in the call), a full hash clear after a claims overflow
// (tokens past F never got a claims entry, so the targeted clear cannot see their slots), then step 0's `prepare`.
__global__ void __launch_bounds__(kInitBlock)
    StreamBeginKernel(DeviceGraph g, SearchOptions opt, Workspace ws, int32_t batch, int32_t F, int32_t C, int32_t H,
                      const int32_t* lane_len) {
  for (int b = threadIdx.x; b < batch; b += blockDim.x) ws.lanes[b].len = lane_len[b];
  __syncthreads();
  for (int b = 0; b < batch; ++b) {
    if (lane_len[b] < 0 || ws.lanes[b].n_claims <= F) continue;
    for (int h = threadIdx.x; h < H; h += blockDim.x) clear_slot(ws.hash[(int64_t)b * H + h]);
  }
  __syncthreads();
  prepare(g, opt, ws, batch, F, C, Prepare{kWalkStep, 0, false, false, false});
}

// A lane that stepped an odd number of frames holds its frontier in buffer 1: copy it to buffer 0 (block per lane).
__global__ void StreamParityKernel(Workspace ws, int32_t F, const int32_t* lane_len) {
  const int b = blockIdx.x;
  const int32_t len = lane_len[b];
  if (len <= 0 || (len & 1) == 0) return;
  const int32_t n = ws.lanes[b].n_front;
  const int64_t row = (int64_t)b * F;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    ws.front_state[0][row + i] = ws.front_state[1][row + i];
    ws.front_score[0][row + i] = ws.front_score[1][row + i];
    ws.front_winner[0][row + i] = ws.front_winner[1][row + i];
  }
}

// Results of the listed lanes (which[k]) in three launches, so the host can size the word rows exactly:
//   StreamHeadKernel   block per listed lane: head[k] = {link, score bits, flags, overflow, words}. final: the
//                      lane's final token (after the final step); else the best frontier token (smallest index
//                      among equal scores: deterministic), flags kFlagHasPath when it exists.
//   StreamCountKernel  thread per listed lane: the words on the chain (head[k][4]).
//   StreamFillKernel   thread per listed lane: the words, oldest first, into rows (n, W).
constexpr int kHeadCols = 5;

__global__ void StreamHeadKernel(Workspace ws, int32_t F, const int32_t* which, bool final, int32_t* head) {
  __shared__ float s_score[256];
  __shared__ int32_t s_idx[256];
  const int32_t b = which[blockIdx.x];
  const LaneState& L = ws.lanes[b];
  int32_t* h = head + (int64_t)blockIdx.x * kHeadCols;
  if (final) {
    if (threadIdx.x == 0) {
      const bool has_path = (L.flags & kFlagHasPath) != 0;
      h[0] = has_path ? L.final_winner : -1;
      h[1] = __float_as_int(has_path ? L.final_score : -INFINITY);
      h[2] = L.flags;
      h[3] = L.overflow;
      h[4] = 0;
    }
    return;
  }
  const int32_t n = L.n_front;
  const int64_t row0 = (int64_t)b * F;
  float best = -INFINITY;
  int32_t idx = -1;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float sc = ws.front_score[0][row0 + i];
    if (idx < 0 || sc > best) {
      best = sc;
      idx = i;
    }
  }
  s_score[threadIdx.x] = best;
  s_idx[threadIdx.x] = idx;
  __syncthreads();
  for (int d = blockDim.x / 2; d > 0; d >>= 1) {
    if (threadIdx.x < d) {
      const float so = s_score[threadIdx.x + d];
      const int32_t io = s_idx[threadIdx.x + d];
      const int32_t im = s_idx[threadIdx.x];
      if (io >= 0 && (im < 0 || so > s_score[threadIdx.x] || (so == s_score[threadIdx.x] && io < im))) {
        s_score[threadIdx.x] = so;
        s_idx[threadIdx.x] = io;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int32_t tok = s_idx[0];
    const bool has_path = tok >= 0 && s_score[0] != -INFINITY;
    h[0] = has_path ? ws.front_winner[0][row0 + tok] : -1;
    h[1] = __float_as_int(has_path ? s_score[0] : -INFINITY);
    h[2] = has_path ? kFlagHasPath : 0;
    h[3] = L.overflow;
    h[4] = 0;
  }
}

__global__ void StreamCountKernel(DeviceGraph g, Workspace ws, int32_t n, int64_t arena_cap, int32_t* head) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  int32_t* h = head + (int64_t)k * kHeadCols;
  int32_t count = 0;
  int64_t hops = 0;
  for (int32_t w = h[0]; w >= 0 && hops < arena_cap; w = ws.arena[w].x, ++hops) {
    int32_t wb, we;
    arc_word_range(g, ws.arena[w].y, wb, we);
    count += we - wb;
  }
  h[4] = count;
}

__global__ void StreamFillKernel(DeviceGraph g, Workspace ws, int32_t n, int64_t arena_cap, const int32_t* head,
                                 int32_t W, int32_t* rows) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int32_t* h = head + (int64_t)k * kHeadCols;
  int32_t* row = rows + (int64_t)k * W;
  int32_t pos = h[4];
  int64_t hops = 0;
  for (int32_t w = h[0]; w >= 0 && hops < arena_cap; w = ws.arena[w].x, ++hops) {
    int32_t wb, we;
    arc_word_range(g, ws.arena[w].y, wb, we);
    for (int32_t j = we - 1; j >= wb; --j) {
      --pos;
      if (pos < W) row[pos] = g.words[j];
    }
  }
}

// Per lane (n_front, overflow bits) into out (S, 2).
__global__ void StreamStatsKernel(Workspace ws, int32_t batch, int32_t* out) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  out[2 * b] = ws.lanes[b].n_front;
  out[2 * b + 1] = ws.lanes[b].overflow;
}

// ---- garbage collection of the word-link arena ----------------------------------------------------------------
__global__ void GcMarkKernel(Workspace ws, GcScratch gc, int32_t F, const int32_t* open) {
  const int b = blockIdx.x;
  if (!open[b]) return;
  const int32_t n = ws.lanes[b].n_front;
  const int64_t row = (int64_t)b * F;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    int32_t w = ws.front_winner[0][row + i];
    if (w < 0) {
      atomicAdd(&gc.null_tok[b], 1);
      continue;
    }
    atomicAdd(&gc.tokref[w], 1);
    while (w >= 0) {
      if (atomicExch(&gc.mark[w], 1) == 1) break;  // the rest of the chain is (being) marked by another walk
      gc.owner[w] = b;
      w = ws.arena[w].x;
    }
  }
}

__global__ void GcKidsKernel(Workspace ws, GcScratch gc, int64_t arena_cap) {
  const int32_t n = arena_used(ws, arena_cap);
  for (int32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < n; w += gridDim.x * blockDim.x) {
    if (gc.mark[w] != 1) continue;
    const int32_t p = ws.arena[w].x;
    if (p >= 0) {
      atomicAdd(&gc.kids[p], 1);
      gc.child[p] = w;
    } else {
      const int32_t b = gc.owner[w];
      atomicAdd(&gc.roots[b], 1);
      gc.root_id[b] = w;
    }
  }
}

// Thread per lane: the converged prefix (single root, unary chain, no token ends on it before the last link),
// at most D links, oldest first, into drain (S, D) as arc ids.
__global__ void GcDrainKernel(Workspace ws, GcScratch gc, int32_t batch, const int32_t* open, int32_t D,
                              int32_t* drain) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  int32_t k = 0;
  if (open[b] && gc.null_tok[b] == 0 && gc.roots[b] == 1 && D > 0) {
    int32_t x = gc.root_id[b];
    while (true) {
      drain[(int64_t)b * D + k] = ws.arena[x].y;
      ++k;
      gc.mark[x] = 2;
      if (gc.tokref[x] == 0 && gc.kids[x] == 1 && k < D) x = gc.child[x];
      else break;
    }
  }
  gc.drain_count[b] = k;
}

__global__ void GcKeepKernel(Workspace ws, GcScratch gc, int64_t arena_cap) {
  const int32_t n = arena_used(ws, arena_cap);
  for (int32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < n; w += gridDim.x * blockDim.x)
    gc.keep[w] = gc.mark[w] == 1 ? 1 : 0;
}

__global__ void GcRewriteKernel(Workspace ws, GcScratch gc, int64_t arena_cap) {
  const int32_t n = arena_used(ws, arena_cap);
  for (int32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < n; w += gridDim.x * blockDim.x) {
    if (!gc.keep[w]) continue;
    const int2 e = ws.arena[w];
    const int32_t p = (e.x >= 0 && gc.mark[e.x] == 1) ? gc.newidx[e.x] : -1;  // drained predecessor: the root now
    gc.tmp[gc.newidx[w]] = make_int2(p, e.y);
  }
}

__global__ void GcRemapKernel(Workspace ws, GcScratch gc, int32_t F, const int32_t* open) {
  const int b = blockIdx.x;
  if (!open[b]) return;
  const int32_t n = ws.lanes[b].n_front;
  const int64_t row = (int64_t)b * F;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t w = ws.front_winner[0][row + i];
    if (w >= 0) ws.front_winner[0][row + i] = gc.mark[w] == 1 ? gc.newidx[w] : -1;
  }
}

// Moves the compacted links back and sets the cursor (reads the pre-GC cursor: launch as the last GC kernel).
__global__ void GcCopyBackKernel(Workspace ws, GcScratch gc, int64_t arena_cap) {
  const int32_t n = arena_used(ws, arena_cap);
  const int32_t total = n > 0 ? gc.newidx[n - 1] + gc.keep[n - 1] : 0;
  for (int32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < total; w += gridDim.x * blockDim.x) ws.arena[w] = gc.tmp[w];
}

__global__ void GcSetCursorKernel(Workspace ws, GcScratch gc, int64_t arena_cap) {
  const int32_t n = arena_used(ws, arena_cap);
  *ws.arena_cursor = static_cast<unsigned long long>(n > 0 ? gc.newidx[n - 1] + gc.keep[n - 1] : 0);
}

}  // namespace
}  // namespace kernels
}  // namespace wfst
