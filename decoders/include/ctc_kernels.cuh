// CTC prefix beam search CUDA kernels (torch-free: raw pointers, sizes, strides).
//
// Per tile of kTile frames, two launches:
//   1. ctc_prepass_kernel   grid (tile_len, rows): for every frame that is decoded (blank skipping /
//      speech mask / row length decided here), the top-C non-blank chars by (lp desc, id asc), sorted,
//      C = min(2*beam + 1, V - 1). Frame-parallel: it holds the whole vocabulary scan.
//   2. the decode kernel, grid (rows), looping over the tile's frames in-kernel: ctc_decode_warp_kernel (one
//      warp per row, beam state in registers; beam <= 32 and <= 64 rows, see ctc_launch.h) or
//      ctc_decode_tile_kernel (one block per row, beam state in shared memory; every beam up to 128).
//      Why the pre-pass list is enough: an ordinary extension of beam k by
//      char c scores lp[c] + A_k (A_k = logaddexp(pb_k, pnb_k)), so within a beam ordinary chars rank as
//      lp does. The only exceptions are the last char (scored from pb_k) and chars whose extension merges
//      into another beam (m_k of them). A char at rank i >= beam + 1 + m_k in the frame's list is
//      therefore beaten by >= beam ordinary extensions of the same beam and can never survive; since
//      m_k <= beam - 1, the top 2*beam + 1 chars hold every possible survivor. Merged extensions are
//      scored exactly from lp[c] (folded into the stay of the beam they equal).
// Per frame (block kernel): collapse after skipped frames -> merge pairs by prefix hash, all pairs in
// parallel -> fold merged extensions -> score beam*(C+1) candidate slots -> top `beam` keys (ties: lowest
// slot): compact + rank-by-count when <= 256 candidates are live, else radix select + ordered gather ->
// state update with flat slots (copy only on forks) or paged storage (ctc_common.cuh). The one-warp
// kernel does the same per frame without block barriers (its comment below). The next decoded frame's
// candidate list, lp[blank] and lp[last] are prefetched during the current frame.
// Flat token storage in the one-warp kernel is lazy: tokens are never read while decoding (merges use the
// prefix hashes), so each frame only records (source beam, token) per winner in shared memory and the
// prefixes are rebuilt once at the end of the launch (one batch of fork copies per launch instead of a
// serial chain of copies per frame; measured 7 % faster per frame than copying forks every frame).
// Measured on the H200 (B=1, T=200, V=5000, beam 10; reports/measurements/h200_2026-11-30): 4.45 us per
// frame with the one-warp kernel (2026-11-29, eager copies and two reduces per round: 4.9), 6.7 with the
// block kernel; paged storage ~5.4 (its reference-count updates are global atomics whose results the warp
// waits for). Nsight Compute on that kernel: ~1,700 warp instructions per frame at ~5 cycles each, latency
// bound on the dependent chains (the `beam` rounds of step 4 are ~half of it); the pre-pass is ~21 us per
// launch (1.5 GHz), which is what a 16-frame streaming chunk pays on top. BEAMDEC_CTC_PAGED_SMEM=1 keeps a
// paged row's page metadata in shared memory (opt-in).
// 2026-12-06 (H100, one call, OASR's 12 offline shapes, reports/evidence/h100_2026-12-06/ctc_vs_oasr): the rounds of
// step 4 as selects (kSelect) and the pre-pass threshold from warp maxima (kWarpTau) raised the kernel RTFx by 3-15 %
// at 10 of 12 shapes (B=1 V=5000: 9,226 -> 9,844; B=64: 415k -> 479k; equal at B=1 V=100, -4 % at B=16 T=50, two
// processes one after the other); both are the defaults.
// 2026-12-07 (H100; eval/bench/probes/warp_probe.cu, reports/measurements/README.md session 24): one warp's dependent
// steps cost REDUX 46, VOTE 17, SHFL 37, FLO 40, ISETP+SEL 14 cycles; the select round's cross-lane chain 117 of the
// ~350 a round takes (81 instructions). Two forms were exact and not kept: speculative rounds (the next max reduced
// before the vote: a ~60-cycle chain, but 2,083 instructions per frame instead of 1,585) ran 1.17-1.38x slower; a
// one-word instantiation for lists of <= 32 entries (1,434 instructions per frame) ran 0.98-1.02x, its cycles per
// instruction rising from 4.5 to 4.9. So a frame is bound by the dependent path through its rounds (max -> vote ->
// the winner's new head, fed by its refill), neither by the cross-lane chain alone nor by the instruction count.
// 2026-12-07 (session 25): the multi-winner form (kMulti, BEAMDEC_CTC_ROUNDS=multi) takes several winners per round
// (multi_rounds, ctc_warp_rounds.cuh; the same code runs on an emulated warp in tests/test_warp_rounds_host.py).
// Session 26 (H100, one call, in-process against the select form): 1.4 rounds per frame at B=1 V=5000 beam 10,
// 1,137 warp instructions per frame instead of 1,585, kernel time -15 to -44 % at OASR's 12 offline shapes, one
// stream -18 to -20 %; the round-form gpu tests and memcheck / racecheck clean. The default since then.
// Streaming calls add the state check before the first tile and the seal after the last (ctc_state_check_kernel,
// ctc_state_seal_kernel below); with the one-warp multi-winner kernel the check rides in the first tile's pre-pass
// launch and decode kernel ("Fused state check"), one launch fewer per chunk; the offline ops' rows are zeroed in
// that launch too and ctc_finalize_kernel writes the -1 padding (two launches fewer per offline call). Written in
// session 27, the defaults since session 28 (H100: gpu tests, sanitizers, an in-process A/B per switch);
// BEAMDEC_CTC_CHECK=separate, BEAMDEC_CTC_ZERO=memset, BEAMDEC_CTC_FILL=torch give the earlier launches.
// No device->host synchronisation anywhere; the streaming counters live in the state header.
#pragma once

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cstdint>

#include "ctc_common.cuh"
#include "ctc_warp_rounds.cuh"

namespace beamdec {
namespace ctc {

__device__ __forceinline__ float load_lp(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_lp(const __half* p) { return __half2float(p[0]); }

// Where each row's state lives: rows of one (rows, words) tensor, or up to 256 separate 1-row tensors.
struct StateRefs {
  int32_t* base;
  int64_t row_words;
  int n_ptrs;  // 0: use base + row * row_words
  int32_t* ptrs[kMaxStreamsPerLaunch];
  __device__ __forceinline__ int32_t* row(int r) const { return n_ptrs > 0 ? ptrs[r] : base + (int64_t)r * row_words; }
};

template <typename T>
struct FrameArgs {
  const T* log_probs;  // (rows, T, V) with strides below; V contiguous
  int64_t b_stride, t_stride;
  int rows, n_frames, V, blank, beam, C, max_len;
  const int32_t* lengths;  // (rows,) valid frames, or null (all n_frames)
  const bool* mask;        // (rows, T) speech mask, or null
  int64_t mask_b_stride;
  float log_threshold;     // skip a frame when lp[blank] > log_threshold (+inf: never)
  int32_t* pre_ids;        // (kTile, rows, C)
  float* pre_lp;           // (kTile, rows, C)
  int32_t* pre_cnt;        // (kTile, rows): C, or -1 = frame not decoded
  int page_size, num_pages;  // paged token storage (page_size 0: flat)
  int paged_smem;            // one-warp kernel, paged: page metadata in shared memory (opt-in)
  // (rows, kStateErrorWords) from ctc_state_check_kernel, or null (offline: the op made the rows itself).
  // A row with a nonzero code is skipped by every kernel of the launch: none reads or writes it.
  const int32_t* row_err;
  // The fused state check (the default; BEAMDEC_CTC_CHECK=separate turns it off; see "Fused state check" below).
  // fused_check = 1 on the first tile of a streaming call whose check travels with it: the pre-pass launch carries
  // kCheckParts more blocks per row that sum the row's checksum terms in parts (check_sums, (rows, kCheckParts)) and
  // validate its fields (check_fields, (rows, kStateErrorWords)); the decode kernel combines them into err_out (=
  // row_err) before it touches the row. 0: row_err was written by an earlier launch (the separate check, or this call's
  // first tile).
  int fused_check;
  // 1 on the first tile of an offline call whose rows are not zeroed yet (the default; BEAMDEC_CTC_ZERO=memset turns it
  // off): the pre-pass launch carries one more block per row that zeroes it (the state-free pre-pass; see "Fused state
  // check")
  int zero_rows;
  // 1: this launch is an overlapped one (BEAMDEC_CTC_PDL; the streaming ops' default):
  // wait_prior_grid_then_release_next runs
  int pdl;
  unsigned long long* check_sums;
  int32_t* check_fields;
  int32_t* err_out;
  StateStamp want;
  StateRefs states;
  __device__ __forceinline__ bool refused(int r) const { return row_err && row_err[(int64_t)r * kStateErrorWords] != 0; }
};

// ---------------------------------------------------------------------------------------------------
// Block-wide radix select: the k-th largest key among n (keys via key_at(i)). Returns the key value `thr`
// and k_eq = how many keys equal to thr belong to the top k. Needs n >= k.
template <int NT, typename KeyAt>
__device__ __forceinline__ void block_radix_select(KeyAt key_at, int n, int k, uint32_t* hist, int* sel,
                                                   uint32_t& thr, int& k_eq) {
  const int tid = threadIdx.x;
  uint32_t prefix = 0;
  int kk = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += NT) hist[i] = 0;
    __syncthreads();
    const uint32_t hmask = shift == 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
    for (int i = tid; i < n; i += NT) {
      const uint32_t key = key_at(i);
      if ((key & hmask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid < 32) {
      const int lane = tid;
      int local[8];
      int s = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        local[j] = (int)hist[lane * 8 + j];
        s += local[j];
      }
      int incl = s;  // sum over lanes >= lane
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int v = __shfl_down_sync(0xFFFFFFFFu, incl, off);
        if (lane + off < 32) incl += v;
      }
      const int above = incl - s;
      if (above < kk && kk <= incl) {
        int acc = above;
        for (int j = 7; j >= 0; --j) {
          if (acc + local[j] >= kk) {
            sel[0] = lane * 8 + j;
            sel[1] = kk - acc;
            break;
          }
          acc += local[j];
        }
      }
    }
    __syncthreads();
    prefix |= (uint32_t)sel[0] << shift;
    kk = sel[1];
  }
  thr = prefix;
  k_eq = kk;
}

// Writes, in ascending index order, every i with key > thr and the first k_eq with key == thr (when
// take_eq). Returns the count (same value in every thread). Deterministic.
template <int NT, typename KeyAt>
__device__ __forceinline__ int block_ordered_gather(KeyAt key_at, int n, uint32_t thr, int k_eq, bool take_eq,
                                                    int* out, typename cub::BlockScan<unsigned long long, NT>::TempStorage& tmp) {
  const int tid = threadIdx.x;
  const int per = (n + NT - 1) / NT;
  const int beg = min(n, tid * per), end = min(n, beg + per);
  unsigned long long gt = 0, eq = 0;
  for (int i = beg; i < end; ++i) {
    const uint32_t key = key_at(i);
    gt += key > thr;
    eq += key == thr;
  }
  unsigned long long excl, total;
  cub::BlockScan<unsigned long long, NT>(tmp).ExclusiveSum((eq << 32) | gt, excl, total);
  int pos = (int)(excl & 0xFFFFFFFFull);
  int eq_seen = (int)(excl >> 32);
  if (take_eq) pos += min(eq_seen, k_eq);
  for (int i = beg; i < end; ++i) {
    const uint32_t key = key_at(i);
    if (key > thr) {
      out[pos++] = i;
    } else if (take_eq && key == thr) {
      if (eq_seen < k_eq) out[pos++] = i;
      ++eq_seen;
    }
  }
  const int gt_total = (int)(total & 0xFFFFFFFFull), eq_total = (int)(total >> 32);
  __syncthreads();  // tmp reuse and `out` visibility
  return gt_total + (take_eq ? min(eq_total, k_eq) : 0);
}

// ---------------------------------------------------------------------------------------------------
// Overlapped launches (programmatic dependent launch, sm_90+; BEAMDEC_CTC_PDL, ctc_cuda.cpp overlapped_launches;
// written in session 28, run on the H100 in session 29 and the streaming ops' default since: one stream -5 to -7 % per
// frame; the offline ops at B = 16 and V <= 1,000 +9 to +13 %, so they stay plain): a kernel launched with the
// programmatic-serialization attribute may start while the kernel before it in the stream still runs, so such a
// launch (`on`) first waits for the grid before it to complete and its writes to be visible (griddepcontrol.wait), and
// only then lets the next kernel start early (launch_dependents: that kernel's blocks get resident and wait on this
// grid in turn). No kernel reads or writes memory before the wait, so the order of every read and write is the plain
// launches'. Plain launches (`on` = 0) execute neither instruction.
__device__ __forceinline__ void wait_prior_grid_then_release_next(int on) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (on) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
#endif
}

