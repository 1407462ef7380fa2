// Torch-free CUDA kernels of the WFST beam search. Same semantics as the CPU reference
// (decoders/csrc/wfst_cpu.cpp, the executable spec). Every kernel works on the FLATTENED items of all lanes
// (tokens, epsilon work items or candidates), so one hot lane spreads over the whole device instead of
// serialising its batchmates, and none of them loops over a lane's whole frontier in one block.
//
// Per step t (launch sequence in decoders/csrc/wfst_launch.cu):
//
//   MaxKernel      tokens     exact per-lane maximum over every candidate of the step; clears the hash slots
//                             of the previous step (token i of the frontier owns claims[i])
//   ExpandKernel   tokens     admit end > max - beam, hash recombination by destination state: a new
//                             destination claims the next token index of the frontier being built (written
//                             dead: score -inf) and every non-dominated candidate is appended
//   ResolveKernel  candidates the winner of each slot (the candidate its packed value names) writes the
//                             token's score and back-pointer (strict improvement only)
//   [TLG, E closure passes: the step's Resolve also expands the epsilon arcs of the tokens it wrote (pass 1's
//    candidates), and E more ResolveKernels resolve pass k's candidates while expanding pass k + 1's; the
//    last one only records whether anything is still changing (kOverflowEpsilon)]
//
// Tokens are expanded warp-cooperatively: a warp takes 32 tokens, scans their arc counts with shuffles and
// walks the arcs 32 at a time (owner found by a shuffle binary search), so fan-out differences never idle a
// warp for long. Counters (claims, candidates, arena) are taken once per warp and lane (warp_take). The last
// block of each kernel to finish runs `prepare` (per-lane bookkeeping: phase, k2 dynamic beam, pass bounds;
// and the exclusive scan of the next kernel's per-lane item counts). Grids are fixed and capacity-independent;
// work sizes live in device memory: the loop never synchronises the host.
//
// Epsilon closure vs the CPU reference's Jacobi passes: pass k's candidates are resolved while pass k + 1's are
// being appended, so a slot may be overtaken by a deeper candidate before its pass-k winner is read; the later
// Resolve then writes the better value. The converged closure (every score, every back-pointer up to exact
// ties) is the same; the pass count needed (the epsilon depth) and the non-convergence test (a token with
// epsilon arcs written by the last pass) are the CPU's.
#pragma once
#include <cooperative_groups.h>
#include <cuda/atomic>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "wfst_defs.h"
#include "wfst_launch.h"

namespace wfst {
namespace kernels {
// Internal linkage: every launcher TU (wfst_launch.cu, wfst_stream_launch.cu) gets its own copy of the kernels, so
// two of them can include this header without duplicate symbols at link time.
namespace {

constexpr uint32_t kEmptyKey = 0u;  // slot keys are state + 1: an all-zero slot is free (one memset clears)
constexpr uint32_t kNoCand = 0xffffffffu;  // payload of a slot set without a candidate (the start token)
constexpr int kMaxProbes = 256;
constexpr int kInitBlock = 512;
constexpr int kWalkBlock = 256;
// Rounds of 32 arcs whose loads a warp issues together in the Max and Expand walks (warp_arc_rounds_ahead): the
// per-kernel walks (streaming, BEAMDEC_WFST_PERSISTENT=0) use this one; the persistent kernel's is chosen per call
// (wfst_launch.cu arc_rounds_ahead: 2 by default on epsilon-free graphs, with the Expand walk's admitted-arc queue).
constexpr int kArcRoundsAhead = 1;

enum Phase : int32_t { kDone = 0, kEmit = 1, kFinal = 2, kRedirect = 3 };
// Emit slots: the mark of a slot value's emit payload (wfst_launch.cu emit_slots_shift leaves bit 31 free for it).
constexpr uint32_t kEmitPayloadBit = 0x80000000u;
// What the next kernel walks (chosen by `prepare`).
// kWalkClaims (emit slots, opt-in): the claimed tokens of the frontier just built, whose slots name their winners.
enum Walk : int32_t { kWalkStep = 0, kWalkStart = 1, kWalkCands = 2, kWalkClaims = 3 };
// What a ResolveKernel does with the epsilon arcs of the tokens it writes.
enum EpsMode : int32_t { kEpsNone = 0, kEpsExpand = 1, kEpsCheck = 2 };

struct LaneState {
  int32_t len;
  int32_t phase;        // phase of the current step (kEmit during its epsilon closure)
  int32_t n_front;      // tokens of the frontier (min(n_claims, F) after each resolve)
  int32_t n_claims;     // distinct destination states claimed in this step (may exceed F: overflow)
  int32_t n_cands;      // candidates appended in this step, all passes (may exceed C: overflow)
  int32_t pass_begin;   // candidates [pass_begin, pass_end) are the current Resolve pass's
  int32_t pass_end;
  int32_t eps_pending;  // the last Resolve wrote a token with epsilon arcs (closure still changing)
  uint32_t max_ord;     // ordered-int max of this step's candidate ends (0: none)
  float beam;           // k2 dynamic beam
  float cutoff;         // admission threshold of this step (kept for the epsilon closure)
  int32_t overflow;
  int32_t any_final;    // some live token of the frontier has a FINAL arc (decides the final-step redirect)
  int32_t final_winner;
  float final_score;
  int32_t flags;
  uint32_t max_next;  // fused max: ordered max of the NEXT step's candidate ends, accumulated by this step's Resolves
  int32_t max_ready;  // fused max: max_ord was taken from max_next (this step's Max walk skips the lane)
};

// One slot of a lane's recombination table: everything a candidate touches in one 16-byte cell (one memory
// sector instead of three separate arrays).
struct alignas(16) HashSlot {
  uint32_t key;              // destination state + 1 (kEmptyKey: free)
  int32_t tok;               // token index of the state in the frontier being built (-1: frontier overflow)
  unsigned long long val;    // ordered end << 32 | candidate index (0: none yet)
};

__device__ __forceinline__ void clear_slot(HashSlot& slot) {
  *reinterpret_cast<int4*>(&slot) = make_int4(0, 0, 0, 0);
}

struct Workspace {
  LaneState* lanes;         // (B,)
  int32_t* lane_offsets;    // (B+1,) exclusive prefix of the current walk's per-lane item counts
  int32_t* clear_lanes;     // (B+1,) [0] = count, then lanes whose claims list overflowed (full-table clear)
  int32_t* front_state[2];  // (B, F) each
  float* front_score[2];
  int32_t* front_winner[2];  // arena index of the token's latest word link (-1: none yet, -2: broken/dead)
  int32_t* claims;           // (B, F) hash slot of token i of the frontier being built
  HashSlot* hash;            // (B, H) recombination tables
  int2* cands;               // (B, C) {predecessor's word link, arc}
  int32_t* cand_slot;        // (B, C) hash slot of the candidate's destination
  int2* arena;               // (arena,) word links {previous link, arc}
  unsigned long long* arena_cursor;  // (1,)
  unsigned int* arrive;              // (1,) blocks of the current kernel done (last one runs `prepare`)
  // Fused max (persistent kernel only; see "Fused max" below). hash_alt / claims_alt: the table and claim list of
  // frontier buffer 1 (== hash / claims when there is one table: every other launcher).
  HashSlot* hash_alt;
  int32_t* claims_alt;
  int32_t* step_flags;      // (1,) [0]: the coming step needs its Max walk (some live lane is not max_ready)
  int32_t fused;            // set by the launcher: 0 = Max walk, 1 / 2 = fused max, lean / first arc (2 tables)
  // Emit slots (offline launcher, the default; BEAMDEC_WFST_EMIT_SLOTS=0: off; wfst_launch.cu): the emitting step
  // appends no candidates. Its slots' packed value names the winner itself -- kEmitPayloadBit | (source token <<
  // emit_shift) | the arc's offset among its token's arcs of the phase -- and the step's Resolve walks the claimed
  // tokens (kWalkClaims).
  int32_t emit_slots;
  int32_t emit_shift;
  const float* frame_max;   // (B, T) largest log-prob per frame, or null: no token skipping in the fused max
  float max_emit_weight;    // upper bound of every emitting arc's weight (with frame_max)
  int32_t arrive_acq_rel;   // set by the offline launcher (its default): arrive_and_prepare's counter as one acq_rel atomic
  // (B, F) each, or null (Capacities::token_ranges = 0): token i's emitting arc range {row_splits[s], eps_begin[s]}
  // of its state s, written with the token by the Resolve walk (and InitKernel for the start token) and read by the
  // next step's walks in place of state -> row_splits / eps_begin (resolve_step kEarly 2; the HLG form, opt-in).
  int2* front_range[2];
  // The bound max (opt-in, BEAMDEC_WFST_BOUND_MAX=1: small batches, the HLG form with carried ranges and two tables;
  // see expand_step kBound). lane_best (B,): the best (ordered score << 32 | token) among the tokens with emitting
  // arcs the last Resolve wrote; lane_live (B,): the tokens it wrote (the frontier's size for the dynamic beam: with
  // the bound, claimed tokens can stay dead).
  unsigned long long* lane_best;
  int32_t* lane_live;
};

// The table / claim list of frontier buffer `k` (a select, like `frontier` below: no runtime-indexed parameter array).
__host__ __device__ __forceinline__ HashSlot* hash_of(const Workspace& ws, int32_t k) { return k ? ws.hash_alt : ws.hash; }
__host__ __device__ __forceinline__ int32_t* claims_of(const Workspace& ws, int32_t k) {
  return k ? ws.claims_alt : ws.claims;
}

// The double-buffered frontier arrays picked by a select, not by indexing `ws.front_*[buf]` with a runtime `buf`:
// the indexed form makes nvcc copy the whole kernel-parameter `Workspace` to local memory (ptxas: 128-152 B stack
// frames in every 1-best kernel); the select keeps it in the constant bank (0 B).
struct Frontier {
  int32_t* state;
  float* score;
  int32_t* winner;
  int2* range;  // null unless the launcher carries the tokens' arc ranges (Workspace::front_range)
};
__host__ __device__ __forceinline__ Frontier frontier(const Workspace& ws, int32_t buf) {
  return buf ? Frontier{ws.front_state[1], ws.front_score[1], ws.front_winner[1], ws.front_range[1]}
             : Frontier{ws.front_state[0], ws.front_score[0], ws.front_winner[0], ws.front_range[0]};
}

// The workspace layout, walked once: with base == nullptr it only measures (bytes, each array 256-B aligned). The
// offline launcher carves it over its batch, the streaming launcher over its persistent lanes.
inline size_t carve_workspace(char* base, int32_t B, const Capacities& c, Workspace* ws) {
  constexpr size_t kAlign = 256;
  size_t off = 0;
  auto take = [&](size_t bytes) -> void* {
    void* p = base ? base + off : nullptr;
    off += (bytes + kAlign - 1) / kAlign * kAlign;
    return p;
  };
  const size_t BF = static_cast<size_t>(B) * c.frontier;
  const size_t BH = static_cast<size_t>(B) * c.hash;
  const size_t BC = static_cast<size_t>(B) * c.candidates;
  Workspace w{};
  w.lanes = static_cast<LaneState*>(take(sizeof(LaneState) * B));
  w.lane_offsets = static_cast<int32_t*>(take(sizeof(int32_t) * (B + 1)));
  w.clear_lanes = static_cast<int32_t*>(take(sizeof(int32_t) * (B + 1)));
  w.lane_best = static_cast<unsigned long long*>(take(sizeof(unsigned long long) * B));
  w.lane_live = static_cast<int32_t*>(take(sizeof(int32_t) * B));
  for (int k = 0; k < 2; ++k) {
    w.front_state[k] = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
    w.front_score[k] = static_cast<float*>(take(sizeof(float) * BF));
    w.front_winner[k] = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
  }
  if (c.token_ranges)
    for (int k = 0; k < 2; ++k) w.front_range[k] = static_cast<int2*>(take(sizeof(int2) * BF));
  w.claims = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
  w.hash = static_cast<HashSlot*>(take(sizeof(HashSlot) * BH));
  w.claims_alt = w.claims;
  w.hash_alt = w.hash;
  if (c.hash_tables == 2) {
    w.claims_alt = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
    w.hash_alt = static_cast<HashSlot*>(take(sizeof(HashSlot) * BH));
  }
  w.cands = static_cast<int2*>(take(sizeof(int2) * BC));
  w.cand_slot = static_cast<int32_t*>(take(sizeof(int32_t) * BC));
  w.arena = static_cast<int2*>(take(sizeof(int2) * static_cast<size_t>(c.arena)));
  w.arena_cursor = static_cast<unsigned long long*>(take(sizeof(unsigned long long)));
  w.arrive = static_cast<unsigned int*>(take(sizeof(unsigned int)));
  w.step_flags = static_cast<int32_t*>(take(sizeof(int32_t)));
  if (ws) *ws = w;
  return off;
}

// ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ float load_lp(const float* p) { return *p; }
__device__ __forceinline__ float load_lp(const __half* p) { return __half2float(*p); }

template <typename T>
__device__ __forceinline__ T ld_volatile(const T& x) {
  return *reinterpret_cast<const volatile T*>(&x);
}

__device__ __forceinline__ unsigned long long pack(float end, uint32_t cand) {
  return (static_cast<unsigned long long>(float_to_ordered(end)) << 32) | cand;
}

// Block-wide exclusive scan of one int per thread (any blockDim.x <= 1024); `total` gets the block sum.
// Ends with a barrier so the shared scratch can be reused by the next call.
__device__ __forceinline__ int block_exclusive_scan(int x, int& total) {
  __shared__ int warp_sums[32];
  __shared__ int block_total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  int inc = x;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, inc, d);
    if (lane >= d) inc += y;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    const int v = lane < warps ? warp_sums[lane] : 0;
    int w = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += y;
    }
    if (lane < warps) warp_sums[lane] = w - v;
    if (lane == warps - 1) block_total = w;
  }
  __syncthreads();
  const int result = warp_sums[warp] + inc - x;
  total = block_total;
  __syncthreads();
  return result;
}

