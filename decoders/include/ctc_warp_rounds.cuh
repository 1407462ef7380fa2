// The one-warp CTC kernel's top-`beam` selection in its multi-winner form (ctc_decode_warp_kernel, kMulti), written
// against a warp policy so the same code runs in the kernel (CudaWarp: shuffles and ballots) and on the CPU, where
// tests/cpp/warp_rounds_host.cpp runs it on an emulated warp (32 threads in lockstep) and holds its winners against
// the sequential order. Torch-free; compiles as plain C++ (no CUDA) too.
#pragma once

#include <cstdint>

#include "bit_ops.h"
#include "ctc_common.cuh"

namespace beamdec {
namespace ctc {

constexpr int kSelExt = 1 << 16;  // select-form winner code of an extension (source lane << 8 | list position)

using bitops::popcount32;

CTC_HD int ffs32(unsigned x) {
#if defined(__CUDA_ARCH__)
  return __ffs((int)x);
#else
  return __builtin_ffs((int)x);
#endif
}

#if defined(__CUDACC__)
struct CudaWarp {
  __device__ __forceinline__ unsigned long long shfl(unsigned long long v, int q) const {
    return __shfl_sync(0xFFFFFFFFu, v, q);
  }
  __device__ __forceinline__ unsigned ballot(bool p) const { return __ballot_sync(0xFFFFFFFFu, p); }
};
#endif

// A lane's remaining ordinary extensions: list positions 0..64 of the frame's candidate list as a bit set, consumed
// lowest first (list order = score order). pop_sel(take) returns the next position (cnt when none is left) and
// removes it when `take`; branch-free.
struct OrdStream {
  unsigned rem0, rem1, rem2;
  int cnt;
  CTC_HD int pop_sel(bool take) {
    const int f0 = ffs32(rem0) - 1, f1 = 31 + ffs32(rem1);
    const int i = rem0 ? f0 : rem1 ? f1 : rem2 ? 64 : cnt;
    const unsigned n0 = rem0 & (rem0 - 1u), n1 = rem1 & (rem1 - 1u);
    const bool take0 = take && rem0 != 0u, take1 = take && rem0 == 0u && rem1 != 0u;
    const bool take2 = take && (rem0 | rem1) == 0u;
    rem0 = take0 ? n0 : rem0;
    rem1 = take1 ? n1 : rem1;
    rem2 = take2 ? 0u : rem2;
    return i;
  }
};

// Rounds, multi-winner form. Every candidate as one 64-bit word, key << 32 | ~code (code: the select form's winner
// code, whose order is the slot order: stays, then the lower beam, then the lower list position), so the total order
// is a plain unsigned compare and no two live candidates are equal. Each lane offers its head h and its second s (the
// best of what is left once h is taken: its ordinary stream is sorted, so that is max(the other two heads) or, when
// h is ordinary, max(stay, last, next ordinary)). One round ranks the heads by counting (rank_j = heads above h_j)
// and takes, in rank order, every head that beats the seconds of all heads ranked above it: h_r is then the best of
// what is left after h_0..h_{r-1} (the other lanes' heads rank below it, the lanes above offer their seconds). h_r
// falls and that maximum rises with r, so the winners are a prefix of the ranking: a round takes them all at once,
// capped at beam - nw. The heads taken advance (second -> head, the ordinary stream refilled) and the next round
// ranks again. A frame whose top `beam` spreads over the beams (blank-dominated frames: the stays) takes one or two
// rounds instead of `beam`; one whose winners all come from one beam takes `beam`.
// In: this lane's keys (0: none) of its stay, last-char extension (at list position lastpos) and current ordinary
// extension (position oi), the position of the one after it (oi2), the rest of its stream (ord), the frame's list
// log-probs and A = logaddexp(pb, pnb). Lanes >= nb hold no candidate. Out: win[0..nw) in rank order; returns nw.
template <typename Warp>
CTC_HD int multi_rounds(const Warp& warp, int lane, int nb, int beam, uint32_t k_stay, uint32_t k_last,
                             int lastpos, uint32_t k_ord, int oi, int oi2, OrdStream& ord, const float* lps,
                             float A, int* win) {
  const int cnt = ord.cnt;
  auto key_of = [&](int i) -> uint32_t {
    const float sc = (i < cnt ? lps[i] : 0.0f) + A;
    return i < cnt && sc != -INFINITY ? float_key(sc) : 0u;
  };
  auto comp = [](uint32_t k, unsigned code) -> unsigned long long {
    return k == 0u ? 0ull : ((unsigned long long)k << 32) | (unsigned long long)(0xFFFFFFFFu - code);
  };
  const unsigned ext = kSelExt | ((unsigned)lane << 8);
  unsigned long long cS = comp(k_stay, (unsigned)lane), cL = comp(k_last, ext | (unsigned)(lastpos & 0xFF));
  unsigned long long cO = comp(k_ord, ext | (unsigned)(oi & 0xFF));
  unsigned long long cO2 = comp(key_of(oi2), ext | (unsigned)(oi2 & 0xFF));
  unsigned long long h = 0ull, sec = 0ull;
  int t = 0;  // the head's source: 0 stay, 1 last-char extension, 2 ordinary extension
  auto head_second = [&]() {
    const bool l = cL > cS;
    const unsigned long long a = l ? cL : cS, b = l ? cS : cL;
    const bool o = cO > a;
    h = o ? cO : a;
    t = o ? 2 : (l ? 1 : 0);
    const unsigned long long x = o ? a : b, y = o ? cO2 : cO;
    sec = x > y ? x : y;
  };
  head_second();
  int nw = 0;
  while (nw < beam) {
    int rank = 0;
    unsigned long long M = 0ull;  // the best second among the heads above mine
#pragma unroll 4
    for (int q = 0; q < nb; ++q) {
      const unsigned long long hq = warp.shfl(h, q), sq = warp.shfl(sec, q);
      const bool above = hq > h;
      rank += above ? 1 : 0;
      M = above && sq > M ? sq : M;
    }
    const bool won = h != 0ull && rank < beam - nw && h > M;
    const unsigned wins = warp.ballot(won);
    if (wins == 0u) break;
    if (won) win[nw + rank] = (int)(0xFFFFFFFFu - (uint32_t)h);
    nw += popcount32(wins);
    const bool took_o = won && t == 2;
    cS = won && t == 0 ? 0ull : cS;
    cL = won && t == 1 ? 0ull : cL;
    {  // the ordinary stream: the next one becomes the current, a new next is popped
      const int o2 = oi2 < cnt ? ord.pop_sel(took_o) : cnt;
      const unsigned long long c2 = comp(key_of(o2), ext | (unsigned)(o2 & 0xFF));
      oi2 = took_o ? o2 : oi2;
      cO = took_o ? cO2 : cO;
      cO2 = took_o ? c2 : cO2;
    }
    head_second();
  }
  return nw;
}

}  // namespace ctc
}  // namespace beamdec