constexpr int kPrepassThreads = 256;
constexpr int kRefusedRow = -2;  // pre-pass count of every frame of a row refused by the state check

// ---------------------------------------------------------------------------------------------------
// Fused state check (the default since session 28; BEAMDEC_CTC_CHECK=separate for the check kernel). The separate check
// is a launch of its own before the pre-pass (one 1,024-thread block per row over the whole row), so a one-stream chunk
// call runs four kernels in a chain: check, pre-pass, decode, seal. Fused, the first tile's pre-pass launch also
// carries kCheckParts blocks per row (blockIdx.x >= tile_len) that sum the checksum terms of a quarter of the row each
// (any order: the sum is mod 2^64) and, in part 0, validate the fields; they run beside the pre-pass blocks. The decode
// kernel then adds the parts, compares the sum with the stored checksum and writes the row's verdict (the same five
// words as ctc_state_check_kernel) before it reads anything else of the row. A refused row is still neither read past
// its header nor written: the pre-pass of that launch no longer writes the state at all (it computed lists before the
// verdict existed, so the bad-value bit it used to OR into the row travels in its counts instead: kCntBadValue on a
// decoded frame's count, kSkippedBadValue for a skipped frame whose blank is +inf) and the decode ORs it in with its
// own status bits. Later tiles of the call read the verdict as before.
// The same state-free pre-pass serves the offline call's zeroing (the default; BEAMDEC_CTC_ZERO=memset turns it off):
// its rows come from the allocator as they are, and one more block per row in the first tile's pre-pass launch zeroes
// the row instead of a memset launch before it (no block of that launch reads the state; the decode runs after it).
// One row's verdict as the check kernels write it: the field checks' error, else a checksum mismatch (stored vs
// recomputed `h`), stored as kStateErrorWords words.
__device__ __forceinline__ StateError checksum_verdict(StateError e, unsigned long long h, unsigned long long stored) {
  if (e.code == kStateOk && h != stored)
    e = StateError{kErrChecksum, -1, (int32_t)(uint32_t)stored, (int32_t)(uint32_t)h, (int32_t)(uint32_t)h};
  return e;
}
__device__ __forceinline__ void store_state_error(int32_t* out, const StateError& e) {
  out[0] = e.code;
  out[1] = e.index;
  out[2] = e.found;
  out[3] = e.lo;
  out[4] = e.hi;
}

constexpr int kCheckParts = 4;
constexpr int kCntBadValue = 1 << 20;  // a decoded frame's count (<= 2 * kMaxBeam + 1) with a bad value seen
constexpr int kSkippedBadValue = -3;   // a skipped frame (-1) whose blank log-prob is +inf

// The sum of the checksum terms of words [lo, hi) of a row over one block (mod 2^64, so parts add); valid in thread
// 0 only. kUnroll: 4 terms in flight per thread.
template <int NT, bool kUnroll>
__device__ __forceinline__ unsigned long long block_checksum_terms(const int32_t* w, int64_t lo, int64_t hi,
                                                                   typename cub::BlockReduce<unsigned long long, NT>::TempStorage& tmp) {
  unsigned long long part = 0;
  if constexpr (kUnroll) {
#pragma unroll 4
    for (int64_t i = lo + threadIdx.x; i < hi; i += NT) part += checksum_term(i, w[i]);
  } else {
    for (int64_t i = lo + threadIdx.x; i < hi; i += NT) part += checksum_term(i, w[i]);
  }
  return cub::BlockReduce<unsigned long long, NT>(tmp).Sum(part);
}

template <int NT, typename T>
__device__ __forceinline__ void fused_check_part(const FrameArgs<T>& a, int part, int row,
                                                 typename cub::BlockReduce<unsigned long long, NT>::TempStorage& tmp) {
  const int32_t* w = a.states.row(row);
  const int64_t words = a.states.row_words;
  const int64_t per = (words + kCheckParts - 1) / kCheckParts;
  const int64_t lo = (int64_t)part * per, hi = min(words, lo + per);
  const unsigned long long sum = block_checksum_terms<NT, true>(w, lo, hi, tmp);
  if (threadIdx.x != 0) return;
  a.check_sums[(int64_t)row * kCheckParts + part] = sum;
  // reads only fixed header offsets until it knows the beam-indexed reads are in range
  if (part == 0) store_state_error(a.check_fields + (int64_t)row * kStateErrorWords, validate_state_fields(w, a.want));
}

// The row's verdict from its check parts, exactly as ctc_state_check_kernel forms it; written to err_out. One thread.
template <typename T>
__device__ __forceinline__ int32_t fused_check_verdict(const FrameArgs<T>& a, int row) {
  const int32_t* f = a.check_fields + (int64_t)row * kStateErrorWords;
  unsigned long long h = checksum_seed(a.states.row_words);
  for (int p = 0; p < kCheckParts; ++p) h += a.check_sums[(int64_t)row * kCheckParts + p];
  const StateError e =
      checksum_verdict(StateError{f[0], f[1], f[2], f[3], f[4]}, h, stored_checksum(a.states.row(row)));
  store_state_error(a.err_out + (int64_t)row * kStateErrorWords, e);
  return e.code;
}
constexpr int kPrepassCacheMaxV = 12288;  // vocabularies up to this cache their keys in shared memory
constexpr int kPrepassFastMaxC = 65;     // threshold fast path for beam <= 32 (C <= 2 * 32 + 1)
constexpr int kPrepassFastCap = 512;     // candidates at or above the threshold it ranks (else: radix select)

// kWarpTau: the fast path's threshold from the warps' r-th largest maxima (r rounds of a warp max) and the
// candidates ranked on packed (key, id) words; false: the C-th largest of the NT maxima by rank counting (an
// NT-iteration loop per thread), the form measured before 2026-12-06. Both write the same list.
// kStateFree: the form of the fused state check and of the zeroing pre-pass (see "Fused state check" above): no
// frame block writes the state (bad values go into the counts); with a.fused_check the last kCheckParts blocks of
// each row are check parts and refusals are not read (the verdict comes later); with a.zero_rows the last block of
// each row zeroes it.
template <typename T, bool kWarpTau = false, bool kStateFree = false>
__global__ void __launch_bounds__(kPrepassThreads) ctc_prepass_kernel(FrameArgs<T> a, int t0) {
  wait_prior_grid_then_release_next(a.pdl);
  constexpr int NT = kPrepassThreads;
  extern __shared__ uint32_t s_keys[];  // (V) when cached
  __shared__ uint32_t s_hist[256];
  __shared__ int s_sel[2];
  __shared__ int s_list[2 * kMaxBeam + 1];
  __shared__ uint32_t s_list_key[2 * kMaxBeam + 1];
  __shared__ typename cub::BlockScan<unsigned long long, NT>::TempStorage s_scan;
  __shared__ int s_bad;

  const int pos = blockIdx.x, row = blockIdx.y, tid = threadIdx.x;
  if constexpr (kStateFree) {
    if (a.fused_check && pos >= (int)gridDim.x - kCheckParts) {  // block-uniform: a check part
      __shared__ typename cub::BlockReduce<unsigned long long, NT>::TempStorage s_red;
      fused_check_part<NT>(a, pos - ((int)gridDim.x - kCheckParts), row, s_red);
      return;
    }
    if (a.zero_rows && pos == (int)gridDim.x - 1) {  // block-uniform: this row's zeroing block
      int32_t* w = a.states.row(row);
      for (int64_t i = tid; i < a.states.row_words; i += NT) w[i] = 0;
      return;
    }
  }
  const int t = t0 + pos;
  int32_t* cnt_out = a.pre_cnt + (int64_t)pos * a.rows + row;
  if (!(kStateFree && a.fused_check) && a.refused(row)) {
    // block-uniform. kRefusedRow: no frame selected, and the decode kernels write nothing
    if (tid == 0) *cnt_out = kRefusedRow;
    return;
  }
  const int len = a.lengths ? a.lengths[row] : a.n_frames;
  if (t >= len) {
    if (tid == 0) *cnt_out = -1;
    return;
  }
  const T* lp = a.log_probs + (int64_t)row * a.b_stride + (int64_t)t * a.t_stride;
  const float lp_blank = load_lp(lp + a.blank);
  const bool selected = a.mask ? a.mask[(int64_t)row * a.mask_b_stride + t] : !(lp_blank > a.log_threshold);
  if (!selected) {
    if (tid == 0) {
      if constexpr (kStateFree) {
        *cnt_out = lp_blank == INFINITY ? kSkippedBadValue : -1;
      } else {
        *cnt_out = -1;
        if (lp_blank == INFINITY) atomicOr(a.states.row(row) + kHdrStatus, kStatusBadValue);
      }
    }
    return;
  }
  const bool cached = a.V <= kPrepassCacheMaxV;
  if (tid == 0) s_bad = 0;
  __syncthreads();
  bool bad = false;
  if (cached) {
    // kLoadBatch loads per thread in flight before their keys are stored (one memory round trip per batch)
    constexpr int kLoadBatch = 8;
    for (int c0 = tid; c0 < a.V; c0 += NT * kLoadBatch) {
      float f[kLoadBatch];
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) {
        const int c = c0 + u * NT;
        f[u] = c < a.V ? load_lp(lp + c) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) {
        const int c = c0 + u * NT;
        if (c < a.V) {
          bad |= (f[u] != f[u]) || f[u] == INFINITY;
          s_keys[c] = c == a.blank ? 0u : float_key(f[u]);
        }
      }
    }
  } else {
    for (int c = tid; c < a.V; c += NT) {
      const float f = load_lp(lp + c);
      bad |= (f != f) || f == INFINITY;
    }
  }
  if (bad) s_bad = 1;
  __syncthreads();
  if constexpr (!kStateFree) {
    if (s_bad && tid == 0) atomicOr(a.states.row(row) + kHdrStatus, kStatusBadValue);
  }
  // the fused form's bad-value mark on this frame's count (0 otherwise)
  const int bad_mark = kStateFree && s_bad ? kCntBadValue : 0;
  const int blank = a.blank;
  auto key_at = [&](int c) -> uint32_t {
    if (cached) return s_keys[c];
    return c == blank ? 0u : float_key(load_lp(lp + c));
  };
  const int64_t out_base = ((int64_t)pos * a.rows + row) * a.C;
  if (cached && a.C <= kPrepassFastMaxC && a.V >= NT) {
    // Fast path. The C-th largest of the NT per-thread maxima (tau) is a lower bound on the C-th largest key
    // (the C maxima above it are distinct elements), so the top C all have key >= tau; usually only a few
    // more do. Rank those few exactly; fall back to the radix select when too many pass (heavy ties).
    __shared__ uint32_t s_max[NT];
    __shared__ int s_fid[kPrepassFastCap];
    __shared__ unsigned long long s_fk[kWarpTau ? kPrepassFastCap : 1];
    __shared__ uint32_t s_tau;
    __shared__ int s_nf;
    uint32_t mx = 0u;
    for (int c = tid; c < a.V; c += NT) mx = max(mx, s_keys[c]);
    uint32_t tau;
    if constexpr (kWarpTau) {
      // Each warp's r-th largest maximum, r = ceil(C / warps) (a round takes the largest once, the lowest lane
      // among equals); tau = the smallest of those. A warp has r maxima >= its value, so >= warps * r >= C
      // distinct elements are >= tau: a lower bound on the C-th largest key, as the rank-counted tau is.
      constexpr int kWarps = NT / 32;
      const int rounds = (a.C + kWarps - 1) / kWarps, lane = tid & 31;
      uint32_t v = mx, wv = 0u;
      for (int i = 0; i < rounds; ++i) {
        wv = __reduce_max_sync(0xFFFFFFFFu, v);
        if (lane == __ffs(__ballot_sync(0xFFFFFFFFu, v == wv)) - 1) v = 0u;
      }
      if (lane == 0) s_max[tid >> 5] = wv;
      if (tid == 0) s_nf = 0;
      __syncthreads();
      tau = s_max[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) tau = min(tau, s_max[w]);
    } else {
      s_max[tid] = mx;
      if (tid == 0) s_nf = 0;
      __syncthreads();
      int r = 0;
      for (int j = 0; j < NT; ++j) {
        const uint32_t v = s_max[j];
        r += v > mx || (v == mx && j < tid);
      }
      if (r == a.C - 1) s_tau = mx;  // ranks are a permutation: exactly one thread
      __syncthreads();
      tau = s_tau;
    }
    if (tau > 0u)
      for (int c = tid; c < a.V; c += NT)
        if (s_keys[c] >= tau) {
          const int i = atomicAdd(&s_nf, 1);
          if (i < kPrepassFastCap) {
            s_fid[i] = c;
            // rank order as one word: key desc, then id asc
            if constexpr (kWarpTau) s_fk[i] = ((unsigned long long)s_keys[c] << 32) | (0xFFFFFFFFu - (uint32_t)c);
          }
        }
    __syncthreads();
    const int nf = s_nf;
    if (kWarpTau && tau > 0u && nf <= kPrepassFastCap) {  // block-uniform
      for (int i = tid; i < nf; i += NT) {
        const unsigned long long k = s_fk[i];
        int rank = 0;
        for (int j = 0; j < nf; ++j) rank += s_fk[j] > k;
        if (rank < a.C) {
          const int id = s_fid[i];
          a.pre_ids[out_base + rank] = id;
          a.pre_lp[out_base + rank] = load_lp(lp + id);
        }
      }
      if (tid == 0) *cnt_out = a.C | bad_mark;
      return;
    }
    if (!kWarpTau && tau > 0u && nf <= kPrepassFastCap) {  // block-uniform
      for (int i = tid; i < nf; i += NT) {
        const int id = s_fid[i];
        const uint32_t k = s_keys[id];
        int rank = 0;
        for (int j = 0; j < nf; ++j) {
          const int idj = s_fid[j];
          const uint32_t kj = s_keys[idj];
          rank += kj > k || (kj == k && idj < id);
        }
        if (rank < a.C) {
          a.pre_ids[out_base + rank] = id;
          a.pre_lp[out_base + rank] = load_lp(lp + id);
        }
      }
      if (tid == 0) *cnt_out = a.C | bad_mark;
      return;
    }
  }
  uint32_t thr;
  int k_eq;
  block_radix_select<NT>(key_at, a.V, a.C, s_hist, s_sel, thr, k_eq);
  const int n = block_ordered_gather<NT>(key_at, a.V, thr, k_eq, true, s_list, s_scan);
  for (int i = tid; i < n; i += NT) s_list_key[i] = key_at(s_list[i]);
  __syncthreads();
  // rank by (key desc, id asc); s_list is in ascending id order already
  for (int i = tid; i < n; i += NT) {
    const uint32_t ki = s_list_key[i];
    int rank = 0;
    for (int j = 0; j < n; ++j) {
      const uint32_t kj = s_list_key[j];
      rank += (kj > ki) || (kj == ki && j < i);
    }
    a.pre_ids[out_base + rank] = s_list[i];
    a.pre_lp[out_base + rank] = load_lp(lp + s_list[i]);
  }
  if (tid == 0) *cnt_out = n | bad_mark;
}