// Warp-synchronous (all 32 threads call it): each thread with `pred` takes the next index of its counter
// `*ctr`; threads whose counters are the same share one atomic (a warp's items mostly belong to one lane, so
// a lane's counter sees about one atomic per warp instead of one per thread). Returns -1 where !pred.
template <typename T>
__device__ __forceinline__ T warp_take(T* ctr, bool pred) {
  if (__ballot_sync(0xffffffffu, pred) == 0u) return T(-1);
  const unsigned long long key = pred ? reinterpret_cast<unsigned long long>(ctr) : 0ull;
  const unsigned peers = __match_any_sync(0xffffffffu, key);
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(peers) - 1;
  T base = 0;
  if (pred && lane == leader) base = atomicAdd(ctr, static_cast<T>(__popc(peers)));
  base = __shfl_sync(0xffffffffu, base, leader);
  return pred ? base + static_cast<T>(__popc(peers & ((1u << lane) - 1u))) : T(-1);
}

// ---------------------------------------------------------------------------------------------------
// prepare: run by ONE block (the last block of the kernel before, or InitKernel). Per lane, the bookkeeping
// that must happen between two walks, then the exclusive scan of the next walk's item counts.
struct Prepare {
  int32_t next;        // Walk
  int32_t t;           // kWalkStep: the step about to start
  bool eps_check;      // the closure just ended: a token with epsilon arcs written by its last pass = not converged
  bool after_resolve;  // n_front <- min(n_claims, F)
  bool step_cutoff;    // kWalkCands after the step's expansion: cutoff <- max - beam (for the closure)
  bool fused_max = false;  // kWalkStep after the Resolves of the step before, which accumulated its max_next
};

// kBound: the bound max's bookkeeping (expand_step kBound; a template argument, so the other kernels are unchanged)
template <bool kBound = false>
__device__ __forceinline__ void prepare(const DeviceGraph& g, const SearchOptions& opt, Workspace& ws,
                                        int32_t batch, int32_t F, int32_t C, const Prepare& p) {
  __shared__ int s_clear, s_need_max;
  if (threadIdx.x == 0) s_clear = 0, s_need_max = 0;
  __syncthreads();
  const bool start_eps = g.eps_begin[g.start_state] < g.final_begin[g.start_state];
  int running = 0;
  for (int base = 0; base < batch; base += blockDim.x) {
    const int b = base + threadIdx.x;
    int count = 0;
    if (b < batch) {
      // One snapshot of the fields read (independent loads in flight together: this runs in a serial tail).
      LaneState& L = ws.lanes[b];
      const int32_t len = ld_volatile(L.len), phase_before = ld_volatile(L.phase);
      const int32_t n_claims = ld_volatile(L.n_claims), n_cands = ld_volatile(L.n_cands);
      const int32_t pass_end = ld_volatile(L.pass_end), n_front_old = ld_volatile(L.n_front);
      const int32_t pending = ld_volatile(L.eps_pending), any_final = ld_volatile(L.any_final);
      const uint32_t max_ord = ld_volatile(L.max_ord);
      const float beam = ld_volatile(L.beam);
      const bool live = phase_before != kDone;
      const int32_t n_front = p.after_resolve && live ? min(n_claims, F) : n_front_old;
      if (p.after_resolve && live) L.n_front = n_front;
      if (p.eps_check && pending && phase_before == kEmit) atomicOr(&L.overflow, kOverflowEpsilon);
      // (after the step's expansion, the only prepare with step_cutoff: the Expand has read them, the Resolve refills)
      if (kBound && p.step_cutoff) ws.lane_best[b] = 0ull, ws.lane_live[b] = 0;
      if (p.next == kWalkStep) {
        int32_t phase = p.t < len ? kEmit : (p.t == len ? kFinal : kDone);
        if (phase == kFinal && opt.stream_chunk) phase = kDone;  // the stream goes on after this chunk
        if (phase == kFinal && opt.allow_partial && !any_final) phase = kRedirect;
        if (phase != kDone) {
          if (n_claims > F && live) ws.clear_lanes[1 + atomicAdd(&s_clear, 1)] = b;
          // (the bound max: the tokens the Resolves wrote; claimed tokens that did not beat the cutoff stay dead)
          const int32_t active = kBound ? min(ld_volatile(ws.lane_live[b]), F) : n_front;
          L.beam = k2_dynamic_beam(beam, opt.search_beam, opt.min_active, opt.max_active, active, p.t,
                                   opt.online && phase == kEmit ? kUnknownFrames : len + 1);
          L.n_claims = 0;
          L.n_cands = 0;
          L.pass_begin = 0;
          L.pass_end = 0;
          // Fused max: an emitting step after Resolves that accumulated its max over every token they wrote (all of
          // this step's frontier) starts from that max and skips the Max walk; any other lane needs the walk.
          const bool ready = ws.fused && p.fused_max && phase == kEmit;
          // The bound max: an emitting step after Resolves that named a best token skips the Max walk too; its Expand
          // admits against that token's best arc and accumulates the maximum from 0.
          const bool bounded = kBound && p.fused_max && phase == kEmit && ld_volatile(ws.lane_best[b]) != 0ull;
          L.max_ord = ready ? ld_volatile(L.max_next) : 0u;
          L.max_ready = ready || bounded;
          if (!ready && !bounded) s_need_max = 1;
          L.any_final = 0;
          count = n_front;
        }
        L.phase = phase;
        L.max_next = 0u;  // the next step's max, accumulated by this step's Resolves
      } else if (p.next == kWalkStart) {  // the start token's epsilon arcs (lanes being opened only)
        count = start_eps && live ? 1 : 0;
      } else if (p.next == kWalkClaims) {  // emit slots: the step's claimed tokens; no candidate consumed
        if (p.step_cutoff && live) L.cutoff = ordered_to_float(max_ord) - beam;
        L.pass_begin = 0;
        L.pass_end = 0;
        L.eps_pending = 0;
        count = live ? min(n_claims, F) : 0;
      } else {  // kWalkCands: the candidates appended since the last pass
        if (p.step_cutoff && live) L.cutoff = ordered_to_float(max_ord) - beam;
        const int32_t end = min(n_cands, C);
        L.pass_begin = pass_end;
        L.pass_end = end;
        L.eps_pending = 0;
        count = live ? max(0, end - pass_end) : 0;
      }
    }
    int chunk_total;
    const int ex = block_exclusive_scan(count, chunk_total);
    if (b < batch) ws.lane_offsets[b] = running + ex;
    running += chunk_total;
  }
  if (threadIdx.x == 0) {
    ws.lane_offsets[batch] = running;
    ws.clear_lanes[0] = s_clear;
    if (p.next == kWalkStep) ws.step_flags[0] = s_need_max;
  }
}

// Every block calls this at its end; the last one to arrive runs `prepare` and re-arms the counter
// (threadFenceReduction pattern). The block's writes are ordered before its arrival by the block barrier and thread
// 0's release; the last block acquires every earlier arrival's writes before it prepares.
// ws.arrive_acq_rel (the offline launcher's default; BEAMDEC_WFST_ACQ_REL_ARRIVE=0: off, wfst_launch.cu) does both with one atom.add.acq_rel.gpu,
// as the cooperative-groups grid barrier does on sm_70+ (atom.add.release / ld.acquire), instead of a
// __threadfence() (fence.sc.gpu, MEMBAR.SC.GPU in the SASS: a sequentially consistent fence, stronger than the
// pattern needs) before a relaxed atomic in every block and a second one in the last block. At batch 1 the last
// block's fence, atomic and fence are on the step's serial path twice a step (after the Expand and Resolve walks).
template <bool kBound = false>
__device__ __forceinline__ void arrive_and_prepare(const DeviceGraph& g, const SearchOptions& opt, Workspace& ws,
                                                   int32_t batch, int32_t F, int32_t C, const Prepare& p) {
  __shared__ bool s_last;
  const bool acq_rel = ws.arrive_acq_rel != 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned prev;
    if (acq_rel) {
      prev = cuda::atomic_ref<unsigned, cuda::thread_scope_device>(*ws.arrive)
                 .fetch_add(1u, cuda::std::memory_order_acq_rel);
    } else {
      __threadfence();
      prev = atomicAdd(ws.arrive, 1u);
    }
    s_last = prev == gridDim.x - 1;
  }
  __syncthreads();  // (acq_rel: thread 0's acquire, then this barrier, orders the block's reads after it)
  if (!s_last) return;
  if (!acq_rel) __threadfence();
  prepare<kBound>(g, opt, ws, batch, F, C, p);
  if (threadIdx.x == 0) *ws.arrive = 0u;
}

