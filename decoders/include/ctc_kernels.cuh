// CTC prefix beam search CUDA kernels (torch-free: raw pointers, sizes, strides).
//
// Per tile of kTile frames, two launches:
//   1. ctc_prepass_kernel   grid (tile_len, rows): for every frame that is decoded (blank skipping /
//      speech mask / row length decided here), the top-C non-blank chars by (lp desc, id asc), sorted,
//      C = min(2*beam + 1, V - 1). Frame-parallel: it holds the whole vocabulary scan.
//   2. ctc_decode_tile_kernel grid (rows): one block per row loops over the tile's frames in-kernel with the
//      beam state in shared memory. Why the pre-pass list is enough: an ordinary extension of beam k by
//      char c scores lp[c] + A_k (A_k = logaddexp(pb_k, pnb_k)), so within a beam ordinary chars rank as
//      lp does. The only exceptions are the last char (scored from pb_k) and chars whose extension merges
//      into another beam (m_k of them). A char at rank i >= beam + 1 + m_k in the frame's list is
//      therefore beaten by >= beam ordinary extensions of the same beam and can never survive; since
//      m_k <= beam - 1, the top 2*beam + 1 chars hold every possible survivor. Merged extensions are
//      scored exactly from lp[c] (folded into the stay of the beam they equal).
// Per frame (decode kernel): collapse after skipped frames -> merge pairs by prefix hash, all pairs in
// parallel -> fold merged extensions -> score beam*(C+1) candidate slots -> top `beam` keys (ties: lowest
// slot): compact + rank-by-count when <= 256 candidates are live, else radix select + ordered gather ->
// state update with slot-based token storage (copy only on forks). The next decoded frame's candidate
// list, lp[blank] and lp[last] are prefetched during the current frame. An opt-in one-warp merge of the
// per-beam candidate streams (beam <= 16, BEAMDEC_CTC_WARP_SELECT=1) measured slower and is off.
// No device->host synchronisation anywhere; the streaming counters live in the state header.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <cstdint>

#include "ctc_common.cuh"

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
  int warp_select;         // 1: beams <= 16 select with one warp merging per-beam streams
  StateRefs states;
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
constexpr int kPrepassThreads = 256;
constexpr int kPrepassCacheMaxV = 12288;  // vocabularies up to this cache their keys in shared memory