// ---------------------------------------------------------------------------------------------------
constexpr int kRankSelectMax = 256;  // candidate counts up to this select by rank-counting (fewer barriers)

template <int NT>
struct DecodeShared {
  float pb[kMaxBeam], pnb[kMaxBeam], A[kMaxBeam], lp_last[kMaxBeam], fold[kMaxBeam];
  int last[kMaxBeam], len[kMaxBeam], slot[kMaxBeam], parent[kMaxBeam], mcount[kMaxBeam], excl[kMaxBeam];
  unsigned long long hash[kMaxBeam], phash[kMaxBeam];
  float n_pb[kMaxBeam], n_pnb[kMaxBeam], n_lp_last[kMaxBeam];
  int n_last[kMaxBeam], n_len[kMaxBeam], n_slot[kMaxBeam], n_src[kMaxBeam], n_tok[kMaxBeam], n_copy[kMaxBeam];
  unsigned long long n_hash[kMaxBeam], n_phash[kMaxBeam];
  int uses[kMaxBeam], free_slots[kMaxBeam], win[kMaxBeam], lastpos[kMaxBeam];
  unsigned long long exmask[kMaxBeam];  // merged extensions per source beam (list positions < 64)
  int ids[2][2 * kMaxBeam + 1];  // double-buffered: the next decoded frame's list is prefetched
  float lps[2][2 * kMaxBeam + 1];
  float lp_blank[2];
  int cnt[kTile];  // pre-pass counts of this tile (-1: frame not decoded)
  int cidx[kRankSelectMax];
  uint32_t ckey[kRankSelectMax];
  uint32_t hist[256];
  int sel[2];
  int nb, step, last_sel, status, frames_seen;
  int ptop, pfresh, ndef, def[kMaxBeam];  // paged: free-stack top, fresh-page counter, deferred frees
  int ptop_next, pfresh_next;  // paged step 4's results, written and read by thread 0 only (issue 19)
  typename cub::BlockScan<int, NT>::TempStorage iscan;
  typename cub::BlockScan<unsigned long long, NT>::TempStorage scan;
};