// ---------------------------------------------------------------------------------------------------
// Init (one block): every lane's start token, then `prepare` for the first walk (the start token's epsilon arcs
// on epsilon graphs: its closure runs with cutoff -search_beam; else step 0).
__global__ void __launch_bounds__(kInitBlock)
    InitKernel(DeviceGraph g, SearchOptions opt, Workspace ws, const int32_t* lengths, int32_t batch, int32_t F,
               int32_t C, int32_t H) {
  const uint32_t h0 = hash_u32(static_cast<uint32_t>(g.start_state) + 1u) & static_cast<uint32_t>(H - 1);
  for (int b = threadIdx.x; b < batch; b += blockDim.x) {
    LaneState& L = ws.lanes[b];
    L.len = lengths[b];
    L.phase = kEmit;
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
    L.max_next = 0u;
    L.max_ready = 0;
    const int64_t t0 = (int64_t)b * F;
    ws.front_state[0][t0] = g.start_state;
    ws.front_score[0][t0] = 0.0f;
    ws.front_winner[0][t0] = -1;
    if (ws.front_range[0]) ws.front_range[0][t0] = make_int2(g.row_splits[g.start_state], g.eps_begin[g.start_state]);
    ws.lane_best[b] = 0ull;  // step 0 runs the Max walk (its prepare has no Resolve before it)
    ws.lane_live[b] = 1;     // the start token
    if (g.has_eps) {  // the start closure recombines into the start token: register it
      HashSlot& slot = ws.hash[(int64_t)b * H + h0];
      slot.key = static_cast<uint32_t>(g.start_state) + 1u;
      slot.tok = 0;
      slot.val = pack(0.0f, kNoCand);
      ws.claims[t0] = static_cast<int32_t>(h0);
    } else {
      ws.claims[t0] = -1;  // nothing to clear
    }
  }
  __syncthreads();
  if (g.has_eps) prepare(g, opt, ws, batch, F, C, Prepare{kWalkStart, 0, false, false, false});
  else prepare(g, opt, ws, batch, F, C, Prepare{kWalkStep, 0, false, true, false});
}