template <typename T>
__global__ void __launch_bounds__(kPrepassThreads) ctc_prepass_kernel(FrameArgs<T> a, int t0) {
  constexpr int NT = kPrepassThreads;
  extern __shared__ uint32_t s_keys[];  // (V) when cached
  __shared__ uint32_t s_hist[256];
  __shared__ int s_sel[2];
  __shared__ int s_list[2 * kMaxBeam + 1];
  __shared__ uint32_t s_list_key[2 * kMaxBeam + 1];
  __shared__ typename cub::BlockScan<unsigned long long, NT>::TempStorage s_scan;
  __shared__ int s_bad;

  const int pos = blockIdx.x, row = blockIdx.y, tid = threadIdx.x;
  const int t = t0 + pos;
  int32_t* cnt_out = a.pre_cnt + (int64_t)pos * a.rows + row;
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
      *cnt_out = -1;
      if (lp_blank == INFINITY) atomicOr(a.states.row(row) + kHdrStatus, kStatusBadValue);
    }
    return;
  }
  const bool cached = a.V <= kPrepassCacheMaxV;
  if (tid == 0) s_bad = 0;
  __syncthreads();
  bool bad = false;
  if (cached) {
    for (int c = tid; c < a.V; c += NT) {
      const float f = load_lp(lp + c);
      bad |= (f != f) || f == INFINITY;
      s_keys[c] = c == a.blank ? 0u : float_key(f);
    }
  } else {
    for (int c = tid; c < a.V; c += NT) {
      const float f = load_lp(lp + c);
      bad |= (f != f) || f == INFINITY;
    }
  }
  if (bad) s_bad = 1;
  __syncthreads();
  if (s_bad && tid == 0) atomicOr(a.states.row(row) + kHdrStatus, kStatusBadValue);
  const int blank = a.blank;
  auto key_at = [&](int c) -> uint32_t {
    if (cached) return s_keys[c];
    return c == blank ? 0u : float_key(load_lp(lp + c));
  };
  uint32_t thr;
  int k_eq;
  block_radix_select<NT>(key_at, a.V, a.C, s_hist, s_sel, thr, k_eq);
  const int n = block_ordered_gather<NT>(key_at, a.V, thr, k_eq, true, s_list, s_scan);
  for (int i = tid; i < n; i += NT) s_list_key[i] = key_at(s_list[i]);
  __syncthreads();
  // rank by (key desc, id asc); s_list is in ascending id order already
  const int64_t out_base = ((int64_t)pos * a.rows + row) * a.C;
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
  if (tid == 0) *cnt_out = n;
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
  const bool warp_select = a.warp_select && beam <= 16;
  const StateLayout L{beam, max_len};
  int32_t* w = a.states.row(row);
  int32_t* tokens = w + L.tokens();
  const T* lp_row = a.log_probs + (int64_t)row * a.b_stride;

  if (tid == 0) {
    s.step = w[kHdrStep];
    s.last_sel = w[kHdrLastSel];
    s.status = w[kHdrStatus];
    s.nb = s.step == 0 ? 1 : w[kHdrActive];
    s.frames_seen = w[kHdrFramesSeen];
  }
  for (int p = tid; p < tile_len; p += NT) s.cnt[p] = a.pre_cnt[(int64_t)p * a.rows + row];
  __syncthreads();
  auto next_selected = [&](int p) -> int {
    for (++p; p < tile_len; ++p)
      if (s.cnt[p] >= 0) return p;
    return -1;
  };
  int cur = next_selected(-1);
  if (cur < 0) {  // nothing decoded in this tile: only the frame counter moves
    if (tid == 0) w[kHdrFramesSeen] = s.frames_seen + advance_frames;
    return;
  }
  const T* lp_cur = lp_row + (int64_t)(t0 + cur) * a.t_stride;
  if (s.step == 0) {  // nothing decoded yet: the empty prefix with probability 1
    if (tid < beam) {
      s.slot[tid] = tid;
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
    if (warp_select) {
      // beam <= 16 (C <= 33): one warp merges the per-beam candidate streams. Within beam k ordinary
      // extensions score lps[i] + A_k, i.e. in list order; the last char (scored from pb_k) and the stay
      // are single extra heads. 3*nb <= 48 heads, two per lane; beam rounds of warp max.
      if (tid < 32) {
        const int lane = tid;
        uint32_t key[2];
        int ptr[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int hid = lane + 32 * h;
          const int k = hid / 3, type = hid - (hid / 3) * 3;
          key[h] = 0u;
          ptr[h] = 0;
          if (k < nb) {
            if (type == 0) {  // stay
              const float snb = log_add(s.len[k] > 0 ? s.lp_last[k] + s.pnb[k] : -INFINITY, s.fold[k]);
              const float sc = log_add(lp_blank + s.A[k], snb);
              key[h] = sc == -INFINITY ? 0u : float_key(sc);
              if (first && beam > 1 && k == 0 && key[h] != 0u) key[h] = 0xFFFFFFFFu;
            } else if (s.len[k] < max_len) {
              const unsigned long long ex = s.exmask[k];
              if (type == 1) {  // first ordinary extension
                int i = 0;
                while (i < cnt && (ids[i] == s.last[k] || ((ex >> i) & 1ull))) ++i;
                ptr[h] = i;
                if (i < cnt) {
                  const float sc = lps[i] + s.A[k];
                  key[h] = sc == -INFINITY ? 0u : float_key(sc);
                }
              } else {  // the last char again (needs the blank-ending path)
                const int p = s.lastpos[k];
                if (p >= 0 && !((ex >> p) & 1ull)) {
                  const float sc = lps[p] + s.pb[k];
                  key[h] = sc == -INFINITY ? 0u : float_key(sc);
                  ptr[h] = p;
                }
              }
            }
          }
        }
        int r = 0;
        for (; r < beam; ++r) {
          const int hb = key[1] > key[0] ? 1 : 0;
          const uint32_t mine = key[hb];
          const uint32_t best = __reduce_max_sync(0xFFFFFFFFu, mine);
          if (best == 0u) break;
          const unsigned who = __ballot_sync(0xFFFFFFFFu, mine == best);
          if (lane == __ffs(who) - 1) {
            const int hid = lane + 32 * hb;
            const int k = hid / 3, type = hid - (hid / 3) * 3;
            s.win[r] = type == 0 ? k : beam + k * C + ptr[hb];
            key[hb] = 0u;
            if (type == 1) {  // advance to the next ordinary extension of beam k
              const unsigned long long ex = s.exmask[k];
              int i = ptr[hb] + 1;
              while (i < cnt && (ids[i] == s.last[k] || ((ex >> i) & 1ull))) ++i;
              ptr[hb] = i;
              if (i < cnt) {
                const float sc = lps[i] + s.A[k];
                key[hb] = sc == -INFINITY ? 0u : float_key(sc);
              }
            }
          }
        }
        if (lane == 0) s.sel[0] = r;
      }
      __syncthreads();
      nw = s.sel[0];
    } else {
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
        const int32_t* src = tokens + (int64_t)s.slot[k] * max_len;
        int32_t* dst = tokens + (int64_t)s.n_slot[x] * max_len;
        for (int p = lane; p < s.len[k]; p += 32) dst[p] = src[p];
      }
      if (tid < nw && s.n_tok[tid] >= 0)
        tokens[(int64_t)s.n_slot[tid] * max_len + s.len[s.n_src[tid]]] = s.n_tok[tid];
    }
    __syncthreads();
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
  }
}

// ---------------------------------------------------------------------------------------------------
// N-best of each row: rank beams by (score desc, beam index asc), copy their tokens out.
constexpr int kFinalizeThreads = 128;

__global__ void __launch_bounds__(kFinalizeThreads)
ctc_finalize_kernel(StateRefs states, int beam, int max_len, int nbest, int32_t* out_tokens, int32_t* out_len,
                    float* out_scores, int32_t* out_status) {
  __shared__ float s_score[kMaxBeam];
  __shared__ int s_rank_src[kMaxBeam];
  const int row = blockIdx.x, tid = threadIdx.x;
  const StateLayout L{beam, max_len};
  const int32_t* w = states.row(row);
  const int step = w[kHdrStep];
  const int nb = step == 0 ? 1 : w[kHdrActive];
  if (tid < nb) s_score[tid] = step == 0 ? 0.0f : log_add(__int_as_float(w[L.pb() + tid]), __int_as_float(w[L.pnb() + tid]));
  __syncthreads();
  if (tid < nb) {
    const float sj = s_score[tid];
    int rank = 0;
    for (int i = 0; i < nb; ++i) rank += s_score[i] > sj || (s_score[i] == sj && i < tid);
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
  for (int r = 0; r < ranks; ++r) {
    const int j = s_rank_src[r];
    const int n = w[L.len() + j];
    const int32_t* src = w + L.tokens() + (int64_t)w[L.slot() + j] * max_len;
    int32_t* dst = out_tokens + ((int64_t)row * nbest + r) * max_len;
    for (int p = tid; p < n; p += kFinalizeThreads) dst[p] = src[p];
  }
}

}  // namespace ctc
}  // namespace beamdec