template <int NT, typename T>
__global__ void __launch_bounds__(NT) ctc_decode_tile_kernel(FrameArgs<T> a, int t0, int tile_len, int advance_frames) {
  extern __shared__ uint32_t s_cand_key[];  // (beam * (C + 1)): stays [0, beam), extensions beam + k*C + i
  __shared__ DecodeShared<NT> s;
  const int row = blockIdx.x, tid = threadIdx.x;
  const int beam = a.beam, C = a.C, max_len = a.max_len;
  const int NS = beam * (C + 1);
  const bool paged = a.page_size > 0;
  const int P = a.page_size;
  const StateLayout L{beam, max_len, a.page_size, a.num_pages};
  int32_t* w = a.states.row(row);
  token_t* tokens = reinterpret_cast<token_t*>(w + L.tokens());
  int32_t* parent = w + L.parent();
  int32_t* rc = w + L.refcnt();
  int32_t* stack = w + L.free_stack();
  token_t* pages = reinterpret_cast<token_t*>(w + L.pages());
  const T* lp_row = a.log_probs + (int64_t)row * a.b_stride;

  if (tid == 0) {
    s.step = w[kHdrStep];
    s.last_sel = w[kHdrLastSel];
    s.status = w[kHdrStatus];
    s.nb = s.step == 0 ? 1 : w[kHdrActive];
    s.frames_seen = w[kHdrFramesSeen];
    s.ptop = w[kHdrFreeTop];
    s.pfresh = w[kHdrNextFresh];
    s.ndef = 0;
  }
  for (int p = tid; p < tile_len; p += NT) s.cnt[p] = a.pre_cnt[(int64_t)p * a.rows + row];
  __syncthreads();
  auto next_selected = [&](int p) -> int {
    for (++p; p < tile_len; ++p)
      if (s.cnt[p] >= 0) return p;
    return -1;
  };
  int cur = next_selected(-1);
  if (cur < 0) {  // nothing decoded in this tile: only the frame counter moves (not in a refused row)
    // The refusal is read here, from the pre-pass counts, rather than by an early return at the top: that
    // return made the 512-thread instantiation spill registers.
    if (tid == 0 && s.cnt[0] != kRefusedRow) w[kHdrFramesSeen] = s.frames_seen + advance_frames;
    return;
  }
  const T* lp_cur = lp_row + (int64_t)(t0 + cur) * a.t_stride;
  if (s.step == 0) {  // nothing decoded yet: the empty prefix with probability 1
    if (tid < beam) {
      s.slot[tid] = paged ? kNoPage : tid;
      s.pb[tid] = tid == 0 ? 0.0f : -INFINITY;
      s.pnb[tid] = -INFINITY;
      s.len[tid] = 0;
      s.last[tid] = -1;
      s.hash[tid] = kEmptyHash;
      s.phash[tid] = 0;
      s.lp_last[tid] = -INFINITY;
    }
  } else if (tid < beam) {
    s.slot[tid] = w[L.slot() + tid];
    s.pb[tid] = __int_as_float(w[L.pb() + tid]);
    s.pnb[tid] = __int_as_float(w[L.pnb() + tid]);
    const int last = w[L.last() + tid];
    const int len = w[L.len() + tid];
    s.last[tid] = last;
    s.len[tid] = len;
    s.hash[tid] = (unsigned long long)(uint32_t)w[L.hash_lo() + tid] |
                  ((unsigned long long)(uint32_t)w[L.hash_hi() + tid] << 32);
    s.phash[tid] = (unsigned long long)(uint32_t)w[L.phash_lo() + tid] |
                   ((unsigned long long)(uint32_t)w[L.phash_hi() + tid] << 32);
    s.lp_last[tid] = (tid < s.nb && len > 0) ? load_lp(lp_cur + last) : -INFINITY;
  }
  {
    const int64_t base = ((int64_t)cur * a.rows + row) * C;
    for (int i = tid; i < s.cnt[cur]; i += NT) {
      s.ids[0][i] = a.pre_ids[base + i];
      s.lps[0][i] = a.pre_lp[base + i];
    }
    if (tid == 0) s.lp_blank[0] = load_lp(lp_cur + a.blank);
  }
  __syncthreads();

  int buf = 0;
  while (cur >= 0) {
    const int cnt = s.cnt[cur];
    const int nxt = next_selected(cur);
    const T* lp_next = nxt >= 0 ? lp_row + (int64_t)(t0 + nxt) * a.t_stride : nullptr;
    // prefetch the next decoded frame's candidate list and blank log-prob (state-independent); they land
    // in registers while this frame is decoded and are stored to shared memory at its end
    int pf_id = 0;
    float pf_lp = 0.0f, pf_blank = 0.0f;
    const int pf_cnt = nxt >= 0 ? s.cnt[nxt] : 0;
    const bool pf = tid < pf_cnt;  // C <= NT for every instantiation (C <= 2*beam+1)
    if (pf) {
      const int64_t base = ((int64_t)nxt * a.rows + row) * C;
      pf_id = a.pre_ids[base + tid];
      pf_lp = a.pre_lp[base + tid];
    }
    if (nxt >= 0 && tid == NT - 1) pf_blank = load_lp(lp_next + a.blank);

    const int64_t g = (int64_t)s.frames_seen + t0 + cur;
    const int nb = s.nb;
    const bool first = s.step == 0;
    const bool gap = !first && g > (int64_t)s.last_sel + 1;
    const int* ids = s.ids[buf];
    const float* lps = s.lps[buf];
    const float lp_blank = s.lp_blank[buf];

    // phase 1: collapse after skipped frames, A = logaddexp(pb, pnb)
    if (tid < beam) s.uses[tid] = 0;
    if (tid < nb) {
      const int j = tid;
      if (gap) {
        s.pb[j] = log_add(s.pb[j], s.pnb[j]);
        s.pnb[j] = -INFINITY;
      }
      s.A[j] = log_add(s.pb[j], s.pnb[j]);
      s.mcount[j] = 0;
      s.parent[j] = -1;
      s.lastpos[j] = -1;
      s.exmask[j] = 0ull;
    }
    __syncthreads();

    // phase 2: merge pairs, all (j, q) pairs in parallel: beam j with prefix p + c equals the extension of
    // beam q (prefix p) by c. Also where each beam's last char sits in this frame's candidate list.
    for (int x = tid; x < nb * nb; x += NT) {
      const int j = x / nb, q = x - (x / nb) * nb;
      if (s.len[j] > 0 && s.len[q] == s.len[j] - 1 && s.hash[q] == s.phash[j]) {
        s.parent[j] = q;
        atomicAdd(&s.mcount[q], 1);
      }
    }
    for (int x = tid; x < nb * cnt; x += NT) {
      const int j = x / cnt, i = x - (x / cnt) * cnt;
      if (s.len[j] > 0 && ids[i] == s.last[j]) s.lastpos[j] = i;
    }
    __syncthreads();
    if (tid < nb) {  // fold each merged extension into the beam it equals; exclude it from its source
      const int j = tid, k = s.parent[j];
      float fold = -INFINITY;
      s.excl[j] = -1;
      if (k >= 0) {
        fold = s.lp_last[j] + (s.last[j] == s.last[k] ? s.pb[k] : s.A[k]);
        const int p = s.lastpos[j];  // position of c = last[j] in the list
        if (p >= 0) {
          s.excl[j] = p;
          if (p < 64) atomicOr(&s.exmask[k], 1ull << p);
        }
      }
      s.fold[j] = fold;
    }
    __syncthreads();

    // phase 3-5: the top `beam` candidates (stays and extensions; ties: deterministic)
    int nw;
    {
    // general: score every candidate slot, then select
    for (int q = tid; q < NS; q += NT) {
      float sc = -INFINITY;
      if (q < beam) {
        if (q < nb) {
          const float snb = log_add(s.len[q] > 0 ? s.lp_last[q] + s.pnb[q] : -INFINITY, s.fold[q]);
          sc = log_add(lp_blank + s.A[q], snb);
        }
      } else {
        const int e = q - beam;
        const int k = e / C, i = e - k * C;
        if (k < nb && i < cnt && i < beam + 1 + s.mcount[k] && s.len[k] < max_len) {
          const int c = ids[i];
          sc = lps[i] + (c == s.last[k] ? s.pb[k] : s.A[k]);
        }
      }
      uint32_t key = sc == -INFINITY ? 0u : float_key(sc);
      if (first && beam > 1 && q == 0 && key != 0u) key = 0xFFFFFFFFu;  // reserved empty-prefix slot
      s_cand_key[q] = key;
    }
    __syncthreads();
    if (tid < nb && s.excl[tid] >= 0) s_cand_key[beam + s.parent[tid] * C + s.excl[tid]] = 0u;  // merged
    __syncthreads();
    // few live candidates: compact + rank by counting; many: radix select + ordered gather
    const int per = (NS + NT - 1) / NT;
    const int beg = min(NS, tid * per), end = min(NS, beg + per);
    int live = 0;
    for (int q = beg; q < end; ++q) live += s_cand_key[q] != 0u;
    int off, total;
    cub::BlockScan<int, NT>(s.iscan).ExclusiveSum(live, off, total);
    if (total <= kRankSelectMax) {
      for (int q = beg; q < end; ++q) {
        const uint32_t key = s_cand_key[q];
        if (key != 0u) {
          s.cidx[off] = q;
          s.ckey[off] = key;
          ++off;
        }
      }
      __syncthreads();
      for (int i = tid; i < total; i += NT) {
        const uint32_t ki = s.ckey[i];
        int r = 0;
        for (int j = 0; j < total; ++j) {
          const uint32_t kj = s.ckey[j];
          r += (kj > ki) | ((kj == ki) & (j < i));
        }
        if (r < beam) s.win[r] = s.cidx[i];
      }
      nw = total < beam ? total : beam;
      __syncthreads();
    } else {
      uint32_t thr;
      int k_eq;
      auto key_at = [&](int q) -> uint32_t { return s_cand_key[q]; };
      block_radix_select<NT>(key_at, NS, beam, s.hist, s.sel, thr, k_eq);
      nw = block_ordered_gather<NT>(key_at, NS, thr, k_eq, thr != 0u, s.win, s.scan);
    }

    }

    // phase 6: new beam state (+ issue the next frame's lp[last] loads)
    float pf_last = -INFINITY;
    if (tid < nw) {
      const int q = s.win[tid];
      int new_last, new_len;
      if (q < beam) {
        const int j = q;
        s.n_src[tid] = j;
        s.n_tok[tid] = -1;
        s.n_pb[tid] = lp_blank + s.A[j];
        s.n_pnb[tid] = log_add(s.len[j] > 0 ? s.lp_last[j] + s.pnb[j] : -INFINITY, s.fold[j]);
        new_last = s.last[j];
        new_len = s.len[j];
        s.n_hash[tid] = s.hash[j];
        s.n_phash[tid] = s.phash[j];
        atomicAdd(&s.uses[j], 1);
      } else {
        const int e = q - beam;
        const int k = e / C, i = e - k * C;
        const int c = ids[i];
        s.n_src[tid] = k;
        s.n_tok[tid] = c;
        s.n_pb[tid] = -INFINITY;
        s.n_pnb[tid] = lps[i] + (c == s.last[k] ? s.pb[k] : s.A[k]);
        new_last = c;
        new_len = s.len[k] + 1;
        s.n_hash[tid] = extend_hash(s.hash[k], c);
        s.n_phash[tid] = s.hash[k];
        if (new_len >= max_len) atomicOr(&s.status, kStatusCapHit);
        atomicAdd(&s.uses[k], 1);
      }
      s.n_last[tid] = new_last;
      s.n_len[tid] = new_len;
      if (nxt >= 0 && new_len > 0) pf_last = load_lp(lp_next + new_last);
    }
    __syncthreads();
    if (paged) {
      // paged storage (ctc_common.cuh): 1. beams nobody keeps drop their last page, cascading;
      // 2. later winners of a source reference its last page
      if (tid < nb && s.uses[tid] == 0) {
        for (int x = s.slot[tid]; x >= 0;) {
          if (atomicSub(&rc[x], 1) > 1) break;
          stack[atomicAdd(&s.ptop, 1)] = x;
          x = parent[x];
        }
      }
      if (tid < nw) {
        const int k = s.n_src[tid];
        bool fork = false;
        for (int y = 0; y < tid; ++y) fork |= s.n_src[y] == k;
        if (fork && s.slot[k] >= 0) atomicAdd(&rc[s.slot[k]], 1);
      }
      __syncthreads();
      // 3. appends, decided on those counts; allocations in winner order
      int need = 0;  // 1 fresh page, 2 copy on write, 3 in place, 4 lost
      int x = kNoPage, off = 0, tok = -1;
      if (tid < nw) {
        x = s.slot[s.n_src[tid]];
        tok = s.n_tok[tid];
        off = s.len[s.n_src[tid]] % P;
        if (tok >= 0) need = x == kLostPage ? 4 : off == 0 ? 1 : (rc[x] > 1 ? 2 : 3);
      }
      const int top = s.ptop;
      int ai, nalloc;
      cub::BlockScan<int, NT>(s.iscan).ExclusiveSum((need == 1 || need == 2) ? 1 : 0, ai, nalloc);
      int ntail = x;
      if (need == 3) {
        pages[(int64_t)x * P + off] = tok;
      } else if (need == 4) {
        atomicOr(&s.status, kStatusPoolFull);
      } else if (need != 0) {
        const int pg = ai < top ? stack[top - 1 - ai] : (s.pfresh + (ai - top) < a.num_pages ? s.pfresh + (ai - top) : -1);
        if (pg < 0) {
          atomicOr(&s.status, kStatusPoolFull);
          ntail = kLostPage;
        } else {
          rc[pg] = 1;
          pages[(int64_t)pg * P + off] = tok;
          ntail = pg;
          if (need == 1) {
            parent[pg] = x;
          } else {
            for (int q = 0; q < off; ++q) pages[(int64_t)pg * P + q] = pages[(int64_t)x * P + q];
            const int px = parent[x];
            parent[pg] = px;
            if (px >= 0) atomicAdd(&rc[px], 1);
            if (atomicSub(&rc[x], 1) == 1) s.def[atomicAdd(&s.ndef, 1)] = x;
          }
        }
      }
      if (tid < beam) s.n_slot[tid] = tid < nw ? ntail : kNoPage;
      __syncthreads();
      // 4. pages freed by the copies go back last. Every thread reads s.ndef / s.def / s.pfresh here, so
      // thread 0 only parks the new free-stack top and fresh counter in fields no other thread touches and
      // stores them after the next barrier, in the commit below (issue 19: storing s.ptop / s.pfresh here
      // raced with those reads, a WAR hazard racecheck reported at s.pfresh). Shared fields rather than
      // registers: registers live across the commit made the 512-thread kernel spill.
      const int top2 = top - min(nalloc, top);
      const int ndef = s.ndef;
      if (tid < ndef) {
        const int y = s.def[tid];
        stack[top2 + tid] = y;
        if (parent[y] >= 0) atomicSub(&rc[parent[y]], 1);
      }
      if (tid == 0) {
        s.ptop_next = top2 + ndef;
        s.pfresh_next = min(a.num_pages, s.pfresh + max(0, nalloc - top));
      }
      __syncthreads();
    } else {
      // token slots: the first winner of a source keeps its slot, later ones take slots of unchosen sources
      if (beam <= 32) {
        if (tid < 32) {
          const int lane = tid;
          const bool unused = lane < beam && s.uses[lane] == 0;
          const unsigned free_mask = __ballot_sync(0xFFFFFFFFu, unused);
          if (unused) s.free_slots[__popc(free_mask & ((1u << lane) - 1u))] = s.slot[lane];
          bool copy = false;
          if (lane < nw) {
            const int k = s.n_src[lane];
            for (int y = 0; y < lane; ++y) copy |= s.n_src[y] == k;
          }
          const unsigned copy_mask = __ballot_sync(0xFFFFFFFFu, copy);
          __syncwarp();
          if (lane < nw) {
            s.n_copy[lane] = copy;
            s.n_slot[lane] = copy ? s.free_slots[__popc(copy_mask & ((1u << lane) - 1u))] : s.slot[s.n_src[lane]];
          } else if (lane < beam) {
            s.n_slot[lane] = s.free_slots[__popc(copy_mask) + (lane - nw)];
          }
        }
      } else if (tid == 0) {
        int nfree = 0;
        for (int k = 0; k < beam; ++k)
          if (s.uses[k] == 0) s.free_slots[nfree++] = s.slot[k];
        int taken = 0;
        for (int x = 0; x < nw; ++x) {
          const int k = s.n_src[x];
          if (s.uses[k] > 0) {
            s.uses[k] = -1;
            s.n_slot[x] = s.slot[k];
            s.n_copy[x] = 0;
          } else {
            s.n_slot[x] = s.free_slots[taken++];
            s.n_copy[x] = 1;
          }
        }
        for (int x = nw; x < beam; ++x) s.n_slot[x] = s.free_slots[taken++];
      }
      __syncthreads();

      // phase 7: token copies (forks) and appends; copies read [0, len) of the source slot while its
      // keeper appends at len: disjoint.
      {
        const int warp = tid >> 5, lane = tid & 31;
        for (int x = warp; x < nw; x += NT / 32) {
          if (!s.n_copy[x]) continue;
          const int k = s.n_src[x];
          const token_t* src = tokens + (int64_t)s.slot[k] * max_len;
          token_t* dst = tokens + (int64_t)s.n_slot[x] * max_len;
          for (int p = lane; p < s.len[k]; p += 32) dst[p] = src[p];
        }
        if (tid < nw && s.n_tok[tid] >= 0)
          tokens[(int64_t)s.n_slot[tid] * max_len + s.len[s.n_src[tid]]] = s.n_tok[tid];
      }
      __syncthreads();
    }
    if (tid < beam) {
      s.slot[tid] = s.n_slot[tid];
      if (tid < nw) {
        s.pb[tid] = s.n_pb[tid];
        s.pnb[tid] = s.n_pnb[tid];
        s.last[tid] = s.n_last[tid];
        s.len[tid] = s.n_len[tid];
        s.hash[tid] = s.n_hash[tid];
        s.phash[tid] = s.n_phash[tid];
        s.lp_last[tid] = pf_last;
      }
    }
    if (pf) {
      s.ids[buf ^ 1][tid] = pf_id;
      s.lps[buf ^ 1][tid] = pf_lp;
    }
    if (nxt >= 0 && tid == NT - 1) s.lp_blank[buf ^ 1] = pf_blank;
    if (tid == 0) {
      s.nb = nw;
      s.step += 1;
      s.last_sel = (int)g;
      s.ndef = 0;
      if (paged) {  // step 4's results: no thread reads these between the barrier above and the one below
        s.ptop = s.ptop_next;
        s.pfresh = s.pfresh_next;
      }
    }
    __syncthreads();
    buf ^= 1;
    cur = nxt;
  }

  // write the state back
  if (tid < beam) {
    w[L.slot() + tid] = s.slot[tid];
    if (tid < s.nb) {
      w[L.pb() + tid] = __float_as_int(s.pb[tid]);
      w[L.pnb() + tid] = __float_as_int(s.pnb[tid]);
      w[L.last() + tid] = s.last[tid];
      w[L.len() + tid] = s.len[tid];
      w[L.hash_lo() + tid] = (int32_t)(uint32_t)(s.hash[tid] & 0xFFFFFFFFull);
      w[L.hash_hi() + tid] = (int32_t)(uint32_t)(s.hash[tid] >> 32);
      w[L.phash_lo() + tid] = (int32_t)(uint32_t)(s.phash[tid] & 0xFFFFFFFFull);
      w[L.phash_hi() + tid] = (int32_t)(uint32_t)(s.phash[tid] >> 32);
    }
  }
  if (tid == 0) {
    w[kHdrStep] = s.step;
    w[kHdrLastSel] = s.last_sel;
    w[kHdrActive] = s.nb;
    // the pre-pass may have set the bad-value bit in an earlier launch: OR, don't overwrite
    w[kHdrStatus] = s.status | w[kHdrStatus];
    w[kHdrFramesSeen] = s.frames_seen + advance_frames;
    w[kHdrFreeTop] = s.ptop;
    w[kHdrNextFresh] = s.pfresh;
  }
}