// ---------------------------------------------------------------------------------------------------
// Largest index i in [lo, hi) with a[i] <= x (a non-decreasing, a[lo] <= x).
__device__ __forceinline__ int32_t upper_index(const int32_t* a, int32_t lo, int32_t hi, int32_t x) {
  while (hi - lo > 1) {
    int32_t mid = (lo + hi) >> 1;
    if (a[mid] <= x) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Walks the flattened items of all lanes (lane_offsets): each warp owns a contiguous span of ceil(total /
// warps) items and visits it min(32, span) items at a time, so a small step (one utterance, a few thousand
// tokens) spreads over many warps that each take one latency-bound round instead of a few warps taking many
// (H200, bench TLG, batch 1: ExpandKernel 34.6 -> 11.6 µs per step). Keeping whole-warp spans for the candidate
// walks only (fewer counter atomics per item) measured 3-5 % slower end to end at every batch size.
// `f(valid, lane, local_index)` is called by all 32 threads (warp-synchronous), valid = the thread has an item.
// Lane cursors only move forward along a span.
template <typename Fn>
__device__ __forceinline__ void for_each_item(const Workspace& ws, int32_t batch, Fn f) {
  const int32_t total = ws.lane_offsets[batch];
  if (total == 0) return;
  const int32_t warps = (gridDim.x * blockDim.x) >> 5;
  const int32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int32_t span = (total + warps - 1) / warps;
  const int32_t chunk = min(32, span);
  const int32_t begin = warp * span;
  const int32_t end = min(total, begin + span);
  const int32_t lane = threadIdx.x & 31;
  int32_t lane_id = 0, lane_begin = 0, lane_end = 0;
  bool have = false;
  for (int32_t base = begin; base < end; base += chunk) {
    const int32_t item = base + lane;
    const bool valid = lane < chunk && item < end;
    if (valid && (!have || item >= lane_end)) {
      lane_id = upper_index(ws.lane_offsets, have ? lane_id : 0, batch, item);
      lane_begin = ws.lane_offsets[lane_id];
      lane_end = ws.lane_offsets[lane_id + 1];
      have = true;
    }
    f(valid, lane_id, item - lane_begin);
  }
}

// One arc of a token to score: the token's lane, index, score and word link, and the arc.
struct ArcItem {
  int32_t lane;
  int32_t tok;
  float score;
  int32_t link;
  int32_t arc;
  int32_t off;  // arc - the first arc of the token's range
};

// The warp's arc counts: `incl` / `excl` the inclusive / exclusive prefix of the 32 threads' `deg`; returns the total.
__device__ __forceinline__ int warp_arc_counts(int deg, int& incl, int& excl) {
  const int lane = threadIdx.x & 31;
  incl = deg;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += y;
  }
  excl = incl - deg;
  return __shfl_sync(0xffffffffu, incl, 31);
}

// The warp's arc number `j` (all 32 threads call it): its owner -- the first thread whose inclusive count exceeds j,
// found by a shuffle binary search (31 for j >= the total: a valid thread to read) -- and that owner's token fields.
__device__ __forceinline__ ArcItem warp_arc_item(int j, int incl, int excl, int32_t b, int32_t tok, float score,
                                                 int32_t link, int32_t phase, int32_t begin, int32_t& ph) {
  int owner = 0;
#pragma unroll
  for (int step = 16; step; step >>= 1) {
    const int v = __shfl_sync(0xffffffffu, incl, owner + step - 1);
    if (v <= j) owner += step;
  }
  ArcItem it;
  it.off = j - __shfl_sync(0xffffffffu, excl, owner);
  it.arc = __shfl_sync(0xffffffffu, begin, owner) + it.off;
  it.lane = __shfl_sync(0xffffffffu, b, owner);
  it.tok = __shfl_sync(0xffffffffu, tok, owner);
  it.score = __shfl_sync(0xffffffffu, score, owner);
  it.link = __shfl_sync(0xffffffffu, link, owner);
  ph = __shfl_sync(0xffffffffu, phase, owner);
  return it;
}

// Warp-cooperative rounds over the arcs [begin, begin + deg) of the warp's 32 tokens (one per thread; deg = 0
// for none): arc counts are scanned with shuffles and the arcs visited 32 at a time, each thread finding its
// arc's owner by a shuffle binary search. `on_arc(valid, const ArcItem&, phase)` is called by all 32 threads
// (warp-synchronous) once per round, valid = the thread has an arc. Must be called by the whole warp.
template <typename ArcFn>
__device__ __forceinline__ void warp_arc_rounds(int32_t b, int32_t tok, float score, int32_t link, int32_t phase,
                                                int32_t begin, int32_t deg, ArcFn on_arc) {
  const int lane = threadIdx.x & 31;
  int incl, excl;
  const int total = warp_arc_counts(deg, incl, excl);
  for (int j0 = 0; j0 < total; j0 += 32) {
    int32_t ph;
    const ArcItem it = warp_arc_item(j0 + lane, incl, excl, b, tok, score, link, phase, begin, ph);
    on_arc(j0 + lane < total, it, ph);
  }
}

// The words of one arc the walks read first: its label and weight, and with kDest its destination.
struct ArcWords {
  int32_t il;
  float weight;
  int32_t dest;
};

template <bool kDest>
__device__ __forceinline__ ArcWords fetch_arc(const DeviceGraph& g, int32_t arc) {
  ArcWords w;
  w.weight = g.weight[arc];
  w.dest = kDest ? g.dest[arc] : 0;
  w.il = g.ilabel[arc];
  return w;
}

// warp_arc_rounds with the memory latency of K rounds overlapped: the loads of K consecutive rounds of 32 arcs are
// issued together -- each arc's words (fetch_arc), then `score_arc(valid, const ArcItem&, phase, const ArcWords&)`
// (no branches, atomics or volatile accesses: the loads that depend on the words) -- then
// each round's dependent work runs in round order (`commit(valid, const ArcItem&, phase, const S& scored)`,
// warp-synchronous like on_arc). A warp with several rounds -- a high-degree token at batch 1 (the small char HLG:
// a step's slowest warp walks 3-4 rounds where the mean warp walks 1.5), dozens of tokens per warp at batch 200 --
// otherwise pays one chain of dependent loads (arc, then log-prob) per round. The rounds are scored ahead
// unconditionally (a lane past the end reads arc 0 and its lane's first log-prob row, valid = false: the result is
// unused), so no branch separates their loads; the commits of rounds past the end are skipped (warp-uniform). K = 1 is warp_arc_rounds' order exactly.
// `group0` / `groups` (the spread walk, walk_token_arcs): this warp walks groups group0, group0 + groups, ... of K
// rounds (32 K arcs) only; 0 / 1 walks them all.
template <int K, bool kDest, typename ScoreFn, typename CommitFn>
__device__ __forceinline__ void warp_arc_rounds_ahead(const DeviceGraph& g, int32_t b, int32_t tok, float score,
                                                      int32_t link, int32_t phase, int32_t begin, int32_t deg,
                                                      ScoreFn score_arc, CommitFn commit, int32_t group0 = 0,
                                                      int32_t groups = 1) {
  static_assert(K >= 1 && K <= 4, "1 to 4 rounds ahead");  // (4: +5 % at batch 1, -13 % at 200: wfst_launch.cu)
  const int lane = threadIdx.x & 31;
  int incl, excl;
  const int total = warp_arc_counts(deg, incl, excl);
  using Scored = decltype(score_arc(false, ArcItem{}, 0, ArcWords{}));
  for (int j0 = 32 * K * group0; j0 < total; j0 += 32 * K * groups) {
    ArcItem it[K];
    int32_t ph[K];
    ArcWords words[K];
    Scored sc[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
      it[k] = warp_arc_item(j0 + 32 * k + lane, incl, excl, b, tok, score, link, phase, begin, ph[k]);
    // every round's arc words first (a thread without an arc reads arc 0's), then the loads that depend on them
#pragma unroll
    for (int k = 0; k < K; ++k) words[k] = fetch_arc<kDest>(g, j0 + 32 * k + lane < total ? it[k].arc : 0);
#pragma unroll
    for (int k = 0; k < K; ++k) sc[k] = score_arc(j0 + 32 * k + lane < total, it[k], ph[k], words[k]);
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (k == 0 || j0 + 32 * k < total) commit(j0 + 32 * k + lane < total, it[k], ph[k], sc[k]);
  }
}

// The first arc a frontier token walks in `phase` (not the start closure): the final phase walks the state's final
// arcs, the emitting and redirect phases start at its first arc. walk_token_arcs and the emit-slots Resolve (which
// turns a slot's arc offset back into an arc) share it, so the two cannot disagree on where a phase's range begins.
__device__ __forceinline__ int32_t phase_arcs_begin(const DeviceGraph& g, int32_t s, int32_t phase) {
  return phase == kFinal ? g.final_begin[s] : g.row_splits[s];
}

// Arc walk of the frontier tokens in `buf` given by the current items. kStart: the start token's epsilon arcs
// (the start closure); else every token's arcs of its lane's phase. `on_token(lane, tok)` runs once per item.
// skip_ready: lanes whose step max is already known (max_ready, fused max) walk no arcs.
// The arcs are walked by warp_arc_rounds_ahead<K, kDest>: `score_arc` and `commit` as there.
// kSpread (the HLG form's default, BEAMDEC_WFST_SPREAD=0 turns it off: wfst_launch.cu): a step with at most warps / 2
// items gives each item R = warps / items warps instead of one, and warp r of an item walks its groups of K rounds r,
// r + R, ... (each arc still exactly once; on_token runs in warp 0 of the item only). At batch 1 on the bench char HLG most steps are
// this small and a lone warp walks a wide state's groups one after the other (eval/bench/probes/wfst_step_sim.py:
// 82 % of the steps; their slowest warp 1.96 -> 1.00 groups of 2 rounds). The choice depends on the step's item
// count only, which every warp reads after the same barrier, so it is grid-uniform.
// kRange (the carried ranges, resolve_step kEarly 2): an emitting step reads the token's arc range from the frontier
// (Workspace::front_range, loaded beside its state, score and link) instead of from its state's row_splits /
// eps_begin, one dependent load later; the final and redirect steps still look the state up.
template <bool kStart, int K, bool kDest, bool kSpread = false, bool kRange = false, typename TokFn, typename ScoreFn,
          typename CommitFn>
__device__ __forceinline__ void walk_token_arcs(const DeviceGraph& g, const Workspace& ws, int32_t batch,
                                                int32_t buf, int32_t F, TokFn on_token, ScoreFn score_arc,
                                                CommitFn commit, bool skip_ready = false) {
  auto token = [&](bool valid, int32_t b, int32_t tok, int32_t group0, int32_t groups) {
    int32_t begin = 0, deg = 0, link = -1, phase = kDone;
    float score = -INFINITY;
    if (valid) {
      const int64_t at = (int64_t)b * F + tok;
      phase = ws.lanes[b].phase;
      if (group0 == 0) on_token(b, tok);  // once per item: its first warp
      const int32_t s = frontier(ws, buf).state[at];
      score = frontier(ws, buf).score[at];
      link = frontier(ws, buf).winner[at];
      int2 range = make_int2(0, 0);
      if constexpr (kRange && !kStart) range = frontier(ws, buf).range[at];
      if (score != -INFINITY && !(skip_ready && ws.lanes[b].max_ready)) {
        if (kStart) {
          begin = g.eps_begin[s];
          deg = g.final_begin[s] - begin;
        } else if (kRange && phase == kEmit) {
          begin = range.x;
          deg = range.y - range.x;
        } else {  // kEmit: the emitting arcs; kFinal: the final arcs; kRedirect: every arc (to the final state)
          begin = phase_arcs_begin(g, s, phase);
          deg = (phase == kEmit ? g.eps_begin[s] : g.row_splits[s + 1]) - begin;
        }
      }
    }
    warp_arc_rounds_ahead<K, kDest>(g, b, tok, score, link, phase, begin, deg, score_arc, commit, group0, groups);
  };
  if constexpr (kSpread) {
    const int32_t total = ws.lane_offsets[batch];
    const int32_t warps = (gridDim.x * blockDim.x) >> 5;
    if (total > 0 && 2 * total <= warps) {
      const int32_t R = warps / total;
      const int32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
      const int32_t item = warp / R;
      if (item >= total) return;  // warp-uniform: the last warps / total - R * total warps have no item
      const int32_t b = upper_index(ws.lane_offsets, 0, batch, item);
      token((threadIdx.x & 31) == 0, b, item - ws.lane_offsets[b], warp % R, R);
      return;
    }
  }
  for_each_item(ws, batch, [&](bool valid, int32_t b, int32_t tok) { token(valid, b, tok, 0, 1); });
}

// The word boosts of `arc` for `lane` added to `ll` (in the arc's word order, as the CPU reference adds them).
__device__ __forceinline__ float add_word_boosts(const DeviceGraph& g, int32_t arc, float ll, const int32_t* boost_keys,
                                                 const float* boost_values, int32_t boost_cap, int32_t lane) {
  int32_t wb, we;
  arc_word_range(g, arc, wb, we);
  for (int32_t k = wb; k < we; ++k)
    ll = __fadd_rn(ll, boost_lookup(boost_keys + (int64_t)lane * boost_cap, boost_values + (int64_t)lane * boost_cap,
                                    boost_cap, g.words[k]));
  return ll;
}

// Log-likelihood of taking an arc (its words `w`) on this step before word boosts: acoustic (emitting phase only, not
// kEps) + weight, rounded as the CPU reference does. Written without branches: the log-prob is loaded for every arc
// (at column 0 for a label that is not a token, and from `row` -- a valid row of the lane -- in every phase) and
// selected away where it does not count, so the walks that score several rounds of arcs at once (warp_arc_rounds_ahead) issue all their loads
// in one straight run; a branch between them would order each round's loads after the previous round's.
template <typename scalar_t, bool kEps>
__device__ __forceinline__ float arc_base_loglik(const SearchOptions& opt, const ArcWords& w, bool emit_phase,
                                                 const scalar_t* row) {
  float acoustic = 0.0f;
  if constexpr (!kEps) {
    const float x = load_lp(row + max(w.il, 0));
    acoustic = emit_phase && w.il >= 0 ? __fmul_rn(x, opt.acoustic_scale) : 0.0f;
  }
  return __fadd_rn(acoustic, w.weight);
}

// Log-likelihood of taking the emitting `arc` on the frame `row`, word boosts included (the fused max's scoring).
template <typename scalar_t>
__device__ __forceinline__ float emit_arc_loglik(const DeviceGraph& g, const SearchOptions& opt, int32_t arc,
                                                 const scalar_t* row, const int32_t* boost_keys,
                                                 const float* boost_values, int32_t boost_cap, int32_t lane) {
  const float ll = arc_base_loglik<scalar_t, false>(opt, fetch_arc<false>(g, arc), true, row);
  return boost_cap > 0 ? add_word_boosts(g, arc, ll, boost_keys, boost_values, boost_cap, lane) : ll;
}

// The log-prob row an arc of `a` reads in `phase` (the frame t row when emitting, the lane's first row otherwise:
// any valid row, arc_base_loglik selects the value away), and the first row of its lane for a thread without an arc.
template <typename scalar_t>
__device__ __forceinline__ const scalar_t* arc_row(const scalar_t* lp, int32_t T, int32_t V, int32_t t, bool valid,
                                                   const ArcItem& a, int32_t phase) {
  // a.lane is a lane of the batch even without an arc (the walks' lane index starts at 0)
  const int32_t frame = valid && phase == kEmit ? t : 0;
  return lp + ((int64_t)a.lane * T + frame) * V;
}

// ---------------------------------------------------------------------------------------------------
// Clearing the recombination table of frontier buffer `buf` (the step that built `buf` claimed its slots): the
// slot token `tok` claimed, and the whole tables of the lanes whose claim lists overflowed (clear_lanes).
__device__ __forceinline__ void clear_claim(const Workspace& ws, int32_t buf, int32_t F, int32_t H, int32_t b,
                                            int32_t tok) {
  const int32_t h = claims_of(ws, buf)[(int64_t)b * F + tok];
  if (h >= 0) clear_slot(hash_of(ws, buf)[(int64_t)b * H + h]);
}

__device__ __forceinline__ void clear_claimed(const Workspace& ws, int32_t buf, int32_t F, int32_t H, int32_t batch) {
  const int32_t n_clear = ws.clear_lanes[0];
  HashSlot* table = hash_of(ws, buf);
  for (int32_t k = 0; k < n_clear; ++k) {
    const int64_t base = (int64_t)ws.clear_lanes[1 + k] * H;
    for (int64_t h = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; h < H; h += (int64_t)gridDim.x * blockDim.x) {
      clear_slot(table[base + h]);
    }
  }
}

// A thread's running maximum of ordered arc ends, lane by lane (a walk visits one lane's items before the next's):
// a guarded atomicMax into the lane's max_ord (kNext: max_next) whenever the lane changes (add), and at the end one per
// (warp, lane) after combining the warp's threads that hold the same lane (warp_flush; all 32 threads call it).
template <bool kNext = false>
struct LaneMax {
  int32_t lane = -1;
  uint32_t max = 0u;
  __device__ __forceinline__ void flush(Workspace& ws) {
    if (lane >= 0 && max > 0u) {
      uint32_t* p = kNext ? &ws.lanes[lane].max_next : &ws.lanes[lane].max_ord;
      if (max > ld_volatile(*p)) atomicMax(p, max);
    }
  }
  __device__ __forceinline__ void add(Workspace& ws, int32_t l, uint32_t o) {
    if (l != lane) {
      flush(ws);
      lane = l;
      max = 0u;
    }
    if (o > max) max = o;
  }
  __device__ __forceinline__ void warp_flush(Workspace& ws) {
    const unsigned peers = __match_any_sync(0xffffffffu, lane);
    const uint32_t m = __reduce_max_sync(peers, max);
    if ((threadIdx.x & 31) == __ffs(peers) - 1) {
      max = m;
      flush(ws);
    }
  }
};

// Max: exact per-lane maximum of this step's candidate ends. Also clears the previous step's hash slots
// (token i owns claims[i]), or a whole lane's table when its claims list overflowed.
template <typename scalar_t, int K = kArcRoundsAhead, bool kSpread = false, bool kRange = false, bool kBound = false>
__device__ __forceinline__ void max_step(const DeviceGraph& g, const SearchOptions& opt, Workspace& ws,
                                         const scalar_t* lp, int32_t T, int32_t V, int32_t t, int32_t buf, int32_t F,
                                         int32_t H, int32_t batch, const int32_t* boost_keys,
                                         const float* boost_values, int32_t boost_cap) {
  // fused max or bound max: the tables are cleared by the Expand walk instead (expand_step), ready lanes skipped
  const bool fused = kBound || ws.fused;
  if (!fused) clear_claimed(ws, buf, F, H, batch);
  int32_t cur_lane = -1;  // (LaneMax's steps, written out: this kernel's instruction schedule is the measured one)
  uint32_t cur_max = 0;
  auto flush = [&]() {
    if (cur_lane >= 0 && cur_max > 0) {
      uint32_t* p = &ws.lanes[cur_lane].max_ord;
      if (cur_max > ld_volatile(*p)) atomicMax(p, cur_max);
    }
  };
  walk_token_arcs<false, K, false, kSpread, kRange>(
      g, ws, batch, buf, F,
      [&](int32_t b, int32_t tok) {
        if (!fused) clear_claim(ws, buf, F, H, b, tok);
      },
      [&](bool valid, const ArcItem& a, int32_t phase, const ArcWords& w) -> float {
        return arc_base_loglik<scalar_t, false>(opt, w, phase == kEmit, arc_row(lp, T, V, t, valid, a, phase));
      },
      [&](bool valid, const ArcItem& a, int32_t, float ll) {
        if (!valid) return;
        if (boost_cap > 0) ll = add_word_boosts(g, a.arc, ll, boost_keys, boost_values, boost_cap, a.lane);
        const uint32_t o = float_to_ordered(__fadd_rn(a.score, ll));
        if (a.lane != cur_lane) {
          flush();
          cur_lane = a.lane;
          cur_max = 0;
        }
        if (o > cur_max) cur_max = o;
      },
      fused);
  // Combine threads of the warp that hold the same lane, then one guarded atomic per (warp, lane).
  const unsigned peers = __match_any_sync(0xffffffffu, cur_lane);
  const uint32_t m = __reduce_max_sync(peers, cur_max);
  if ((threadIdx.x & 31) == __ffs(peers) - 1) {
    cur_max = m;
    flush();
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kWalkBlock)
    MaxKernel(DeviceGraph g, SearchOptions opt, Workspace ws, const scalar_t* lp, int32_t T, int32_t V, int32_t t,
              int32_t buf, int32_t F, int32_t H, int32_t batch, const int32_t* boost_keys, const float* boost_values,
              int32_t boost_cap) {
  max_step<scalar_t>(g, opt, ws, lp, T, V, t, buf, F, H, batch, boost_keys, boost_values, boost_cap);
}

// Hash insert of state `state` in a lane's table: returns the slot (and whether this thread claimed it) or -1, and
// what the slot held: one 16-byte load per probe (key, token, packed value), so an arc whose destination is already
// in the table has the slot's best end without a second round trip. `seen`: the packed
// value at the probe (0 for a slot this thread claimed). Its high word (the ordered end) is one 32-bit word, read
// whole; the value only grows (atomicMax), so a stale read admits more candidates, never fewer.
__device__ __forceinline__ int32_t hash_insert_read(HashSlot* table, int32_t H, int32_t state, bool& claimed,
                                                    unsigned long long& seen) {
  claimed = false;
  seen = 0ull;
  const uint32_t key = static_cast<uint32_t>(state) + 1u;
  uint32_t h = hash_u32(key) & static_cast<uint32_t>(H - 1);
  const int probes = H < kMaxProbes ? H : kMaxProbes;
  for (int p = 0; p < probes; ++p) {
    uint32_t k, tok_word, lo, hi;  // the slot's four words in one volatile 16-byte load
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(k), "=r"(tok_word), "=r"(lo), "=r"(hi)
                 : "l"(&table[h]));
    (void)tok_word;
    if (k == key) {
      seen = static_cast<unsigned long long>(lo) | (static_cast<unsigned long long>(hi) << 32);
      return static_cast<int32_t>(h);
    }
    if (k == kEmptyKey) {
      const uint32_t old = atomicCAS(&table[h].key, kEmptyKey, key);
      if (old == kEmptyKey) {
        claimed = true;
        return static_cast<int32_t>(h);
      }
      if (old == key) {
        seen = ld_volatile(table[h].val);
        return static_cast<int32_t>(h);
      }
    }
    h = (h + 1) & static_cast<uint32_t>(H - 1);
  }
  return -1;
}

// warp_take of two counters at once (each thread may take from both): the two atomics are in flight together.
template <typename T>
__device__ __forceinline__ void warp_take2(T* ca, bool pa, T* cb, bool pb, T& ia, T& ib) {
  const unsigned any = __ballot_sync(0xffffffffu, pa || pb);
  ia = T(-1);
  ib = T(-1);
  if (any == 0u) return;
  const int lane = threadIdx.x & 31;
  const unsigned long long ka = pa ? reinterpret_cast<unsigned long long>(ca) : 0ull;
  const unsigned long long kb = pb ? reinterpret_cast<unsigned long long>(cb) : 0ull;
  const unsigned peers_a = __match_any_sync(0xffffffffu, ka), peers_b = __match_any_sync(0xffffffffu, kb);
  const int lead_a = __ffs(peers_a) - 1, lead_b = __ffs(peers_b) - 1;
  T base_a = 0, base_b = 0;
  if (pa && lane == lead_a) base_a = atomicAdd(ca, static_cast<T>(__popc(peers_a)));
  if (pb && lane == lead_b) base_b = atomicAdd(cb, static_cast<T>(__popc(peers_b)));
  base_a = __shfl_sync(0xffffffffu, base_a, lead_a);
  base_b = __shfl_sync(0xffffffffu, base_b, lead_b);
  const unsigned below = (1u << lane) - 1u;
  if (pa) ia = base_a + static_cast<T>(__popc(peers_a & below));
  if (pb) ib = base_b + static_cast<T>(__popc(peers_b & below));
}

// One arc of the expansion, in two parts: expand_arc_score (loads only: the arc's end and whether it is admitted)
// and expand_arc_commit (warp-synchronous: all 32 threads call it, valid = the thread has an arc). kEps: an epsilon
// arc relaxed against the step's cutoff; else an arc of the step's phase against max - beam. The commit recombines an
// admitted arc by destination state in the lane's hash table (a new destination claims the next token of the frontier
// `out`, written dead until a candidate wins it) and appends the candidate unless the slot already holds a better one.
// kDestAhead: the score part also loads the arc's destination (for every arc, admitted or not: the walks that score
// rounds ahead take it off the admitted arcs' chain of dependent loads).
struct ArcScore {
  float ll;      // arc_base_loglik (before word boosts)
  float cutoff;  // the lane's admission threshold
  int32_t dest;  // kDestAhead: the arc's destination
};

template <typename scalar_t, bool kEps, bool kDestAhead>
__device__ __forceinline__ ArcScore expand_arc_score(const SearchOptions& opt, const Workspace& ws, const scalar_t* lp,
                                                     int32_t T, int32_t V, int32_t t, bool valid, const ArcItem& a,
                                                     int32_t phase, const ArcWords& w) {
  const LaneState& L = ws.lanes[a.lane];  // a lane of the batch even without an arc
  ArcScore r;
  r.ll = arc_base_loglik<scalar_t, kEps>(opt, w, phase == kEmit, kEps ? lp : arc_row(lp, T, V, t, valid, a, phase));
  // k2: cutoff = best - beam (float), admit iff end > cutoff.
  r.cutoff = kEps ? L.cutoff : ordered_to_float(L.max_ord) - L.beam;
  r.dest = kDestAhead ? w.dest : 0;
  return r;
}

// The admission of one scored arc: its end with the word boosts, and whether it beats the cutoff.
__device__ __forceinline__ bool admit_arc(const DeviceGraph& g, const int32_t* boost_keys, const float* boost_values,
                                          int32_t boost_cap, bool valid, const ArcItem& a, const ArcScore& sc,
                                          float& end) {
  end = 0.0f;
  if (!valid) return false;
  const float ll =
      boost_cap > 0 ? add_word_boosts(g, a.arc, sc.ll, boost_keys, boost_values, boost_cap, a.lane) : sc.ll;
  end = __fadd_rn(a.score, ll);
  return end > sc.cutoff;
}

template <bool kEps, bool kDestAhead>
__device__ __forceinline__ void expand_arc_commit(const DeviceGraph& g, Workspace& ws, int32_t out, int32_t F,
                                                  int32_t C, int32_t H, const int32_t* boost_keys,
                                                  const float* boost_values, int32_t boost_cap, bool valid,
                                                  const ArcItem& a, int32_t phase, const ArcScore& sc);

// An admitted arc's recombination (warp-synchronous: all 32 threads call it, `admit` = the thread has an admitted
// arc of end `end`; `dest`: its destination when kDestAhead, else loaded here).
template <bool kEps, bool kDestAhead>
__device__ __forceinline__ void expand_admitted(const DeviceGraph& g, Workspace& ws, int32_t out, int32_t F, int32_t C,
                                                int32_t H, bool admit, const ArcItem& a, int32_t phase, float end,
                                                int32_t dest_ahead) {
  LaneState* L = admit ? &ws.lanes[a.lane] : nullptr;
  const int64_t hrow = (int64_t)a.lane * H, frow = (int64_t)a.lane * F, crow = (int64_t)a.lane * C;
  HashSlot* table = hash_of(ws, out);  // the table of the frontier being built
  // The admitted-arc path: the probe reads the whole 16-byte slot, so the dominance test needs no second load, and
  // the claim and candidate counters are taken in one warp step with both atomics in flight. A new destination is a
  // new token of the frontier being built, dead until a candidate wins it. A candidate is dropped when the slot's
  // best end at the probe already beats it (it cannot win); a stale read only lets more candidates through, and the
  // slot's atomicMax picks the same winner either way (session 20: +1 / +7 / +9 % RTFx on the bench compact HLG at
  // batch 1 / 32 / 200 over the form that loaded the value after the claim and took the counters one by one).
  const unsigned long long packed_end = static_cast<unsigned long long>(float_to_ordered(end)) << 32;
  int32_t h = -1, dest = 0;
  bool claimed = false;
  unsigned long long seen = 0ull;
  if (admit) {
    dest = phase == kRedirect ? g.final_state : (kDestAhead ? dest_ahead : g.dest[a.arc]);
    h = hash_insert_read(table + hrow, H, dest, claimed, seen);
    if (h < 0) {
      atomicOr(&L->overflow, kOverflowHash);
      admit = false;
    }
  }
  if (admit) admit = !(seen != 0 && packed_end < (seen & 0xffffffff00000000ull));
  // Emit slots (an emitting-step arc, ws.emit_slots): the slot's packed value names the winner itself, no candidate.
  // The op takes the graph's largest out-degree from its caller (emit_shift is sized by it): an arc offset that does
  // not fit its bits is dropped and flagged like a full candidate buffer, never packed into the token's bits.
  const bool direct = !kEps && ws.emit_slots;
  if (admit && direct && (static_cast<uint32_t>(a.off) >> ws.emit_shift) != 0u) {
    atomicOr(&L->overflow, kOverflowCandidates);
    admit = false;
  }
  int32_t tok = -1, c = -1;
  warp_take2(claimed ? &L->n_claims : nullptr, claimed, admit && !direct ? &L->n_cands : nullptr, admit && !direct,
             tok, c);
  if (claimed) {
    if (tok < F) {
      claims_of(ws, out)[frow + tok] = h;
      table[hrow + h].tok = tok;
      frontier(ws, out).state[frow + tok] = dest;
      frontier(ws, out).score[frow + tok] = -INFINITY;
      frontier(ws, out).winner[frow + tok] = -2;
    } else {
      table[hrow + h].tok = -1;
      atomicOr(&L->overflow, kOverflowFrontier);
    }
  }
  if (admit && direct) {
    // bit 31 marks an emit payload: a candidate index (< C <= 2^30) never has it, so a Resolve can tell the two apart
    const uint32_t payload =
        kEmitPayloadBit | (static_cast<uint32_t>(a.tok) << ws.emit_shift) | static_cast<uint32_t>(a.off);
    atomicMax(&table[hrow + h].val, packed_end | payload);
  } else if (admit) {
    if (c >= C) {
      atomicOr(&L->overflow, kOverflowCandidates);
    } else {
      ws.cands[crow + c] = make_int2(a.link, a.arc);
      ws.cand_slot[crow + c] = h;
      atomicMax(&table[hrow + h].val, packed_end | static_cast<uint32_t>(c));
    }
  }
}

template <bool kEps, bool kDestAhead>
__device__ __forceinline__ void expand_arc_commit(const DeviceGraph& g, Workspace& ws, int32_t out, int32_t F,
                                                  int32_t C, int32_t H, const int32_t* boost_keys,
                                                  const float* boost_values, int32_t boost_cap, bool valid,
                                                  const ArcItem& a, int32_t phase, const ArcScore& sc) {
  float end;
  const bool admit = admit_arc(g, boost_keys, boost_values, boost_cap, valid, a, sc, end);
  expand_admitted<kEps, kDestAhead>(g, ws, out, F, C, H, admit, a, phase, end, sc.dest);
}

// Admitted-arc queue of the Expand walk (kQueue): a warp's admitted arcs are gathered in shared memory and recombined
// 32 at a time, so the chain of the recombination (hash probe, claim, counters, slot atomics) is paid once per 32
// admitted arcs instead of once per round of 32 arcs with any admitted arc among them. On the small char HLG ~7 % of
// the scored arcs are admitted (a simulation of the search, 5 utterances): at batch 200, where a warp walks dozens of
// rounds per step, most rounds carry an admitted arc or two. Which arcs share a round does not change what the walk
// computes (each arc's recombination is independent of its round; see expand_admitted).
constexpr int kQueueCap = 64;  // 32 pending at most between flushes + one round's admissions
struct AdmitQueue {
  int32_t lane[kQueueCap], tok[kQueueCap], link[kQueueCap], arc[kQueueCap], off[kQueueCap], phase[kQueueCap];
  float end[kQueueCap];
};

// The calling warp's queue (a kWalkBlock-thread block's static shared memory: only the kernels that call this have it).
__device__ __forceinline__ AdmitQueue& warp_admit_queue() {
  __shared__ AdmitQueue s_queue[kWalkBlock / 32];
  return s_queue[threadIdx.x >> 5];
}

// The whole arc (score, then commit): the Resolve's epsilon expansions.
template <typename scalar_t, bool kEps>
__device__ __forceinline__ void expand_arc(const DeviceGraph& g, const SearchOptions& opt, Workspace& ws,
                                           const scalar_t* lp, int32_t T, int32_t V, int32_t t, int32_t out,
                                           int32_t F, int32_t C, int32_t H, const int32_t* boost_keys,
                                           const float* boost_values, int32_t boost_cap, bool valid,
                                           const ArcItem& a, int32_t phase) {
  const ArcScore sc = expand_arc_score<scalar_t, kEps, false>(opt, ws, lp, T, V, t, valid, a, phase,
                                                              fetch_arc<false>(g, valid ? a.arc : 0));
  expand_arc_commit<kEps, false>(g, ws, out, F, C, H, boost_keys, boost_values, boost_cap, valid, a, phase, sc);
}

// The bound max (kBound; opt-in, BEAMDEC_WFST_BOUND_MAX=1, wfst_launch.cu): a step's maximum M sets its cutoff M -
// beam, and the Max walk exists only to find M before the Expand admits against it. Admitting against a lower bound
// P <= M instead admits a superset of the exact arcs, so every destination state's best end is the same; if the
// Expand also accumulates M (as the Max walk did, over the same arcs and the same float sums) and the Resolve writes
// only the tokens whose best end beats the exact cutoff (L.cutoff, set from M by the prepare after the Expand), the
// frontier is exactly the one the Max walk would give. The claimed tokens that do not beat it stay dead (score -inf:
// the walks skip them), and the dynamic beam counts the written tokens (lane_live), not the claimed ones.
// P: every arc of the best-scoring token the last Resolve wrote (lane_best), scored on this frame with the Expand's
// own sums, so P is a real arc's end. On the small char HLG it is M on 89 % of the steps and admits 1.08x the exact
// arcs (eval/bench/probes/wfst_step_sim.py --max-bounds; reports/measurements/README.md "Session 35").
// Every block computes P for every lane (batch <= kBoundMaxBatch, one warp a lane) and shares it through shared
// memory behind one block barrier: that replaces a Max walk and a grid barrier per step.
constexpr int kBoundMaxBatch = kWalkBlock / 32;
struct BoundCutoffs {
  float cut[kBoundMaxBatch];  // P - beam (-inf: no bound); only where ready
  int32_t ready[kBoundMaxBatch];
};
__device__ __forceinline__ BoundCutoffs& block_bound_cutoffs() {
  __shared__ BoundCutoffs s_bound;
  return s_bound;
}

// The calling warp's lane `b` (warp-uniform): P of the bound max as an ordered float (0: no best token was named).
template <typename scalar_t>
__device__ __forceinline__ uint32_t lane_bound(const DeviceGraph& g, const SearchOptions& opt, const Workspace& ws,
                                               const scalar_t* lp, int32_t T, int32_t V, int32_t t, int32_t buf,
                                               int32_t F, int32_t b, const int32_t* boost_keys,
                                               const float* boost_values, int32_t boost_cap) {
  const unsigned long long best = ws.lane_best[b];
  if (best == 0ull) return 0u;
  const int32_t tok = static_cast<int32_t>(static_cast<uint32_t>(best));
  const float score = ordered_to_float(static_cast<uint32_t>(best >> 32));  // the token's score, as written
  const int2 range = frontier(ws, buf).range[(int64_t)b * F + tok];
  const scalar_t* row = lp + ((int64_t)b * T + t) * V;
  uint32_t m = 0u;
  for (int32_t arc = range.x + (threadIdx.x & 31); arc < range.y; arc += 32)
    m = max(m, float_to_ordered(__fadd_rn(score, emit_arc_loglik(g, opt, arc, row, boost_keys, boost_values,
                                                                    boost_cap, b))));
  return __reduce_max_sync(0xffffffffu, m);
}

// Expand: the step's expansion of the frontier in `buf` into `out` (kStart: the start token's epsilon arcs,
// `buf` = `out` = 0). The last block prepares the Resolve walk over the candidates.
// kQueue: admitted arcs are recombined through the warp's AdmitQueue (not for kStart).
// kBound: the bound max (above); with the queue, the carried ranges and batch <= kBoundMaxBatch only.
template <typename scalar_t, bool kStart, int K = kArcRoundsAhead, bool kQueue = false, bool kSpread = false,
          bool kRange = false, bool kBound = false>
__device__ __forceinline__ void expand_step(const DeviceGraph& g, const SearchOptions& opt, Workspace& ws,
                                            const scalar_t* lp, int32_t T, int32_t V, int32_t t, int32_t buf,
                                            int32_t out, int32_t F, int32_t C, int32_t H, int32_t batch,
                                            const int32_t* boost_keys, const float* boost_values, int32_t boost_cap) {
  // Fused max: the table of `buf` (claimed by the step before, read by its Resolves, unused from here on) is
  // cleared by this walk, token by token; the Max walk of the one-table launchers does it otherwise.
  const bool clear = !kStart && (kBound || ws.fused);
  if (clear) clear_claimed(ws, buf, F, H, batch);
  constexpr bool kQ = kQueue && !kStart;
  constexpr bool kB = kBound && !kStart;
  static_assert(!kB || (kQ && kRange), "the bound max runs with the admitted-arc queue and the carried ranges");
  if constexpr (kB) {  // every block: P of each ready lane, one warp a lane
    BoundCutoffs& bc = block_bound_cutoffs();
    const int32_t w = threadIdx.x >> 5;
    if (w < batch) {  // warp-uniform (the launcher runs this form for batch <= kBoundMaxBatch only)
      const LaneState& L = ws.lanes[w];
      const bool ready = L.max_ready != 0;
      const uint32_t p = ready ? lane_bound(g, opt, ws, lp, T, V, t, buf, F, w, boost_keys, boost_values, boost_cap)
                               : 0u;
      if ((threadIdx.x & 31) == 0) {
        bc.ready[w] = ready;
        bc.cut[w] = p == 0u ? -INFINITY : ordered_to_float(p) - L.beam;  // k2's cutoff, from P instead of M
      }
    }
    __syncthreads();
  }
  LaneMax<> acc;  // kB: the exact maximum of the lanes the bound admits for, accumulated as max_step does
  constexpr bool kDestAhead = !kQ && K > 1;  // the queue loads the destinations of admitted arcs only
  const int me = threadIdx.x & 31;
  int32_t pending = 0;  // kQ: entries in the warp's queue (warp-uniform)
  // kQ: recombines the newest n (1..32) queue entries, one per thread (all 32 threads call it; generic, so that
  // only the queue's instantiations have its shared memory)
  auto flush = [&](auto n) {
    AdmitQueue& q = warp_admit_queue();
    __syncwarp();
    const bool has = me < n;
    const int32_t i = pending - n + me;
    ArcItem a{};
    int32_t phase = kDone;
    float end = 0.0f;
    if (has) {
      a.lane = q.lane[i];
      a.tok = q.tok[i];
      a.link = q.link[i];
      a.arc = q.arc[i];
      a.off = q.off[i];
      phase = q.phase[i];
      end = q.end[i];
    }
    __syncwarp();  // every entry read before the next round's admissions overwrite them
    pending -= n;
    expand_admitted<false, false>(g, ws, out, F, C, H, has, a, phase, end, 0);
  };
  walk_token_arcs<kStart, K, kDestAhead, kSpread && !kStart, kRange && !kStart>(
      g, ws, batch, buf, F,
      [&](int32_t b, int32_t tok) {
        if (clear) clear_claim(ws, buf, F, H, b, tok);
      },
      [&](bool valid, const ArcItem& a, int32_t phase, const ArcWords& w) {
        ArcScore sc = expand_arc_score<scalar_t, kStart, kDestAhead>(opt, ws, lp, T, V, t, valid, a, phase, w);
        if constexpr (kB) {
          const BoundCutoffs& bc = block_bound_cutoffs();
          if (bc.ready[a.lane]) sc.cutoff = bc.cut[a.lane];
        }
        return sc;
      },
      [&](bool valid, const ArcItem& a, int32_t phase, const ArcScore& sc) {
        if constexpr (kQ) {
          float end;
          const bool admit = admit_arc(g, boost_keys, boost_values, boost_cap, valid, a, sc, end);
          if constexpr (kB) {
            if (valid) acc.add(ws, a.lane, float_to_ordered(end));
          }
          const unsigned m = __ballot_sync(0xffffffffu, admit);
          if (m == 0u) return;
          if (admit) {
            AdmitQueue& q = warp_admit_queue();
            const int32_t i = pending + __popc(m & ((1u << me) - 1u));
            q.lane[i] = a.lane;
            q.tok[i] = a.tok;
            q.link[i] = a.link;
            q.arc[i] = a.arc;
            q.off[i] = a.off;
            q.phase[i] = phase;
            q.end[i] = end;
          }
          pending += __popc(m);
          if (pending >= 32) flush(32);
        } else {
          expand_arc_commit<kStart, kDestAhead>(g, ws, out, F, C, H, boost_keys, boost_values, boost_cap, valid, a,
                                                phase, sc);
        }
      });
  if constexpr (kQ) {
    if (pending > 0) flush(pending);
  }
  if constexpr (kB) acc.warp_flush(ws);
  const int32_t next = !kStart && ws.emit_slots ? kWalkClaims : kWalkCands;
  arrive_and_prepare<kB>(g, opt, ws, batch, F, C, Prepare{next, t, false, false, !kStart});
}

template <typename scalar_t, bool kStart>
__global__ void __launch_bounds__(kWalkBlock)
    ExpandKernel(DeviceGraph g, SearchOptions opt, Workspace ws, const scalar_t* lp, int32_t T, int32_t V, int32_t t,
                 int32_t buf, int32_t out, int32_t F, int32_t C, int32_t H, int32_t batch,
                 const int32_t* boost_keys, const float* boost_values, int32_t boost_cap) {
  expand_step<scalar_t, kStart>(g, opt, ws, lp, T, V, t, buf, out, F, C, H, batch, boost_keys, boost_values,
                                boost_cap);
}

// Resolve: over this pass's candidates. The candidate its slot's packed value names is the slot's winner; it
// writes the token (strict improvement only: new tokens start at -inf, so a closure pass re-writes an existing
// token only when it got better). The arena stores a link just for an arc that outputs words; a token reached
// by any other arc passes its predecessor's link on (the backtrack reads words and nothing else), so the arena
// grows with word ends, not with every surviving token. On an emitting step of an epsilon graph, a written
// token whose state has epsilon arcs either has them expanded right here (kEpsExpand: the next pass's
// candidates, against the step's cutoff) or, on the closure's last pass (kEpsCheck), marks it unconverged.
// Fused max (persistent kernel; opt-in, BEAMDEC_WFST_FUSED_MAX=1 / 2; variant 2 measured no faster: wfst_launch.cu
// fused_max_mode). The Max walk of step t + 1 needs the final
// scores of the tokens step t's Resolves write; a Resolve writes a token only with a better score than before, so
// the largest candidate end of step t + 1 over every (token, score) the step-t Resolves wrote -- each computed the
// moment it is written -- IS that step's maximum, exactly. Each written token therefore scores its emitting arcs
// on frame t + 1 right away and folds them into the lane's max_next; step t + 1 starts from it and skips its Max
// walk and grid barrier (prepare: max_ready) unless some lane needs the walk (its first step, or a final step,
// whose arcs depend on what the whole step found). Tokens are skipped early where they cannot matter: a token's
// first arc is folded in at once, and if even its best conceivable arc -- score + the frame's largest log-prob x
// acoustic scale + the graph's largest emitting weight, rounded the same way as a real arc so it bounds every one
// (round-to-nearest is monotone) -- is below the lane's running max (always a real arc's end, so never above the
// true max), the rest of its arcs cannot reach the maximum. Which tokens get skipped depends on timing; the
// maximum does not. Two variants (ws.fused): 2 folds the token's first arc in and reads the running max back before
// deciding (more skipping, one atomic round trip longer); 1 ("lean") reads the running max once, beside the token's
// arc range, and decides from that (shorter chain, less skipping). The table of frontier buffer k is hash_of(ws, k): with two, the Expand of step t + 1 can clear
// step t's slots while it fills its own (the one-table launchers clear in the Max walk, before anything is added).
template <typename scalar_t, int kMode>
__device__ __forceinline__ void fused_max_arcs(const DeviceGraph& g, const SearchOptions& opt, Workspace& ws,
                                               const scalar_t* lp, int32_t T, int32_t V, int32_t tn, bool on,
                                               int32_t b, int32_t tok, float score, int32_t s,
                                               const int32_t* boost_keys, const float* boost_values,
                                               int32_t boost_cap) {
  constexpr unsigned kFull = 0xffffffffu;
  if (__ballot_sync(kFull, on) == 0u) return;
  const int me = threadIdx.x & 31;
  int32_t begin = 0, deg = 0;
  uint32_t first = 0u;
  constexpr bool lean = kMode == 1;
  if (on) {
    begin = g.row_splits[s];
    deg = g.eps_begin[s] - begin;
    if (!lean && deg > 0) {
      const scalar_t* row = lp + ((int64_t)b * T + tn) * V;
      first = float_to_ordered(__fadd_rn(
          score, emit_arc_loglik(g, opt, begin, row, boost_keys, boost_values, boost_cap, b)));
    }
  }
  if (!lean) {  // one guarded atomic per (warp, lane)
    const unsigned peers = __match_any_sync(kFull, on ? b : -1);
    const uint32_t m = __reduce_max_sync(peers, first);
    if (on && me == __ffs(peers) - 1 && m > 0u && m > ld_volatile(ws.lanes[b].max_next))
      atomicMax(&ws.lanes[b].max_next, m);
  }
  __syncwarp();
  const int32_t skip_first = lean ? 0 : 1;  // the first arc is already folded in (variant 2)
  bool rest = on && deg > skip_first;
  if (rest && ws.frame_max != nullptr) {
    const float top = __fmul_rn(ws.frame_max[(int64_t)b * T + tn], opt.acoustic_scale);
    const float ub = __fadd_rn(score, __fadd_rn(top, ws.max_emit_weight));
    rest = float_to_ordered(ub) >= ld_volatile(ws.lanes[b].max_next);
  }
  LaneMax<true> acc;
  warp_arc_rounds(b, tok, score, 0, kEmit, begin + skip_first, rest ? deg - skip_first : 0,
                  [&](bool v, const ArcItem& a, int32_t) {
    if (!v) return;
    const scalar_t* row = lp + ((int64_t)a.lane * T + tn) * V;
    acc.add(ws, a.lane, float_to_ordered(__fadd_rn(
        a.score, emit_arc_loglik(g, opt, a.arc, row, boost_keys, boost_values, boost_cap, a.lane))));
  });
  acc.warp_flush(ws);
}

// kFused: the fused max's variant compiled in (1 / 2; the persistent kernel's fused instantiations); 0 is the
// Max-walk path's, register for register (the fused code raises the kernel's register pressure to spills).
// kEarly (opt-in, the HLG form's persistent kernel only: BEAMDEC_WFST_EARLY_LOADS=1, wfst_launch.cu; not measured
// yet): on the emit-slot walk, a claimed token's own state and its final / arc bounds do not depend on its slot, so
// they are loaded beside the first links of that chain (the state beside claims[tok], its bounds beside the slot)
// instead of after the slot -> source token -> arc chain
// (the PC sampling of session 34 put the Resolve walk's heaviest line on those two loads waiting for `state[tok]`).
// The same values (the Expand walk wrote the claimed token's state before the grid barrier; Resolve writes none).
// The candidate path (closure passes, or emit slots off) loads the same values once its slot names the token.
// kEarly 2 (opt-in, BEAMDEC_WFST_EARLY_LOADS=2: the carried ranges; epsilon-free graphs only, the launcher checks):
// those early loads, plus the token's emitting arc range {row_splits[s], eps_begin[s]} loaded beside its bounds and
// written with the token (Workspace::front_range), so the next step's Max and Expand walks (walk_token_arcs kRange)
// and this walk's source-token lookup (an emitting or redirect step's arc range begins at the source token's
// row_splits, which the source token carries) skip the state -> row_splits level. Every token a walk reads has its
// range: a token is walked or named as a winner's source only once a Resolve wrote it (or InitKernel, the start
// token), and every write here writes its range too.
// kBound (the bound max, expand_step): a token is written only if its best end also beats the step's exact cutoff
// (the Expand admitted against a lower one), the written tokens are counted (lane_live) and the best-scoring one with
// emitting arcs is named for the next step's bound (lane_best). Needs kEarly 2 (its range tells the emitting arcs).
template <typename scalar_t, int kFused = 0, int kEarly = 0, bool kBound = false>
__device__ __forceinline__ void resolve_step(const DeviceGraph& g, const SearchOptions& opt, Workspace& ws,
                                             const scalar_t* lp, int32_t T, int32_t V, int32_t tn, int32_t buf,
                                             int32_t eps_mode, int32_t F, int32_t C, int32_t H, int64_t arena_cap,
                                             int32_t batch, const int32_t* boost_keys, const float* boost_values,
                                             int32_t boost_cap, const Prepare& next, bool claims = false) {
  static_assert(!kBound || kEarly >= 2, "the bound max needs the carried ranges");
  for_each_item(ws, batch, [&](bool valid, int32_t b, int32_t local) {
    LaneState& L = ws.lanes[b];
    const int64_t hrow = (int64_t)b * H, frow = (int64_t)b * F, crow = (int64_t)b * C;
    bool win = false;
    int32_t tok = 0;
    float end = 0.0f;
    int2 cand = make_int2(0, 0);
    constexpr bool kRange = kEarly >= 2;
    int32_t s_early = 0, final_early = 0, arcs_end_early = 0;  // (kEarly, a written token) its state and bounds
    int2 range_early = make_int2(0, 0);                          // (kRange, a written token) its emitting arc range
    auto load_bounds = [&]() {  // of s_early: in flight beside the claims path's slot, after the candidate path's
      final_early = g.final_begin[s_early];
      arcs_end_early = g.row_splits[s_early + 1];
      if constexpr (kRange) range_early = make_int2(g.row_splits[s_early], g.eps_begin[s_early]);
    };
    if (valid && claims) {
      // Emit slots: item = a token this step claimed; its slot's packed value names the winner (source token of
      // the other frontier buffer, arc offset in that token's range of the step's phase). Every claimed slot got
      // at least one atomicMax (a claim happens only for an admitted arc), so the token is always written (kBound:
      // only if its end also beats the exact cutoff; the bound admitted against a lower one).
      // This walk's own epsilon expansions (kEpsExpand, below) may beat a slot before its token is read here: its
      // low word is then a closure candidate's index (bit 31 clear), and that candidate writes the token in the
      // next pass, as a losing emitting candidate leaves it in the candidate form (session 22: without this test,
      // the small compact TLG at batch 200 decoded at 47 % WER).
      tok = local;
      HashSlot slot;
      if constexpr (kEarly) {
        const int32_t claim = claims_of(ws, buf)[frow + tok];
        s_early = frontier(ws, buf).state[frow + tok];  // in flight beside `claim`
        slot = hash_of(ws, buf)[hrow + claim];
        load_bounds();  // in flight beside `slot`
      } else {
        slot = hash_of(ws, buf)[hrow + claims_of(ws, buf)[frow + tok]];
      }
      const uint32_t payload = static_cast<uint32_t>(slot.val);
      if (payload & kEmitPayloadBit) {
        end = ordered_to_float(static_cast<uint32_t>(slot.val >> 32));
        const uint32_t bits = payload & ~kEmitPayloadBit;
        const int32_t src = static_cast<int32_t>(bits >> ws.emit_shift);
        const int32_t off = static_cast<int32_t>(bits & ((1u << ws.emit_shift) - 1u));
        const Frontier from = frontier(ws, buf ^ 1);
        int32_t begin_src;
        if constexpr (kRange)  // phase_arcs_begin's row_splits[s_src] is the source token's carried range begin
          begin_src = L.phase == kFinal ? g.final_begin[from.state[frow + src]] : from.range[frow + src].x;
        else
          begin_src = phase_arcs_begin(g, from.state[frow + src], L.phase);
        cand = make_int2(from.winner[frow + src], begin_src + off);
        win = end > frontier(ws, buf).score[frow + tok] && (!kBound || end > L.cutoff);
      }
    } else if (valid) {
      // (Emit slots: a slot claimed by the emitting step holds an emit payload until a closure candidate beats it;
      // bit 31 keeps that payload from equalling any candidate index.)
      const int32_t c = L.pass_begin + local;
      const int32_t h = ws.cand_slot[crow + c];
      const HashSlot slot = hash_of(ws, buf)[hrow + h];
      const unsigned long long v = slot.val;
      if (static_cast<uint32_t>(v) == static_cast<uint32_t>(c)) {  // the slot's winner
        tok = slot.tok;                                              // < 0: frontier overflow (flagged)
        end = ordered_to_float(static_cast<uint32_t>(v >> 32));
        win = tok >= 0 && end > frontier(ws, buf).score[frow + tok] && (!kBound || end > L.cutoff);
        if (win) {
          cand = ws.cands[crow + c];
          if constexpr (kEarly) {  // the same loads as the claims path's, here after the slot (they need its token)
            s_early = frontier(ws, buf).state[frow + tok];
            load_bounds();
          }
        }
      }
    }
    if constexpr (kBound) {  // warp-synchronous: the written tokens counted, the best with emitting arcs named
      constexpr unsigned kFull = 0xffffffffu;
      const int me = threadIdx.x & 31;
      const unsigned wrote = __match_any_sync(kFull, win ? b : -1);
      if (win && me == __ffs(wrote) - 1) atomicAdd(&ws.lane_live[b], __popc(wrote));
      const bool named = win && range_early.y > range_early.x;
      const unsigned peers = __match_any_sync(kFull, named ? b : -1);
      const uint32_t o = named ? float_to_ordered(end) : 0u;
      const uint32_t top = __reduce_max_sync(peers, o);
      const uint32_t tok1 = __reduce_max_sync(peers, named && o == top ? static_cast<uint32_t>(tok) + 1u : 0u);
      if (named && me == __ffs(peers) - 1) {
        const unsigned long long best = static_cast<unsigned long long>(top) << 32 | (tok1 - 1u);
        if (best > ld_volatile(ws.lane_best[b])) atomicMax(&ws.lane_best[b], best);
      }
    }
    const bool word = win && arc_has_words(g, cand.y);  // a word arc: new link
    const long long w = warp_take(ws.arena_cursor, word);
    int32_t link = -1, phase = kDone, eps_begin = 0, eps_deg = 0, s = 0;
    if (win) {
      link = cand.x;
      if (word) {
        if (w < arena_cap) {
          ws.arena[w] = cand;
          link = static_cast<int32_t>(w);
        } else {
          atomicOr(&L.overflow, kOverflowArena);
          link = -2;  // broken chain (flagged)
        }
      }
      frontier(ws, buf).score[frow + tok] = end;
      frontier(ws, buf).winner[frow + tok] = link;
      // (kEarly: both paths loaded the token's state and bounds; a select between them and a load here would make
      // nvcc issue the load for either path and wait on it)
      s = kEarly ? s_early : frontier(ws, buf).state[frow + tok];
      if constexpr (kRange) frontier(ws, buf).range[frow + tok] = range_early;
      phase = L.phase;
      if (eps_mode != kEpsNone && phase == kEmit) {
        eps_begin = g.eps_begin[s];
        eps_deg = g.final_begin[s] - eps_begin;
        if (eps_mode == kEpsCheck) {
          if (eps_deg > 0 && !ld_volatile(L.eps_pending)) L.eps_pending = 1;
          eps_deg = 0;
        }
      }
      const bool has_final = kEarly ? final_early < arcs_end_early : g.final_begin[s] < g.row_splits[s + 1];
      if (has_final && !ld_volatile(L.any_final)) L.any_final = 1;
      if ((phase == kFinal || phase == kRedirect) && s == g.final_state) {  // the one final token
        L.final_winner = link;
        L.final_score = end;
        L.flags = kFlagHasPath | (phase == kFinal ? kFlagReachedFinal : 0);
      }
    }
    if (eps_mode == kEpsExpand)
      warp_arc_rounds(b, tok, end, link, phase, eps_begin, eps_deg, [&](bool v, const ArcItem& a, int32_t ph) {
        expand_arc<float, true>(g, opt, ws, nullptr, 0, 0, 0, buf, F, C, H, boost_keys, boost_values, boost_cap, v, a,
                                ph);
      });
    if constexpr (kFused > 0)
      fused_max_arcs<scalar_t, kFused>(g, opt, ws, lp, T, V, tn, win && tn >= 1 && tn < L.len, b, tok, end, s,
                                           boost_keys, boost_values, boost_cap);
  });
  arrive_and_prepare<kBound>(g, opt, ws, batch, F, C, next);
}

__global__ void __launch_bounds__(kWalkBlock)
    ResolveKernel(DeviceGraph g, SearchOptions opt, Workspace ws, int32_t buf, int32_t eps_mode, int32_t F, int32_t C,
                  int32_t H, int64_t arena_cap, int32_t batch, const int32_t* boost_keys, const float* boost_values,
                  int32_t boost_cap, Prepare next, bool claims = false) {
  resolve_step<float>(g, opt, ws, nullptr, 0, 0, -1, buf, eps_mode, F, C, H, arena_cap, batch, boost_keys,
                      boost_values, boost_cap, next, claims);
}

// ---------------------------------------------------------------------------------------------------
// The whole step loop in ONE cooperative launch (the default; BEAMDEC_WFST_PERSISTENT=0 runs the per-kernel loop,
// wfst_launch.cu): the same step bodies in the same order as the plain launches (decoders/csrc/wfst_launch.cu
// enqueue), a grid-wide barrier where a kernel boundary was. The arrive counter still elects the block that runs
// `prepare`; the barrier after it publishes its bookkeeping to every block. Written for small batches, where the
// H200 spent ~10 us per launch on a few thousand items (batch 1: 5 Resolve launches per frame, ~50 of ~86 us);
// it won at every batch measured (1.7x the kernel time at batch 1, 1.3x at batch 200: wfst_launch.cu).
// Needs every block resident at once: the launcher sizes the grid from this kernel's occupancy.
// Tried and not kept (H100, 2026-12-06 session 21, small char compact graphs, A/B in one call each;
// reports/measurements/README.md "Session 21"): the walks' arrive-and-prepare as their only barrier (the other blocks
// waiting for the preparing block's release instead of a grid.sync() after it): no faster, TLG batch 1 -9 %; 5 or 6
// resident blocks per SM (__launch_bounds__(256, 5 / 6): 48 / 40 registers with spills, instead of 64 and 4 blocks):
// 3-15 % slower at every batch.
// kCluster (opt-in, small batches: BEAMDEC_WFST_CLUSTER, wfst_launch.cu): the grid is ONE thread-block cluster (sm_90,
// 2-16 blocks, co-scheduled by the hardware) and each grid barrier is the cluster's hardware barrier
// (barrier.cluster arrive.release / wait.acquire: every thread of the launch is in the cluster, so cluster scope
// orders the global-memory bookkeeping as grid.sync() does). Nothing else changes: gridDim.x is the cluster's size,
// so the walks' spans and the arrive counter follow it. Issue 16's batch-1 question: the fixed cost of a step's
// barriers and arrive tails over ~500 blocks against a 16-block cluster's. Measured on an H100 (2026-12-06 session 23,
// one call; reports/measurements/README.md "Session 23"): eval/bench/probes/barrier_probe.cu puts grid.sync() over 528
// blocks at 1.64 us and a 16-block cluster.sync() at 0.49 us, but a dependent L2 round trip at 146 ns and a DSMEM one
// at 97 ns; end to end the 16-block cluster decodes the tiny BPE compact TLG at batch 1 +2.5 % faster (RTFx 960 / 954
// vs 934 / 933, two processes each, equal WER). The barriers are not where a batch-1 step's time goes (the small
// HLG's batch-1 Expand alone takes ~17 us for ~1,000 items, ncu in session 21), so this stays opt-in and the cluster
// design with DSMEM hash tables it was the first step of was not built.
template <typename scalar_t, int kFused, bool kCluster = false, int kAhead = kArcRoundsAhead, bool kQueue = false,
          bool kSpread = false, int kEarly = 0, bool kBound = false>
__global__ void __launch_bounds__(kWalkBlock)
    PersistentKernel(DeviceGraph g, SearchOptions opt, Workspace ws, const scalar_t* lp, int32_t T, int32_t V,
                     int32_t F, int32_t C, int32_t H, int64_t arena_cap, int32_t batch, const int32_t* boost_keys,
                     const float* boost_values, int32_t boost_cap, int32_t steps, int32_t passes) {
  struct Barrier {
    cooperative_groups::grid_group whole;
    __device__ __forceinline__ void sync() {
      if constexpr (kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        cooperative_groups::this_cluster().sync();
#else
        __trap();  // the launcher never selects the cluster form below sm_90
#endif
      } else {
        whole.sync();
      }
    }
  } grid{cooperative_groups::this_grid()};
  auto closure = [&](int32_t t, int32_t buf) {
    for (int32_t k = 1; k <= passes; ++k) {
      const Prepare next = k < passes ? Prepare{kWalkCands, t, false, true, false}
                                      : Prepare{kWalkStep, t + 1, true, true, false, t >= 0};
      resolve_step<scalar_t, kFused>(g, opt, ws, lp, T, V, t + 1, buf, k < passes ? kEpsExpand : kEpsCheck, F, C,
                                     H, arena_cap, batch, boost_keys, boost_values, boost_cap, next);
      grid.sync();
    }
  };
  if (passes > 0) {  // the start token's closure (cutoff -search_beam), on buffer 0
    expand_step<scalar_t, true>(g, opt, ws, lp, T, V, 0, 0, 0, F, C, H, batch, boost_keys, boost_values, boost_cap);
    grid.sync();
    closure(-1, 0);
  }
  for (int32_t t = 0; t < steps; ++t) {
    const int32_t buf = t & 1, out = buf ^ 1;
    // step_flags: written by the `prepare` before the last barrier, so every block reads the same value
    if ((kFused == 0 && !kBound) || ld_volatile(ws.step_flags[0]) != 0) {
      max_step<scalar_t, kAhead, kSpread, (kEarly >= 2), kBound>(g, opt, ws, lp, T, V, t, buf, F, H, batch,
                                                                 boost_keys, boost_values, boost_cap);
      grid.sync();
    }
    expand_step<scalar_t, false, kAhead, kQueue, kSpread, (kEarly >= 2), kBound>(
        g, opt, ws, lp, T, V, t, buf, out, F, C, H, batch, boost_keys, boost_values, boost_cap);
    grid.sync();
    const Prepare next = passes > 0 ? Prepare{kWalkCands, t, false, true, false}
                                    : Prepare{kWalkStep, t + 1, false, true, false, true};
    resolve_step<scalar_t, kFused, kEarly, kBound>(g, opt, ws, lp, T, V, t + 1, out,
                                                   passes > 0 ? kEpsExpand : kEpsNone, F, C, H, arena_cap, batch,
                                                   boost_keys, boost_values, boost_cap, next, ws.emit_slots != 0);
    grid.sync();
    closure(t, out);
  }
}

// Backtrack (thread per lane): word links -> words, written oldest first; one result row per lane.
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
    for (int32_t w = L.final_winner; w >= 0 && hops < arena_cap; w = ws.arena[w].x, ++hops) {
      int32_t wb, we;
      arc_word_range(g, ws.arena[w].y, wb, we);
      count += we - wb;
    }
    int32_t pos = count;
    hops = 0;
    for (int32_t w = L.final_winner; w >= 0 && hops < arena_cap; w = ws.arena[w].x, ++hops) {
      int32_t wb, we;
      arc_word_range(g, ws.arena[w].y, wb, we);
      for (int32_t k = we - 1; k >= wb; --k) {
        --pos;
        if (pos < W) row[kResultHeader + pos] = g.words[k];
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

}  // namespace
}  // namespace kernels
}  // namespace wfst
