// The fused CTC prefix beam search with shallow fusion (token n-gram LM + phrase boosting), torch-free.
//
// One thread block decodes one row (utterance) from its first frame to its N-best: the frame loop, blank
// skipping, every per-frame step (candidate scoring with the LM / automaton lookups, prefix merge, top-k of the
// beam x vocab candidates, beam update, back-pointers) and the final scoring + back-tracking run in one launch,
// so a decode is one kernel whatever the batch (batch 1: no per-frame launches; batch 200: 200 blocks).
//
// Semantics: exactly those of the batched torch path `_BatchedSearch._step` in decoders/ctc_lm.py (the spec is
// `reference_prefix_beam_search`): the same float32 operations in the same order (no FMA contraction: __fadd_rn /
// __fmul_rn), the same 64-bit prefix hash and merge rule. Ties: candidates are ranked by (score desc, candidate
// index asc) with stays (index = beam) before extensions (index = beam + K + beam * V + token), which is the
// reference's tie order; torch.topk leaves it unspecified.
//
// The step is written once over a "block" policy: `for_each(n, f)` runs f(idx) for idx in [0, n) spread over
// the threads, `sync()` is a barrier, `single(f)` runs f once. On the GPU these are the strided thread loop and
// __syncthreads(); on the CPU (ctc_lm_cpu.cpp) a plain loop, forwards or backwards, and nothing. So the CPU op
// runs this very code: a phase that read what another item of the same phase writes would give different
// results in the two orders (tests run both). Shared atomics: only for counters and histograms.
//
// LM and automaton tables (`ChainCsr`): arcs of state s are [row_ptr[s], row_ptr[s+1]) sorted by label;
// looking up (s, x): the arc if present, else fallback_w[s] + lookup(fallback[s], x); a state that is its own
// fallback is a root (LM: state 0; automaton: each row's root) where a miss ends.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CTCLM_HD __host__ __device__ __forceinline__
#else
#define CTCLM_HD inline
#endif