// ---------------------------------------------------------------------------------------------------
// One-warp decode kernel for beam <= 32 (the default path there): lane j holds beam j's state in registers,
// so a frame needs no block barrier and almost no shared memory round trips.
//   1. collapse after skipped frames; A_j = logaddexp(pb_j, pnb_j)
//   2. lastpos_j = where beam j's last char sits in the frame's candidate list (linear scan, broadcast)
//   3. merge pairs by prefix hash (shuffles over the nb beams): parent_j = the beam whose prefix is beam j's
//      minus its last char; that extension is folded into beam j's stay and excluded from the parent
//   4. each lane offers at most three heads: its stay, its last-char extension (scored from pb), and the
//      next ordinary extension of its stream (list order = score order, since ordinary extensions of beam
//      j score lp[c] + A_j); rounds of warp max over (key, -slot code) pick the top `beam` in rank order,
//      with the same slot codes and tie order as the block kernel's slot table (stays first, lower beam,
//      lower list position)
//   5. winners gather their source's state with shuffles; storage: flat slots (forks copy the prefix, 128
//      tokens per load round) or paged (ctc_common.cuh), warp-synchronous
// The next frame's candidate list, lp[blank] and lp[new last] are loaded during the frame.

struct WarpShared {
  int ids[2][2 * 32 + 1];
  float lps[2][2 * 32 + 1];
  float lp_blank[2];
  int cnt[kTile];
  int win[32];
  int free_slots[32];
  unsigned ex[32][3];  // per beam: list positions whose extension is merged into another beam
  int top;
  // flat, lazy storage: per decoded frame f of the launch and winner r, src | (token + 1) << 8 (token -1: a stay)
  unsigned hist[kTile][32];
  int cp_src[32], cp_dst[32], cp_n[32];  // end of launch: prefix copies (source slot, destination slot, length)
};

// Copies runs of elements within `base` (a warp, all lanes): run i is n[i] elements from src[i] * stride to
// dst[i] * stride. Up to kU loads per lane are in flight before their stores; sources and destinations
// are disjoint slots, so no run reads another's output.
template <typename E>
__device__ __forceinline__ void warp_copy_runs(E* base, int64_t stride, const int* src, const int* dst,
                                               const int* n, int count, int lane) {
  constexpr int kU = 16;
  int fi = 0, p0 = 0;  // warp-uniform cursor: run fi, element p0
  while (fi < count) {
    E v[kU];
    int64_t d[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      while (fi < count && p0 >= n[fi]) {
        ++fi;
        p0 = 0;
      }
      d[u] = -1;
      if (fi < count) {
        const int p = p0 + lane;
        if (p < n[fi]) {
          v[u] = base[(int64_t)src[fi] * stride + p];
          d[u] = (int64_t)dst[fi] * stride + p;
        }
        p0 += 32;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (d[u] >= 0) base[d[u]] = v[u];
  }
}

// kOptIn: compiled with the opt-in experiment (a.paged_smem); the default instantiation
// (false) leaves them out entirely, so its code is what the measurements above ran.
// kSelect: the rounds of step 4 without a divergent branch (see "rounds, select form" below); false keeps the
// branch form measured before 2026-12-06. Both pick the same winners in the same order.
// kMulti (with kSelect: step 5 reads its codes): the rounds of step 4 take several winners at once (multi_rounds, ctc_warp_rounds.cuh);
// the same winners in the same order.
// kStateFree: the fused state check's form (see "Fused state check"): with a.fused_check the row's verdict is formed
// here first, from the pre-pass launch's check parts; the pre-pass's bad-value marks come in its counts.
template <typename T, bool kOptIn, bool kSelect = false, bool kMulti = false, bool kStateFree = false>
__global__ void __launch_bounds__(32) ctc_decode_warp_kernel(FrameArgs<T> a, int t0, int tile_len, int advance_frames) {
  wait_prior_grid_then_release_next(a.pdl);
  constexpr unsigned kFull = 0xFFFFFFFFu;
  __shared__ WarpShared s;
  const int row = blockIdx.x, lane = threadIdx.x;
  if constexpr (kStateFree) {
    if (a.fused_check) {
      int code = 0;
      if (lane == 0) code = fused_check_verdict(a, row);
      if (__shfl_sync(kFull, code, 0) != 0) return;  // warp-uniform: refused, nothing past the header was read
    } else if (a.refused(row)) {
      return;
    }
  } else {
    if (a.refused(row)) return;  // warp-uniform
  }
  const int beam = a.beam, C = a.C, max_len = a.max_len, P = a.page_size, NP = a.num_pages;
  const bool paged = P > 0;
  const unsigned lt_mask = (1u << lane) - 1u;
  const StateLayout L{beam, max_len, P, NP};
  int32_t* w = a.states.row(row);
  token_t* tokens = reinterpret_cast<token_t*>(w + L.tokens());
  int32_t* parent = w + L.parent();
  int32_t* rc = w + L.refcnt();
  int32_t* stack = w + L.free_stack();
  token_t* pages = reinterpret_cast<token_t*>(w + L.pages());
  const T* lp_row = a.log_probs + (int64_t)row * a.b_stride;
  // opt-in (a.paged_smem): the page metadata (parent links, reference counts, free stack) of this row lives in
  // shared memory for the launch, so reference-count updates and pops are shared-memory operations rather
  // than global round trips; copied in below and back at the end (only the used ranges)
  extern __shared__ int32_t s_meta[];  // (3 * NP) when a.paged_smem
  const bool meta_smem = kOptIn && paged && a.paged_smem;
  const bool lazy = !paged;
  int nf = 0;  // frames decoded by this launch (lazy: rows of s.hist)

  int step = w[kHdrStep];
  int last_sel = w[kHdrLastSel];
  const int frames_seen = w[kHdrFramesSeen];
  int nb = step == 0 ? 1 : w[kHdrActive];
  int top = w[kHdrFreeTop], fresh = w[kHdrNextFresh];
  int flags = 0;  // status bits seen by this lane
  for (int p = lane; p < tile_len; p += 32) {
    int c = a.pre_cnt[(int64_t)p * a.rows + row];
    if constexpr (kStateFree) {  // the pre-pass's bad-value marks (it no longer writes the row itself)
      if (c == kSkippedBadValue || (c >= 0 && (c & kCntBadValue))) flags |= kStatusBadValue;
      c = c == kSkippedBadValue ? -1 : c >= 0 ? c & ~kCntBadValue : c;
    }
    s.cnt[p] = c;
  }
  __syncwarp();
  auto next_selected = [&](int p) -> int {
    for (++p; p < tile_len; ++p)
      if (s.cnt[p] >= 0) return p;
    return -1;
  };
  int cur = next_selected(-1);
  if (cur < 0) {
    if constexpr (kStateFree) {
      const bool bad = __any_sync(kFull, flags != 0);
      if (lane == 0 && bad) w[kHdrStatus] = w[kHdrStatus] | kStatusBadValue;
    }
    if (lane == 0) w[kHdrFramesSeen] = frames_seen + advance_frames;
    return;
  }
  const T* lp_cur = lp_row + (int64_t)(t0 + cur) * a.t_stride;
  if (meta_smem) {
    for (int i = lane; i < fresh; i += 32) {
      s_meta[i] = parent[i];
      s_meta[NP + i] = rc[i];
    }
    for (int i = lane; i < top; i += 32) s_meta[2 * NP + i] = stack[i];
    parent = s_meta;
    rc = s_meta + NP;
    stack = s_meta + 2 * NP;
    __syncwarp();
  }
  float pb = -INFINITY, pnb = -INFINITY, lp_last = -INFINITY;
  int last = -1, len = 0, slot = paged ? kNoPage : lane;
  unsigned long long hash = kEmptyHash, phash = 0;
  if (step == 0) {
    pb = lane == 0 ? 0.0f : -INFINITY;
  } else if (lane < beam) {
    slot = w[L.slot() + lane];
    if (lane < nb) {
      pb = __int_as_float(w[L.pb() + lane]);
      pnb = __int_as_float(w[L.pnb() + lane]);
      last = w[L.last() + lane];
      len = w[L.len() + lane];
      hash = (unsigned long long)(uint32_t)w[L.hash_lo() + lane] |
             ((unsigned long long)(uint32_t)w[L.hash_hi() + lane] << 32);
      phash = (unsigned long long)(uint32_t)w[L.phash_lo() + lane] |
              ((unsigned long long)(uint32_t)w[L.phash_hi() + lane] << 32);
      if (len > 0) lp_last = load_lp(lp_cur + last);
    }
  }
  const int slot0 = slot, len0 = len;  // this lane's beam at the start of the launch (lazy storage)
  {
    const int64_t base = ((int64_t)cur * a.rows + row) * C;
    for (int i = lane; i < s.cnt[cur]; i += 32) {
      s.ids[0][i] = a.pre_ids[base + i];
      s.lps[0][i] = a.pre_lp[base + i];
    }
    if (lane == 0) s.lp_blank[0] = load_lp(lp_cur + a.blank);
  }
  __syncwarp();

  int buf = 0;
  while (cur >= 0) {
    const int cnt = s.cnt[cur];
    const int nxt = next_selected(cur);
    const T* lp_next = nxt >= 0 ? lp_row + (int64_t)(t0 + nxt) * a.t_stride : nullptr;
    // the next decoded frame's list and lp[blank]: loads issued now, stored at the end of the frame
    int pf_id[3] = {0, 0, 0};
    float pf_lp[3] = {0.0f, 0.0f, 0.0f};
    float pf_blank = 0.0f;
    const int pf_cnt = nxt >= 0 ? s.cnt[nxt] : 0;
    if (nxt >= 0) {
      const int64_t base = ((int64_t)nxt * a.rows + row) * C;
#pragma unroll
      for (int m = 0; m < 3; ++m) {
        const int i = lane + 32 * m;
        if (i < pf_cnt) {
          pf_id[m] = a.pre_ids[base + i];
          pf_lp[m] = a.pre_lp[base + i];
        }
      }
      if (lane == 0) pf_blank = load_lp(lp_next + a.blank);
    }
    const int64_t g = (int64_t)frames_seen + t0 + cur;
    const bool first = step == 0;
    const bool gap = !first && g > (int64_t)last_sel + 1;
    const int* ids = s.ids[buf];
    const float* lps = s.lps[buf];
    const float lp_blank = s.lp_blank[buf];
    const bool valid = lane < nb;
    // the next frame's lp of every possible new last token (a beam's own last: it stays; a listed char: an
    // extension), loaded now so the winners pick theirs with a shuffle instead of waiting for a load
    float nx_own = -INFINITY, nx_c[3] = {-INFINITY, -INFINITY, -INFINITY};
    if (nxt >= 0) {
      if (valid && len > 0) nx_own = load_lp(lp_next + last);
#pragma unroll
      for (int m = 0; m < 3; ++m)
        if (lane + 32 * m < cnt) nx_c[m] = load_lp(lp_next + ids[lane + 32 * m]);
    }

    // 1. collapse after skipped frames
    if (gap && valid) {
      pb = log_add(pb, pnb);
      pnb = -INFINITY;
    }
    const float A = valid ? log_add(pb, pnb) : -INFINITY;
    // 2. my last char in the list
    int lastpos = -1;
    if (valid && len > 0) {
#pragma unroll 4
      for (int i = 0; i < cnt; ++i)
        if (ids[i] == last) lastpos = i;
    }
    // 3. merge pairs: my parent's prefix is mine without my last char
    int par = -1;
    const unsigned h_lo = (unsigned)(hash & 0xFFFFFFFFull), h_hi = (unsigned)(hash >> 32);
#pragma unroll 4
    for (int q = 0; q < nb; ++q) {
      const unsigned q_lo = __shfl_sync(kFull, h_lo, q), q_hi = __shfl_sync(kFull, h_hi, q);
      const int q_len = __shfl_sync(kFull, len, q);
      if (valid && len > 0 && q_len == len - 1 && (((unsigned long long)q_hi << 32) | q_lo) == phash) par = q;
    }
    s.ex[lane][0] = 0u;
    s.ex[lane][1] = 0u;
    s.ex[lane][2] = 0u;
    const int pq = par >= 0 ? par : lane;
    const float par_pb = __shfl_sync(kFull, pb, pq), par_A = __shfl_sync(kFull, A, pq);
    const int par_last = __shfl_sync(kFull, last, pq);
    const float fold = par >= 0 ? lp_last + (last == par_last ? par_pb : par_A) : -INFINITY;
    __syncwarp();
    if (par >= 0 && lastpos >= 0) atomicOr(&s.ex[par][lastpos >> 5], 1u << (lastpos & 31));
    __syncwarp();
    const unsigned ex0 = s.ex[lane][0], ex1 = s.ex[lane][1], ex2 = s.ex[lane][2];
    auto excluded = [&](int i) -> bool {
      const unsigned wd = i < 32 ? ex0 : (i < 64 ? ex1 : ex2);
      return (wd >> (i & 31)) & 1u;
    };

    // 4. heads and rounds
    const float snb = log_add(valid && len > 0 ? lp_last + pnb : -INFINITY, fold);
    const float stay = valid ? log_add(lp_blank + A, snb) : -INFINITY;
    uint32_t k_stay = stay == -INFINITY ? 0u : float_key(stay);
    if (first && beam > 1 && lane == 0 && k_stay != 0u) k_stay = 0xFFFFFFFFu;  // reserved empty prefix
    const bool can_ext = valid && len < max_len;
    uint32_t k_last = 0u;
    if (can_ext && lastpos >= 0 && !excluded(lastpos)) {
      const float sc = lps[lastpos] + pb;
      k_last = sc == -INFINITY ? 0u : float_key(sc);
    }
    // my ordinary extensions: list positions below cnt that are neither my last char nor merged into another
    // beam, as a bit set consumed lowest first (list order = score order); none when I cannot extend
    unsigned rem0 = 0u, rem1 = 0u, rem2 = 0u;  // cnt <= 2 * 32 + 1: positions 0..64
    if (can_ext) {
      rem0 = (cnt >= 32 ? 0xFFFFFFFFu : (1u << cnt) - 1u) & ~ex0;
      rem1 = (cnt >= 64 ? 0xFFFFFFFFu : cnt > 32 ? (1u << (cnt - 32)) - 1u : 0u) & ~ex1;
      rem2 = (cnt > 64 ? 1u : 0u) & ~ex2;
      if (lastpos >= 0) {
        const unsigned bit = ~(1u << (lastpos & 31));
        if (lastpos < 32) rem0 &= bit;
        else if (lastpos < 64) rem1 &= bit;
        else rem2 &= bit;
      }
    }
    // branch-free pop (select form): the same position and bit-set update as pop_ord, as selects
    auto pop_ord_sel = [&](bool take) -> int {
      OrdStream o{rem0, rem1, rem2, cnt};
      const int i = o.pop_sel(take);
      rem0 = o.rem0;
      rem1 = o.rem1;
      rem2 = o.rem2;
      return i;
    };
    auto pop_ord = [&]() -> int {
      if (rem0) {
        const int i = __ffs(rem0) - 1;
        rem0 &= rem0 - 1u;
        return i;
      }
      if (rem1) {
        const int i = 31 + __ffs(rem1);
        rem1 &= rem1 - 1u;
        return i;
      }
      if (rem2) {
        rem2 = 0u;
        return 64;
      }
      return cnt;
    };
    int oi = pop_ord();
    uint32_t k_ord = 0u;
    if (oi < cnt) {
      const float sc = lps[oi] + A;
      k_ord = sc == -INFINITY ? 0u : float_key(sc);
    }
    int oi2 = oi < cnt ? pop_ord() : cnt;  // the next one, its lp loaded a round ahead
    float lp2 = oi2 < cnt ? lps[oi2] : 0.0f;
    const unsigned code_base = (unsigned)(beam + lane * C);
    // my head: the best of my stay, last-char extension and next ordinary extension (ties: lowest slot code)
    uint32_t bk = 0u;
    unsigned bc = 0u;
    int bt = 0;
    auto head = [&]() {
      bk = k_stay;
      bc = (unsigned)lane;
      bt = 0;
      if (k_last > bk) {
        bk = k_last;
        bc = code_base + lastpos;
        bt = 1;
      }
      if (k_ord > bk || (k_ord == bk && k_ord != 0u && bt == 1 && oi < lastpos)) {
        bk = k_ord;
        bc = code_base + oi;
        bt = 2;
      }
    };
    head();
    int nw = 0;
    if constexpr (kMulti) {  // several winners per round, with the select form's codes (ctc_warp_rounds.cuh)
      OrdStream ord{rem0, rem1, rem2, cnt};
      nw = multi_rounds(CudaWarp{}, lane, nb, beam, k_stay, k_last, lastpos, k_ord, oi, oi2, ord, lps, A, s.win);
    } else if constexpr (kSelect) {
      // Rounds, select form. The branch form below makes the winner's update a divergent branch on the
      // round's critical path (reduce -> vote -> winner's update -> reduce). Here the head is chosen with
      // selects, the key of each lane's ordinary extension after the next one is kept a round ahead (k_ord2),
      // so the winner's new head is a few selects after the vote, and the refill that replaces a consumed
      // k_ord2 (pop, shared load, key) runs after the next round's reduce is issued, overlapping it.
      auto key_of = [&](int i) -> uint32_t {
        const float sc = (i < cnt ? lps[i] : 0.0f) + A;
        return i < cnt && sc != -INFINITY ? float_key(sc) : 0u;
      };
      auto head_sel = [&]() {
        const bool l = k_last > k_stay;
        const uint32_t k = l ? k_last : k_stay;
        const int t = l ? 1 : 0;
        const bool o = k_ord > k || (k_ord == k && k_ord != 0u && t == 1 && oi < lastpos);
        bk = o ? k_ord : k;
        // s.win only carries the code to step 5 (ties are decided by lane and head type, never by code), so the
        // select form writes the winner's source and list position directly (kSelExt: an extension)
        const unsigned ext = kSelExt | ((unsigned)lane << 8);
        bc = o ? ext | (unsigned)oi : (l ? ext | (unsigned)lastpos : (unsigned)lane);
        bt = o ? 2 : t;
      };
      head_sel();  // the same head as head() above, with the select form's codes
      uint32_t k_ord2 = oi2 < cnt ? key_of(oi2) : 0u;
      bool pend = false;  // this lane took its ordinary extension last round: k_ord2 / oi2 to refill
      for (; nw < beam; ++nw) {
        const uint32_t m = __reduce_max_sync(kFull, bk);
        {  // last round's refill, independent of m
          const int o2 = oi < cnt ? pop_ord_sel(pend) : cnt;
          const uint32_t k2 = key_of(o2);
          oi2 = pend ? o2 : oi2;
          k_ord2 = pend ? k2 : k_ord2;
        }
        if (m == 0u) break;
        const unsigned tie = __ballot_sync(kFull, bk == m), tie_stay = __ballot_sync(kFull, bk == m && bt == 0);
        const bool won = lane == __ffs(tie_stay ? tie_stay : tie) - 1;
        if (won) s.win[nw] = (int)bc;
        pend = won && bt == 2;
        k_stay = won && bt == 0 ? 0u : k_stay;
        k_last = won && bt == 1 ? 0u : k_last;
        oi = pend ? oi2 : oi;
        k_ord = pend ? k_ord2 : k_ord;
        head_sel();
      }
    } else
    for (; nw < beam; ++nw) {
      const uint32_t m = __reduce_max_sync(kFull, bk);
      if (m == 0u) break;
      // the lowest slot code among the heads at the maximum: stays (codes < beam) before extensions, then the
      // lower beam (a lane offers one head; extension codes are beam + lane * C + position)
      const unsigned tie = __ballot_sync(kFull, bk == m), tie_stay = __ballot_sync(kFull, bk == m && bt == 0);
      if (lane == __ffs(tie_stay ? tie_stay : tie) - 1) {
        s.win[nw] = (int)bc;
        if (bt == 0) {
          k_stay = 0u;
        } else if (bt == 1) {
          k_last = 0u;
        } else {
          oi = oi2;
          k_ord = 0u;
          if (oi < cnt) {
            const float sc = lp2 + A;
            k_ord = sc == -INFINITY ? 0u : float_key(sc);
          }
          oi2 = oi < cnt ? pop_ord() : cnt;
          lp2 = oi2 < cnt ? lps[oi2] : 0.0f;
        }
        head();
      }
    }
    __syncwarp();

    // 5. new beams (lane r = rank r) from their sources
    const bool is_w = lane < nw;
    int src = lane, tok = -1, tpos = 0;
    float lpv = 0.0f;
    if (is_w) {
      const int code = s.win[lane];
      if constexpr (kSelect) {  // extension codes are kSelExt | source << 8 | list position: no division
        if (code & kSelExt) {
          src = (code >> 8) & 0xFF;
          const int i = code & 0xFF;
          tok = ids[i];
          lpv = lps[i];
          tpos = i;
        } else {
          src = code;
        }
      } else if (code >= beam) {
        const int e = code - beam;
        src = e / C;
        const int i = e - src * C;
        tok = ids[i];
        lpv = lps[i];
        tpos = i;
      } else {
        src = code;
      }
    }
    const float g_pb = __shfl_sync(kFull, pb, src), g_pnb = __shfl_sync(kFull, pnb, src);
    const float g_A = __shfl_sync(kFull, A, src), g_fold = __shfl_sync(kFull, fold, src);
    const float g_lp_last = __shfl_sync(kFull, lp_last, src);
    const int g_last = __shfl_sync(kFull, last, src), g_len = __shfl_sync(kFull, len, src);
    const unsigned g_lo = __shfl_sync(kFull, h_lo, src), g_hi = __shfl_sync(kFull, h_hi, src);
    const unsigned long long g_hash = ((unsigned long long)g_hi << 32) | g_lo;
    const unsigned g_plo = __shfl_sync(kFull, (unsigned)(phash & 0xFFFFFFFFull), src);
    const unsigned g_phi = __shfl_sync(kFull, (unsigned)(phash >> 32), src);
    float n_pb, n_pnb;
    int n_last, n_len;
    unsigned long long n_hash, n_phash;
    if (tok < 0) {
      n_pb = lp_blank + g_A;
      n_pnb = log_add(g_len > 0 ? g_lp_last + g_pnb : -INFINITY, g_fold);
      n_last = g_last;
      n_len = g_len;
      n_hash = g_hash;
      n_phash = ((unsigned long long)g_phi << 32) | g_plo;
    } else {
      n_pb = -INFINITY;
      n_pnb = lpv + (tok == g_last ? g_pb : g_A);
      n_last = tok;
      n_len = g_len + 1;
      n_hash = extend_hash(g_hash, tok);
      n_phash = g_hash;
      if (n_len >= max_len) flags |= kStatusCapHit;
    }
    const float nx_stay = __shfl_sync(kFull, nx_own, src);
    const float nx0 = __shfl_sync(kFull, nx_c[0], tpos & 31), nx1 = __shfl_sync(kFull, nx_c[1], tpos & 31),
                nx2 = __shfl_sync(kFull, nx_c[2], tpos & 31);
    const float pf_last = tok < 0 ? nx_stay : (tpos < 32 ? nx0 : (tpos < 64 ? nx1 : nx2));

    // storage. Flat (lazy): record (source, token) of every winner; the prefixes are rebuilt once at the end of
    // the launch. Paged: ctc_common.cuh, every frame.
    int n_slot = slot;
    if (lazy) {
      s.hist[nf][lane] = is_w ? (unsigned)src | ((unsigned)(tok + 1) << 8) : 0u;
      ++nf;
    } else {
      const int g_slot = __shfl_sync(kFull, slot, src);  // the source's last page
      const unsigned used = __reduce_or_sync(kFull, is_w ? (1u << src) : 0u);
      const unsigned same = __match_any_sync(kFull, is_w ? src : 64 + lane);
      const bool fork = is_w && (same & lt_mask) != 0u;
      // 1. beams nobody keeps drop their last page (cascading); 2. forks reference their source's
      if (lane == 0) s.top = top;
      __syncwarp();
      if (valid && !((used >> lane) & 1u)) {
        for (int x = slot; x >= 0;) {
          if (atomicSub(&rc[x], 1) > 1) break;
          stack[atomicAdd(&s.top, 1)] = x;
          x = parent[x];
        }
      }
      if (fork && g_slot >= 0) atomicAdd(&rc[g_slot], 1);
      __syncwarp();
      top = s.top;
      // 3. appends, decided on those counts; allocations in winner (lane) order
      const int off = g_len % P;
      int need = 0;  // 1 fresh page, 2 copy on write, 3 in place, 4 lost
      if (is_w && tok >= 0) need = g_slot == kLostPage ? 4 : off == 0 ? 1 : (rc[g_slot] > 1 ? 2 : 3);
      __syncwarp();
      const bool alloc = need == 1 || need == 2;
      const unsigned am = __ballot_sync(kFull, alloc);
      const int nalloc = __popc(am);
      n_slot = is_w ? g_slot : kNoPage;
      bool deferred = false;
      if (need == 3) {
        pages[(int64_t)g_slot * P + off] = tok;
      } else if (need == 4) {
        flags |= kStatusPoolFull;
      } else if (alloc) {
        const int i = __popc(am & lt_mask);
        const int pg = i < top ? stack[top - 1 - i] : (fresh + (i - top) < NP ? fresh + (i - top) : -1);
        if (pg < 0) {
          flags |= kStatusPoolFull;
          n_slot = kLostPage;
        } else {
          rc[pg] = 1;
          pages[(int64_t)pg * P + off] = tok;
          n_slot = pg;
          if (need == 1) {
            parent[pg] = g_slot;
          } else {
            for (int q = 0; q < off; ++q) pages[(int64_t)pg * P + q] = pages[(int64_t)g_slot * P + q];
            const int px = parent[g_slot];
            parent[pg] = px;
            if (px >= 0) atomicAdd(&rc[px], 1);
            deferred = atomicSub(&rc[g_slot], 1) == 1;
          }
        }
      }
      const int top2 = top - min(nalloc, top);
      fresh = min(NP, fresh + max(0, nalloc - top));
      const unsigned dm = __ballot_sync(kFull, deferred);
      __syncwarp();  // allocations read the stack slots the deferred pushes overwrite
      if (deferred) {  // 4. pages freed by the copies go back last
        stack[top2 + __popc(dm & lt_mask)] = g_slot;
        const int px = parent[g_slot];
        if (px >= 0) atomicSub(&rc[px], 1);
      }
      top = top2 + __popc(dm);
    }

    // commit
    if (lane < beam) slot = n_slot;
    if (is_w) {
      pb = n_pb;
      pnb = n_pnb;
      last = n_last;
      len = n_len;
      hash = n_hash;
      phash = n_phash;
      lp_last = pf_last;
    }
    if (nxt >= 0) {
#pragma unroll
      for (int m = 0; m < 3; ++m) {
        const int i = lane + 32 * m;
        if (i < pf_cnt) {
          s.ids[buf ^ 1][i] = pf_id[m];
          s.lps[buf ^ 1][i] = pf_lp[m];
        }
      }
      if (lane == 0) s.lp_blank[buf ^ 1] = pf_blank;
    }
    nb = nw;
    step += 1;
    last_sel = (int)g;
    __syncwarp();
    buf ^= 1;
    cur = nxt;
  }

  if (lazy) {
    // Rebuild the prefixes: walk each live beam back through this launch's winners to the beam it came from
    // at the launch start (its origin). The first live beam of an origin keeps the origin's slot, later ones
    // take slots no live beam came from and copy the origin's prefix (all copies at once), then every beam
    // writes the tokens it appended during the launch, found on a second walk back.
    const bool live = lane < nb;
    int org = lane;
    if (live)
      for (int f = nf - 1; f >= 0; --f) org = (int)(s.hist[f][org] & 0xFFu);
    const unsigned used = __reduce_or_sync(kFull, live ? (1u << org) : 0u);
    const unsigned same = __match_any_sync(kFull, live ? org : 64 + lane);
    const bool fork = live && (same & lt_mask) != 0u;
    const unsigned fork_mask = __ballot_sync(kFull, fork);
    const bool unused = lane < beam && !((used >> lane) & 1u);
    const unsigned free_mask = __ballot_sync(kFull, unused);
    if (unused) s.free_slots[__popc(free_mask & lt_mask)] = slot0;
    const int o_slot = __shfl_sync(kFull, slot0, org), o_len = __shfl_sync(kFull, len0, org);
    __syncwarp();
    int n_slot = lane;
    if (live) n_slot = fork ? s.free_slots[__popc(fork_mask & lt_mask)] : o_slot;
    else if (lane < beam) n_slot = s.free_slots[__popc(fork_mask) + (lane - nb)];
    if (fork) {
      const int i = __popc(fork_mask & lt_mask);
      s.cp_src[i] = o_slot;
      s.cp_dst[i] = n_slot;
      s.cp_n[i] = (max_len & 1) ? o_len : (o_len + 1) / 2;
    }
    __syncwarp();
    if (max_len & 1)
      warp_copy_runs(tokens, max_len, s.cp_src, s.cp_dst, s.cp_n, __popc(fork_mask), lane);
    else  // even slot stride: whole 32-bit words (a copied odd tail element is past the length or rewritten below)
      warp_copy_runs(reinterpret_cast<uint32_t*>(w + L.tokens()), max_len / 2, s.cp_src, s.cp_dst, s.cp_n,
                     __popc(fork_mask), lane);
    __syncwarp();
    if (live) {
      token_t* dst = tokens + (int64_t)n_slot * max_len;
      int pos = len, b = lane;
      for (int f = nf - 1; f >= 0; --f) {
        const unsigned e = s.hist[f][b];
        if (e >> 8) dst[--pos] = (token_t)((e >> 8) - 1u);
        b = (int)(e & 0xFFu);
      }
    }
    if (lane < beam) slot = n_slot;
  }

  // write the state back
  if (meta_smem) {
    __syncwarp();
    for (int i = lane; i < fresh; i += 32) {
      w[L.parent() + i] = s_meta[i];
      w[L.refcnt() + i] = s_meta[NP + i];
    }
    for (int i = lane; i < top; i += 32) w[L.free_stack() + i] = s_meta[2 * NP + i];
  }
  if (lane < beam) {
    w[L.slot() + lane] = slot;
    if (lane < nb) {
      w[L.pb() + lane] = __float_as_int(pb);
      w[L.pnb() + lane] = __float_as_int(pnb);
      w[L.last() + lane] = last;
      w[L.len() + lane] = len;
      w[L.hash_lo() + lane] = (int32_t)(uint32_t)(hash & 0xFFFFFFFFull);
      w[L.hash_hi() + lane] = (int32_t)(uint32_t)(hash >> 32);
      w[L.phash_lo() + lane] = (int32_t)(uint32_t)(phash & 0xFFFFFFFFull);
      w[L.phash_hi() + lane] = (int32_t)(uint32_t)(phash >> 32);
    }
  }
  flags = (int)__reduce_or_sync(kFull, (unsigned)flags);
  if (lane == 0) {
    w[kHdrStep] = step;
    w[kHdrLastSel] = last_sel;
    w[kHdrActive] = nb;
    w[kHdrStatus] = w[kHdrStatus] | flags;  // the pre-pass may have set the bad-value bit
    w[kHdrFramesSeen] = frames_seen + advance_frames;
    w[kHdrFreeTop] = top;
    w[kHdrNextFresh] = fresh;
  }
}

// ---------------------------------------------------------------------------------------------------
// State integrity (ctc_common.cuh): one block per row. The checksum terms are summed by every thread (any
// order: the sum is mod 2^64), the O(beam) field checks run on thread 0 meanwhile.
// Two forms (BEAMDEC_CTC_CHECK_THREADS): 1024 threads with 4 terms in flight per thread (the default since
// 2026-12-06), or =256: 256 threads, one checksum term at a time. The kernels alone: the check and the seal of one
// stream's row (beam 10, max_seq_len 2048: ~10k words) take 11.6 and 9.9 us of a 16-frame chunk's 88 us with 256
// threads, 6.7 and 5.0 us with 1024 (H100, torch.profiler, eval.bench.ctc_api_profile; each term is a dependent
// chain of 64-bit mixes). ctc_bench's interleaved A/B with the contenders' order rotated per repeat (H100, 20
// repeats, reports/measurements/h100_2026-12-06/ctc_s16/): one stream 7.66 / 8.10 / 8.72 us per frame at 32 /
// 1,000 / 2,000 frames with 1024 vs 7.83 / 8.91 / 9.39 with 256 (2-9 %); 256 streams 0-4 % slower with 1024 (rows
// 0.064-0.065 us per stream-frame either way). The one-stream latency is the open goal, so 1024. (An earlier A/B
// with a fixed order had 1024 slower at 1,000-2,000 frames: it always ran right after OASR.)
constexpr int kStateCheckThreads = 1024;

template <int NT, bool kUnroll>
__device__ __forceinline__ unsigned long long block_row_checksum(const int32_t* w, int64_t words,
                                                                 typename cub::BlockReduce<unsigned long long, NT>::TempStorage& tmp) {
  // valid in thread 0 only
  return block_checksum_terms<NT, kUnroll>(w, 0, words, tmp) + checksum_seed(words);
}

// err (rows, kStateErrorWords): 0 or the first refused field of each row (StateError). Reads only the
// header before it knows beam-indexed reads are in range: the field checks read fixed offsets of a row
// whose width the op already checked against the layout, so nothing here can go out of bounds.
template <int NT>
__global__ void __launch_bounds__(NT)
ctc_state_check_kernel(StateRefs states, int64_t words, StateStamp want, int32_t* err) {
  __shared__ typename cub::BlockReduce<unsigned long long, NT>::TempStorage tmp;
  const int row = blockIdx.x;
  const int32_t* w = states.row(row);
  const unsigned long long h = block_row_checksum<NT, NT == kStateCheckThreads>(w, words, tmp);
  if (threadIdx.x != 0) return;
  store_state_error(err + (int64_t)row * kStateErrorWords,
                    checksum_verdict(validate_state_fields(w, want), h, stored_checksum(w)));
}

// Re-seals each row the decode wrote (skipping rows refused by `err`, if given); with `stamp` it first
// writes the stamp words of freshly zeroed rows (ctc_init_state).
template <int NT>
__global__ void __launch_bounds__(NT)
ctc_state_seal_kernel(StateRefs states, int64_t words, const int32_t* err, int do_stamp, StateStamp stamp, int pdl) {
  wait_prior_grid_then_release_next(pdl);
  __shared__ typename cub::BlockReduce<unsigned long long, NT>::TempStorage tmp;
  const int row = blockIdx.x;
  if (err && err[(int64_t)row * kStateErrorWords] != 0) return;  // block-uniform
  int32_t* w = states.row(row);
  if (do_stamp && threadIdx.x == 0) stamp_row(w, stamp);
  __syncthreads();  // the stamp words are part of the sum
  const unsigned long long h = block_row_checksum<NT, NT == kStateCheckThreads>(w, words, tmp);
  if (threadIdx.x == 0) {
    w[kHdrChecksumLo] = (int32_t)(uint32_t)(h & 0xFFFFFFFFull);
    w[kHdrChecksumHi] = (int32_t)(uint32_t)(h >> 32);
  }
}

// The seal of a few rows as thread-block clusters (sm_90; the streaming ops' default there for <= kClusterSealMaxRows
// rows, BEAMDEC_CTC_SEAL=block for the kernel above; session 30). One cluster of kSealParts blocks per row,
// each summing the checksum terms of an eighth of the row (the sum is mod 2^64, so parts add, as the fused check's
// parts do); rank 0 adds the parts through distributed shared memory and writes the checksum words, and the second
// cluster barrier keeps every block resident until it has read them. Why: the one-block seal of a 41 KB row (beam
// 10, max_seq_len 2,048) is ~10,000 mix64 terms on one SM, ~1.6 us of issue alone at 1,024 threads, plus three rounds
// of loads; spread over eight SMs each block has ~5 terms per thread and one round of loads. Rows refused by `err`
// are skipped by the whole cluster (the test is the same for its blocks), no stamping (the ops seal freshly stamped
// rows with the kernel above). The same checksum words as ctc_state_seal_kernel. Measured on the H100 (session 30, two
// calls, in-process against =block, 40 repeats; reports/measurements/README.md "Session 30"): one stream 3.62-3.73 us
// per frame on CUDA events instead of 3.87-4.02 (-5 to -7 %; wall 3.84-3.97 instead of 4.09-4.24); 256 streams (the
// block kernel's rows, one seal block per row either way) equal. The gpu tests and memcheck / racecheck / synccheck
// over the smoke ran with it.
constexpr int kSealParts = 8;            // blocks per row: the portable cluster size limit
constexpr int kSealClusterThreads = 256;
constexpr int kClusterSealMaxRows = 16;  // 128 blocks; above that one block per row fills the GPU already

__global__ void __launch_bounds__(kSealClusterThreads)
ctc_state_seal_cluster_kernel(StateRefs states, int64_t words, const int32_t* err, int pdl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  wait_prior_grid_then_release_next(pdl);
  __shared__ typename cub::BlockReduce<unsigned long long, kSealClusterThreads>::TempStorage tmp;
  __shared__ unsigned long long part_sum;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int part = (int)cluster.block_rank();
  const int row = (int)(blockIdx.x / kSealParts);
  if (err && err[(int64_t)row * kStateErrorWords] != 0) return;  // cluster-uniform: no block waits on a barrier
  int32_t* w = states.row(row);
  const int64_t per = (words + kSealParts - 1) / kSealParts;
  const int64_t lo = min(words, (int64_t)part * per), hi = min(words, lo + per);
  const unsigned long long sum = block_checksum_terms<kSealClusterThreads, true>(w, lo, hi, tmp);
  if (threadIdx.x == 0) part_sum = sum;
  cluster.sync();
  if (part == 0 && threadIdx.x == 0) {
    unsigned long long h = checksum_seed(words);
    for (int p = 0; p < kSealParts; ++p) h += *cluster.map_shared_rank(&part_sum, p);
    w[kHdrChecksumLo] = (int32_t)(uint32_t)(h & 0xFFFFFFFFull);
    w[kHdrChecksumHi] = (int32_t)(uint32_t)(h >> 32);
  }
  cluster.sync();  // rank 0 has read every block's part_sum
#else
  __trap();  // the launcher selects this kernel on sm_90 and newer only
#endif
}

// ---------------------------------------------------------------------------------------------------
// N-best of each row: rank beams by (score desc, beam index asc), copy their tokens out.
constexpr int kFinalizeThreads = 128;

// pad: the kernel first writes -1 over the row's whole (nbest, max_len) token block (then the hypotheses over it), so
// the caller needs no fill of its own (the default; BEAMDEC_CTC_FILL=torch for a fill by the op); 0: positions past
// each length untouched.
__global__ void __launch_bounds__(kFinalizeThreads)
ctc_finalize_kernel(StateRefs states, int beam, int max_len, int page_size, int num_pages, int nbest,
                    int32_t* out_tokens, int32_t* out_len, float* out_scores, int32_t* out_status, int pad) {
  __shared__ float s_score[kMaxBeam];
  __shared__ int s_rank_src[kMaxBeam];
  const int row = blockIdx.x, tid = threadIdx.x;
  if (pad) {  // block-uniform; ordered before the copies below by their __syncthreads
    int32_t* block = out_tokens + (int64_t)row * nbest * max_len;
    for (int64_t i = tid; i < (int64_t)nbest * max_len; i += kFinalizeThreads) block[i] = -1;
  }
  const StateLayout L{beam, max_len, page_size, num_pages};
  const int32_t* w = states.row(row);
  const int step = w[kHdrStep];
  const int nb = step == 0 ? 1 : w[kHdrActive];
  if (tid < nb) s_score[tid] = step == 0 ? 0.0f : log_add(__int_as_float(w[L.pb() + tid]), __int_as_float(w[L.pnb() + tid]));
  __syncthreads();
  if (tid < nb) {
    const float sj = s_score[tid];
    // a total order, so the ranks are distinct and every slot below min(nb, nbest) is written: score descending,
    // NaN last (a NaN input's row; the Python layer raises on it, but its outputs must still be defined), ties
    // and NaNs by beam index
    const bool nan_j = sj != sj;
    int rank = 0;
    for (int i = 0; i < nb; ++i) {
      const float si = s_score[i];
      const bool nan_i = si != si;
      rank += (nan_i == nan_j) ? (si > sj || ((si == sj || nan_i) && i < tid)) : nan_j;
    }
    if (rank < nbest) {
      out_len[(int64_t)row * nbest + rank] = step == 0 ? 0 : w[L.len() + tid];
      out_scores[(int64_t)row * nbest + rank] = sj;
      s_rank_src[rank] = tid;
    }
  }
  if (tid >= nb && tid < nbest) {
    out_len[(int64_t)row * nbest + tid] = 0;
    out_scores[(int64_t)row * nbest + tid] = -INFINITY;
  }
  if (tid == 0) out_status[row] = w[kHdrStatus];
  __syncthreads();
  if (step == 0) return;
  const int ranks = nb < nbest ? nb : nbest;
  if (L.paged()) {  // one thread per hypothesis walks its page chain back from the last page
    const int P = page_size;
    const token_t* pages = reinterpret_cast<const token_t*>(w + L.pages());
    for (int r = tid; r < ranks; r += kFinalizeThreads) {
      const int j = s_rank_src[r];
      const int n = w[L.len() + j];
      int x = w[L.slot() + j];
      int32_t* dst = out_tokens + ((int64_t)row * nbest + r) * max_len;
      for (int start = (n - 1) / P * P; n > 0 && start >= 0; start -= P) {
        const int end = min(n, start + P);
        for (int i = start; i < end; ++i) dst[i] = x >= 0 ? (int32_t)pages[(int64_t)x * P + (i - start)] : -1;
        x = x >= 0 ? w[L.parent() + x] : x;
      }
    }
    return;
  }
  for (int r = 0; r < ranks; ++r) {
    const int j = s_rank_src[r];
    const int n = w[L.len() + j];
    const token_t* src = reinterpret_cast<const token_t*>(w + L.tokens()) + (int64_t)w[L.slot() + j] * max_len;
    int32_t* dst = out_tokens + ((int64_t)row * nbest + r) * max_len;
    for (int p = tid; p < n; p += kFinalizeThreads) dst[p] = src[p];
  }
}


// ---------------------------------------------------------------------------------------------------
// Input checks of the offline call, on the device (decoders/ctc.py log_prob_value_stats, the same counts): grid
// (rows, ceil(t / 8)) with t = min(T, sample_frames), one warp per sampled frame. Block (b, 0) also converts row b's
// length to int32 (clamped to [0, T]; the decode reads those) and flags one outside [0, T] (checks[0] += 1). A
// sampled frame f < min(length_b, t) counts in checks[1]; checks[2] when it looks like a probability row (min >= 0
// and |sum - 1| < 1e-2; a NaN fails both), checks[3] / checks[4] when its argmax (first maximum, a NaN counting as
// the maximum, as torch.argmax) is column V-1 / column 0. `checks` (5 words) must be zero before the launch.
constexpr int kInputCheckThreads = 256;
constexpr int kInputCheckFramesPerBlock = kInputCheckThreads / 32;

template <typename T, typename L>
__global__ void __launch_bounds__(kInputCheckThreads)
ctc_input_check_kernel(const T* __restrict__ lp, int64_t b_stride, int64_t t_stride, int n_frames, int V,
                       const L* __restrict__ lengths, int32_t* __restrict__ lengths_out, int sample_frames,
                       int32_t* __restrict__ checks) {
  constexpr unsigned kFull = 0xFFFFFFFFu;
  __shared__ int counts[4];
  const int b = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long given = (long long)lengths[b];
  const int len = given < 0 ? 0 : (given > n_frames ? n_frames : (int)given);
  if (threadIdx.x < 4) counts[threadIdx.x] = 0;
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    lengths_out[b] = len;
    if (given < 0 || given > n_frames) atomicAdd(&checks[0], 1);
  }
  __syncthreads();
  const int t = n_frames < sample_frames ? n_frames : sample_frames;
  const int f = blockIdx.y * kInputCheckFramesPerBlock + warp;
  if (f < t && f < len) {
    const T* row = lp + (int64_t)b * b_stride + (int64_t)f * t_stride;
    float mn = INFINITY, sum = 0.0f, best = -INFINITY;
    int arg = -1;  // -1: none yet (the first element is taken whatever its value)
    for (int v = lane; v < V; v += 32) {
      const float x = load_lp(row + v);
      mn = fminf(mn, x);  // ignores NaN; a NaN row fails the sum test instead
      sum += x;
      const bool nan_x = x != x, nan_b = best != best;
      if (arg < 0 || x > best || (nan_x && !nan_b)) {
        best = x;
        arg = v;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      mn = fminf(mn, __shfl_xor_sync(kFull, mn, off));
      sum += __shfl_xor_sync(kFull, sum, off);
      const float ob = __shfl_xor_sync(kFull, best, off);
      const int oa = __shfl_xor_sync(kFull, arg, off);
      // the first maximum: a NaN beats every number, equal values (or two NaNs) keep the lower column
      const bool nan_s = best != best, nan_o = ob != ob;
      const bool take = oa >= 0 && (arg < 0 || (nan_o && !nan_s) || (!nan_s && !nan_o && ob > best) ||
                                    ((nan_s == nan_o) && (nan_s || ob == best) && oa < arg));
      if (take) {
        best = ob;
        arg = oa;
      }
    }
    if (lane == 0) {
      atomicAdd(&counts[0], 1);
      if (mn >= 0.0f && fabsf(sum - 1.0f) < 1e-2f) atomicAdd(&counts[1], 1);
      if (arg == V - 1) atomicAdd(&counts[2], 1);
      if (arg == 0) atomicAdd(&counts[3], 1);
    }
  }
  __syncthreads();
  if (threadIdx.x < 4 && counts[threadIdx.x] != 0) atomicAdd(&checks[1 + threadIdx.x], counts[threadIdx.x]);
}

}  // namespace ctc
}  // namespace beamdec