namespace beamdec {
namespace ctclm {

constexpr int kMaxBeam = 128;
constexpr int kMaskWords = kMaxBeam / 32;
constexpr int kRadixBins = 256;
constexpr int kMaxVocab = 1 << 22;  // tokens travel in the 24 upper bits of a packed back-pointer
constexpr int kDefaultThreads = 256;

struct ChainCsr {
  const int32_t* row_ptr = nullptr;    // (S + 1,)
  const int32_t* label = nullptr;      // (A,) sorted within each state
  const float* weight = nullptr;       // (A,) natural log (LM); unused by the automaton (0)
  const int32_t* dest = nullptr;       // (A,)
  const int32_t* fallback = nullptr;   // (S,) back-off / failure state; a root falls back to itself
  const float* fallback_w = nullptr;   // (S,) back-off weight (LM); 0 for the automaton
};

struct Params {
  const float* log_probs = nullptr;  // (B, T, V) contiguous float32
  const int64_t* lengths = nullptr;  // (B,)
  int B = 0, T = 0, V = 0, blank = 0, beam = 1, nbest = 1;
  int skip_mode = 0;     // 0: no blank skipping, 1: skip frames with log P(blank) > log_thr, 2: skip every frame
  float log_thr = 0.f;
  float bonus = 0.f;     // insertion bonus per token
  // token n-gram LM (use_lm: present and lm_weight != 0)
  int use_lm = 0, lm_eos = 1;
  float lm_weight = 0.f;
  ChainCsr lm;
  const int32_t* col_label = nullptr;  // (V,) LM label of each column, -1: scored 0, state kept (the blank)
  int bos_state = 0, eos_label = 0;
  // phrase boosting (Aho-Corasick over columns)
  int use_boost = 0;
  ChainCsr boost;
  const float* credit = nullptr;  // (S_b,) partial-match credit
  const float* out = nullptr;     // (S_b,) completed-phrase boosts (dictionary links included)
  const int32_t* roots = nullptr; // (B,) each row's automaton root
  // workspace and outputs
  int32_t* backptr = nullptr;     // (B, max(T,1), beam): src | (token + 1) << 8
  float* cand_global = nullptr;   // (B, candidates) when the candidates do not fit in shared memory, else null
  int32_t* out_tokens = nullptr;  // (B, nbest, max(T,1))
  int32_t* out_len = nullptr;     // (B, nbest)
  float* out_scores = nullptr;    // (B, nbest)
};

CTCLM_HD int64_t candidate_count(int beam, int V) { return (int64_t)beam + (int64_t)beam * V; }

// ------------------------------------------------------------------------------------------- float helpers
// Separate rounding of every product and sum (the torch path runs each op as its own kernel: no FMA there).
CTCLM_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CTCLM_HD float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
CTCLM_HD float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CTCLM_HD float neg_inf() { return -INFINITY; }
CTCLM_HD bool is_inf(float x) {
#if defined(__CUDA_ARCH__)
  return isinf(x);
#else
  return std::isinf(x);
#endif
}
CTCLM_HD float f_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}
CTCLM_HD float f_log(float x) {
#if defined(__CUDA_ARCH__)
  return logf(x);
#else
  return std::log(x);
#endif
}
CTCLM_HD float f_log1p(float x) {
#if defined(__CUDA_ARCH__)
  return log1pf(x);
#else
  return std::log1p(x);
#endif
}
// torch.logaddexp (aten LogAddExpKernel): equal infinities pass through, else max + log1p(exp(-|a - b|))
CTCLM_HD float lae(float a, float b) {
  if (is_inf(a) && a == b) return a;
  const float m = a > b ? a : b;
  const float d = fsub(a, b);
  return fadd(m, f_log1p(f_exp(-(d < 0 ? -d : d))));
}
CTCLM_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
// order-preserving map float -> uint32 (-0 and +0 map alike: they are equal scores)
CTCLM_HD uint32_t float_order(float f) {
  if (f == 0.f) f = 0.f;
  const uint32_t u = float_bits(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// rank key of candidate idx: larger is better; ties by lower index
CTCLM_HD uint64_t cand_key(float score, int64_t idx) {
  return ((uint64_t)float_order(score) << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)idx);
}
CTCLM_HD int64_t key_index(uint64_t key) { return (int64_t)(0xFFFFFFFFu - (uint32_t)(key & 0xFFFFFFFFu)); }

template <typename T>
CTCLM_HD T ld(const T* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

// decoders/ctc_lm.py `_mix`: 64-bit prefix hash of (prefix hash h, token c), torch int64 arithmetic (wrapping
// products, arithmetic right shifts)
CTCLM_HD int64_t mix_hash(int64_t h, int64_t c) {
  const uint64_t M1 = 0x7FB5D329728EA185ull, M2 = 0x1B873593ull;
  uint64_t x = (uint64_t)h * 1000003ull + (uint64_t)(c + 1) * M2;
  int64_t xs = (int64_t)x;
  xs ^= xs >> 29;
  x = (uint64_t)xs * M1;
  xs = (int64_t)x;
  return xs ^ (xs >> 32);
}

// ------------------------------------------------------------------------------------------- table lookups
// (s, label) along the fallback chain: true and (weight, dest) on a hit; false and dest = the root on a miss.
// The weight accumulates as `_ChainTable.lookup` does: acc = ((0 + bow_1) + bow_2) ..., weight = acc + w.
CTCLM_HD bool chain_lookup(const ChainCsr& t, int s, int label, float& weight, int& dest) {
  float acc = 0.f;
  for (;;) {
    const int begin = ld(t.row_ptr + s), end = ld(t.row_ptr + s + 1);
    int lo = begin, hi = end;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (ld(t.label + mid) < label) lo = mid + 1; else hi = mid;
    }
    if (lo < end && ld(t.label + lo) == label) {
      if (t.weight) weight = fadd(acc, ld(t.weight + lo));
      dest = ld(t.dest + lo);
      return true;
    }
    const int f = ld(t.fallback + s);
    if (f == s) {
      dest = s;
      return false;
    }
    if (t.fallback_w) acc = fadd(acc, ld(t.fallback_w + s));
    s = f;
  }
}

// delta(beam, c) = bonus + lm_weight * lm(c | lm_state) + boost(c | boost_state) (NgramLM.advance,
// PhraseBoost.advance, `delta = delta + w * sw` per part), and the next states. c is never the blank here.
CTCLM_HD float fusion_delta(const Params& p, int lm_state, int boost_state, int c, int& lm_next, int& boost_next) {
  float d = p.bonus;
  lm_next = lm_state;
  boost_next = boost_state;
  if (p.use_lm) {
    const int lab = ld(p.col_label + c);
    float w = 0.f;
    if (lab >= 0) {
      int dest = 0;
      if (!chain_lookup(p.lm, lm_state, lab, w, dest)) {
        w = neg_inf();  // NgramLM: miss_weight -inf, miss_dest 0
        dest = 0;
      }
      lm_next = dest;
    }
    d = fadd(d, fmul(p.lm_weight, w));
  }
  if (p.use_boost) {
    float unused = 0.f;
    int dest = boost_state;
    chain_lookup(p.boost, boost_state, c, unused, dest);  // a miss ends at the row's root
    const float w = fadd(fsub(ld(p.credit + dest), ld(p.credit + boost_state)), ld(p.out + dest));
    d = fadd(d, w);
    boost_next = dest;
  }
  return d;
}

// ------------------------------------------------------------------------------------------- shared memory
struct Beams {
  float* pb;
  float* pnb;
  float* fusion;
  int32_t* last;
  int32_t* len;
  int32_t* lm;
  int32_t* bst;
  int64_t* h;
  int64_t* ph;
};

struct Shared {
  Beams buf[2];
  float* tot;
  float* spb;
  float* spnb;
  uint32_t* mmask;   // (K, kMaskWords): bit j of row i: extension (i, last_j) is beam j (merged)
  uint64_t* sel_key; // (K,)
  int32_t* order;    // (K,) candidate index of the r-th best
  float* final_score;
  int32_t* chosen;   // (K,) beam of the n-th best final score
  int32_t* hist;     // (2, kRadixBins)
  uint64_t* radix;   // prefix, mask
  int32_t* ctl;      // radix select: keys still needed, done; selected count
  float* cand;       // (K + K * V,) when in shared memory
};

struct Carver {
  char* base;
  size_t off = 0;
  template <typename T>
  CTCLM_HD T* take(int64_t n) {
    off = (off + 15) & ~(size_t)15;
    T* p = base ? reinterpret_cast<T*>(base + off) : nullptr;
    off += sizeof(T) * (size_t)n;
    return p;
  }
};

// Lays the shared memory out from `base` (null: only computes the size); returns the bytes used.
CTCLM_HD size_t carve_shared(char* base, int K, int64_t cand_in_smem, Shared& s) {
  Carver c{base};
  for (int b = 0; b < 2; ++b) {
    s.buf[b].pb = c.take<float>(K);
    s.buf[b].pnb = c.take<float>(K);
    s.buf[b].fusion = c.take<float>(K);
    s.buf[b].last = c.take<int32_t>(K);
    s.buf[b].len = c.take<int32_t>(K);
    s.buf[b].lm = c.take<int32_t>(K);
    s.buf[b].bst = c.take<int32_t>(K);
    s.buf[b].h = c.take<int64_t>(K);
    s.buf[b].ph = c.take<int64_t>(K);
  }
  s.tot = c.take<float>(K);
  s.spb = c.take<float>(K);
  s.spnb = c.take<float>(K);
  s.mmask = c.take<uint32_t>((int64_t)K * kMaskWords);
  s.sel_key = c.take<uint64_t>(K);
  s.order = c.take<int32_t>(K);
  s.final_score = c.take<float>(K);
  s.chosen = c.take<int32_t>(K);
  s.hist = c.take<int32_t>(2 * kRadixBins);
  s.radix = c.take<uint64_t>(2);
  s.ctl = c.take<int32_t>(8);
  s.cand = cand_in_smem ? c.take<float>(cand_in_smem) : nullptr;
  return c.off;
}

enum Ctl { kRemaining = 0, kDone = 1, kNsel = 2 };

CTCLM_HD int lowest_bit(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __ffs((int)bits) - 1;
#else
  return __builtin_ctz(bits);
#endif
}

// ------------------------------------------------------------------------------------------- the row decode
// Blk: for_each(n, f), sync(), single(f), atomic_add(int*, int) -> old.
template <class Blk>
CTCLM_HD void decode_row(const Params& p, int row, Blk& blk, Shared& S) {
  const int K = p.beam, V = p.V, blank = p.blank;
  const int64_t N = candidate_count(K, V);
  const int64_t T = p.T, Tcap = T > 0 ? T : 1;
  const int64_t want = ld(p.lengths + row);  // the Python layer checks 0 <= length <= T; clamped regardless
  const int length = (int)(want < 0 ? 0 : want > T ? T : want);
  float* cand = S.cand ? S.cand : p.cand_global + (int64_t)row * N;
  int32_t* bp = p.backptr + (int64_t)row * Tcap * K;
  const float* lp_row = p.log_probs + (int64_t)row * T * V;

  // initial beams: the empty prefix in beam 0 (P(blank-ending) = 1), the others dead
  blk.for_each(K, [&](int k) {
    Beams& b = S.buf[0];
    b.pb[k] = k == 0 ? 0.f : neg_inf();
    b.pnb[k] = neg_inf();
    b.fusion[k] = 0.f;
    b.last[k] = -1;
    b.len[k] = 0;
    b.lm[k] = p.bos_state;
    b.bst[k] = p.use_boost ? ld(p.roots + row) : 0;
    b.h[k] = 0;
    b.ph[k] = -1;
  });
  blk.sync();

  // cur (the beams' buffer), step (kept frames so far) and pending (a skipped run precedes) are per-thread
  // copies of block-uniform values: every thread takes the same skip decisions from the same log-probs
  int cur = 0, step = 0;
  bool pending = false;
  for (int t = 0; t < length; ++t) {
    const float* x = lp_row + (int64_t)t * V;
    const float xb = ld(x + blank);
    const bool skip = p.skip_mode == 2 || (p.skip_mode == 1 && xb > p.log_thr);
    if (skip) {  // a skipped run acts as one certain blank before the next kept frame
      pending = true;
      continue;
    }
    // by value, picked by a select (a runtime index into S.buf puts the whole Shared in local memory)
    const Beams B0 = cur ? S.buf[1] : S.buf[0], B1 = cur ? S.buf[0] : S.buf[1];
    const bool collapse = pending;
    pending = false;

    // P0: collapse, totals, stay scores before merging
    blk.for_each(K, [&](int k) {
      if (collapse) {
        B0.pb[k] = lae(B0.pb[k], B0.pnb[k]);
        B0.pnb[k] = neg_inf();
      }
      const float tot = lae(B0.pb[k], B0.pnb[k]);
      S.tot[k] = tot;
      S.spb[k] = fadd(tot, xb);
      const int lk = B0.last[k];
      S.spnb[k] = lk >= 0 ? fadd(B0.pnb[k], ld(x + lk)) : neg_inf();
    });
    blk.single([&]() {
      S.ctl[kNsel] = 0;
      S.ctl[kRemaining] = K;
      S.ctl[kDone] = 0;
      S.radix[0] = 0;
      S.radix[1] = 0;
    });
    blk.sync();

    // P1: the merge (extension (i, c) == beam j: ph[j] == h[i], len[j] == len[i] + 1, last[j] == c, both
    // alive). Item k is both i (its mask of merged j) and j (its CTC mass gained from the matching i's).
    blk.for_each(K, [&](int k) {
      const bool alive_k = S.tot[k] > neg_inf();
      uint32_t mask[kMaskWords] = {0u, 0u, 0u, 0u};
      float m = neg_inf();
      bool any = false;
      const int lk = B0.last[k];
      for (int o = 0; o < K; ++o) {
        const bool alive_o = S.tot[o] > neg_inf();
        if (!(alive_k && alive_o)) continue;
        // k as i, o as j
        if (B0.ph[o] == B0.h[k] && B0.len[o] == B0.len[k] + 1 && B0.last[o] >= 0) mask[o >> 5] |= 1u << (o & 31);
        // k as j, o as i
        if (lk >= 0 && B0.ph[k] == B0.h[o] && B0.len[k] == B0.len[o] + 1) {
          const float e = fadd(lk == B0.last[o] ? B0.pb[o] : S.tot[o], ld(x + lk));
          if (!any || e > m) m = e;
          any = true;
        }
      }
      for (int w = 0; w < kMaskWords; ++w) S.mmask[k * kMaskWords + w] = mask[w];
      float spnb = S.spnb[k];
      if (any && m > neg_inf()) {  // torch.logsumexp over the matching i's, then logaddexp
        float sum = 0.f;
        for (int o = 0; o < K; ++o) {
          if (!(alive_k && S.tot[o] > neg_inf())) continue;
          if (B0.ph[k] == B0.h[o] && B0.len[k] == B0.len[o] + 1) {
            const float e = fadd(lk == B0.last[o] ? B0.pb[o] : S.tot[o], ld(x + lk));
            sum = fadd(sum, f_exp(fsub(e, m)));
          }
        }
        spnb = lae(spnb, fadd(f_log(sum), m));
      }
      S.spnb[k] = spnb;
      cand[k] = fadd(lae(S.spb[k], spnb), B0.fusion[k]);  // the stay candidate
    });
    blk.sync();

    // P2: extension candidates (i, c): CTC mass + fusion + LM / automaton delta; merged ones and the blank leave
    blk.for_each((int)(N - K), [&](int idx) {
      const int i = idx / V, c = idx - i * V;
      float score = neg_inf();
      const float tot = S.tot[i];
      if (c != blank && tot > neg_inf()) {
        const float e = fadd(c == B0.last[i] ? B0.pb[i] : tot, ld(x + c));
        bool merged = false;
        for (int w = 0; w < kMaskWords && !merged; ++w) {
          uint32_t bits = S.mmask[i * kMaskWords + w];
          while (bits) {
            const int j = w * 32 + lowest_bit(bits);
            bits &= bits - 1;
            if (B0.last[j] == c) {
              merged = true;
              break;
            }
          }
        }
        if (e > neg_inf() && !merged) {
          int ln, bn;
          const float delta = fusion_delta(p, B0.lm[i], B0.bst[i], c, ln, bn);
          score = fadd(fadd(e, B0.fusion[i]), delta);
        }
      }
      cand[K + idx] = score;
    });
    blk.for_each(kRadixBins, [&](int d) { S.hist[d] = 0; });
    blk.sync();

    // P3: radix select of the K-th largest key (8-bit digits from the top; stops once the digit's bin holds
    // exactly the keys still needed)
    for (int pass = 0; pass < 8; ++pass) {
      if (S.ctl[kDone]) break;  // uniform: written before the last barrier
      const int shift = 56 - 8 * pass;
      const uint64_t prefix = S.radix[0], mask = S.radix[1];
      int32_t* hist = S.hist + (pass & 1) * kRadixBins;
      int32_t* next_hist = S.hist + ((pass + 1) & 1) * kRadixBins;
      blk.for_each((int)N, [&](int idx) {
        const uint64_t key = cand_key(cand[idx], idx);
        if ((key & mask) == prefix) blk.atomic_add(hist + ((key >> shift) & 0xFF), 1);
      });
      blk.for_each(kRadixBins, [&](int d) { next_hist[d] = 0; });
      blk.sync();
      blk.single([&]() {
        const int need = S.ctl[kRemaining];
        int cum = 0, bin = kRadixBins - 1;
        for (; bin > 0; --bin) {
          if (cum + hist[bin] >= need) break;
          cum += hist[bin];
        }
        S.radix[0] = prefix | ((uint64_t)bin << shift);
        S.radix[1] = mask | ((uint64_t)0xFF << shift);
        S.ctl[kRemaining] = need - cum;
        if (hist[bin] == need - cum) S.ctl[kDone] = 1;
      });
      blk.sync();
    }
    {
      const uint64_t prefix = S.radix[0], mask = S.radix[1];
      blk.for_each((int)N, [&](int idx) {
        const uint64_t key = cand_key(cand[idx], idx);
        if ((key & mask) >= prefix) {
          const int slot = blk.atomic_add(S.ctl + kNsel, 1);
          if (slot < K) S.sel_key[slot] = key;
        }
      });
    }
    blk.sync();
    // P4: the K selected in rank order
    blk.for_each(K, [&](int r) {
      const uint64_t mine = S.sel_key[r];
      int rank = 0;
      for (int o = 0; o < K; ++o) rank += S.sel_key[o] > mine;
      S.order[rank] = (int32_t)key_index(mine);
    });
    blk.sync();

    // P5: the new beams (into the other buffer) and their back-pointers
    blk.for_each(K, [&](int r) {
      const int idx = S.order[r];
      const float score = cand[idx];
      const bool dead = !(score > neg_inf());
      int src, tok = -1;
      if (idx < K) {  // stay
        src = idx;
        B1.pb[r] = S.spb[src];
        B1.pnb[r] = S.spnb[src];
        B1.fusion[r] = B0.fusion[src];
        B1.last[r] = B0.last[src];
        B1.len[r] = B0.len[src];
        B1.h[r] = B0.h[src];
        B1.ph[r] = B0.ph[src];
        B1.lm[r] = B0.lm[src];
        B1.bst[r] = B0.bst[src];
      } else {
        const int e = idx - K;
        src = e / V;
        const int c = e - src * V;
        tok = c;
        int ln = B0.lm[src], bn = B0.bst[src];
        float delta = 0.f;
        if (c != blank) delta = fusion_delta(p, B0.lm[src], B0.bst[src], c, ln, bn);
        B1.pb[r] = neg_inf();
        B1.pnb[r] = c == blank ? neg_inf() : fadd(c == B0.last[src] ? B0.pb[src] : S.tot[src], ld(x + c));
        B1.fusion[r] = fadd(B0.fusion[src], delta);
        B1.last[r] = c;
        B1.len[r] = B0.len[src] + 1;
        B1.h[r] = mix_hash(B0.h[src], c);
        B1.ph[r] = B0.h[src];
        B1.lm[r] = ln;
        B1.bst[r] = bn;
      }
      if (dead) {
        B1.pb[r] = neg_inf();
        B1.pnb[r] = neg_inf();
        tok = -1;
      }
      bp[(int64_t)step * K + r] = src | ((tok + 1) << 8);
    });
    blk.sync();
    cur ^= 1;
    ++step;
  }

  // final scores: CTC + fusion + lm_weight * log p(</s>) (lm_eos) - the automaton's partial credit
  const Beams Bf = cur ? S.buf[1] : S.buf[0];
  const int steps = step;
  blk.for_each(K, [&](int k) {
    const float tot = lae(Bf.pb[k], Bf.pnb[k]);
    float f = fadd(tot, Bf.fusion[k]);
    if (p.use_lm && p.lm_eos) {
      float w = 0.f;
      int dest = 0;
      if (!chain_lookup(p.lm, Bf.lm[k], p.eos_label, w, dest)) w = neg_inf();
      f = fadd(f, fmul(p.lm_weight, w));
    }
    if (p.use_boost) f = fadd(f, -ld(p.credit + Bf.bst[k]));
    S.final_score[k] = tot > neg_inf() ? f : neg_inf();
  });
  blk.sync();
  blk.for_each(K, [&](int k) {
    const float mine = S.final_score[k];
    int rank = 0;
    for (int o = 0; o < K; ++o) {
      const float other = S.final_score[o];
      rank += other > mine || (other == mine && o < k);
    }
    if (rank < p.nbest) S.chosen[rank] = k;
  });
  blk.sync();
  blk.for_each(p.nbest, [&](int n) {
    const int k = S.chosen[n];
    const float score = S.final_score[k];
    const int64_t o = (int64_t)row * p.nbest + n;
    p.out_scores[o] = score;
    if (!(score > neg_inf())) {
      p.out_len[o] = 0;
      return;
    }
    int32_t* toks = p.out_tokens + o * Tcap;
    int pos = Bf.len[k];
    p.out_len[o] = pos;
    int slot = k;
    for (int s = steps - 1; s >= 0; --s) {
      const int32_t v = bp[(int64_t)s * K + slot];
      const int tok = (v >> 8) - 1;
      if (tok >= 0 && pos > 0) toks[--pos] = tok;
      slot = v & 0xFF;
    }
  });
}

}  // namespace ctclm
}  // namespace beamdec
