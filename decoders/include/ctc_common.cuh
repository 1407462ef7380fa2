// CTC prefix beam search: constants, the per-row state layout and small math helpers shared by the CPU
// reference, the launchers and the kernels. Torch-free; compiles as plain C++ (no CUDA) too.
//
// State of one row (one utterance / one stream): a flat int32 block of `state_words(beam, max_len)` words
//   header[kHeaderWords]          step, last selected frame, frames seen, active beams, status, ...
//   pb[beam], pnb[beam]           log P(prefix, ends in blank), log P(prefix, ends in non-blank)  (float bits)
//   last[beam], len[beam]         last token (-1 when empty), prefix length
//   slot[beam]                    which token slot holds this beam's prefix (a permutation of [0, beam))
//   hash_lo/hi, phash_lo/hi       64-bit hash of the prefix and of the prefix without its last token (GPU
//                                 only: finds merge pairs without comparing token lists)
//   tokens[beam][max_len]         token slots
// Slots make the token store single-buffered: a winner that keeps its source's slot appends in place; only
// a source chosen by several winners is copied (into slots freed by sources nobody chose).
#pragma once

#include <cstdint>
#include <cmath>

#if defined(__CUDACC__)
#define CTC_HD __host__ __device__ __forceinline__
#else
#define CTC_HD inline
#endif

namespace beamdec {
namespace ctc {

constexpr int kMaxBeam = 128;      // widest beam any path supports
constexpr int kHeaderWords = 16;
constexpr int kTile = 128;         // frames per pre-pass tile (pre-pass + decode launches per tile)
constexpr int kMaxStreamsPerLaunch = 256;  // state pointers travel by value (2 KiB of kernel params)

// header word indices
constexpr int kHdrStep = 0;        // selected frames decoded so far (0 = nothing decoded yet)
constexpr int kHdrLastSel = 1;     // global index of the last selected frame
constexpr int kHdrFramesSeen = 2;  // frames given to this row so far (selected or not)
constexpr int kHdrActive = 3;      // number of live beams
constexpr int kHdrStatus = 4;      // kStatus* bits

constexpr int kStatusBadValue = 1;  // NaN or +inf seen in log_probs
constexpr int kStatusCapHit = 2;    // some hypothesis reached max_seq_len (it stops growing)

// Candidate chars kept per frame by the pre-pass: enough that any (beam, char) extension outside them
// ranks below `beam` extensions of the same beam that are inside (see ctc_decode.cuh).
CTC_HD int candidate_count(int beam, int vocab) {
  int c = 2 * beam + 1;
  return c < vocab - 1 ? c : vocab - 1;
}

struct StateLayout {
  int beam;
  int max_len;
  CTC_HD int pb() const { return kHeaderWords; }
  CTC_HD int pnb() const { return kHeaderWords + 1 * beam; }
  CTC_HD int last() const { return kHeaderWords + 2 * beam; }
  CTC_HD int len() const { return kHeaderWords + 3 * beam; }
  CTC_HD int slot() const { return kHeaderWords + 4 * beam; }
  CTC_HD int hash_lo() const { return kHeaderWords + 5 * beam; }
  CTC_HD int hash_hi() const { return kHeaderWords + 6 * beam; }
  CTC_HD int phash_lo() const { return kHeaderWords + 7 * beam; }
  CTC_HD int phash_hi() const { return kHeaderWords + 8 * beam; }
  CTC_HD int tokens() const { return kHeaderWords + 9 * beam; }
  CTC_HD int64_t words() const { return (int64_t)tokens() + (int64_t)beam * max_len; }
};

CTC_HD int64_t state_words(int beam, int max_len) { return StateLayout{beam, max_len}.words(); }

// log(exp(a) + exp(b)) with -inf as the identity.
CTC_HD float log_add(float a, float b) {
  if (a == -INFINITY) return b;
  if (b == -INFINITY) return a;
  float m = a > b ? a : b;
  float d = a > b ? b - a : a - b;
#if defined(__CUDA_ARCH__)
  return m + log1pf(__expf(d));
#else
  return m + std::log1p(std::exp(d));
#endif
}

// Prefix hashes: a strong 64-bit mixer (splitmix64 finaliser) so that no algebraic token pattern collides.
constexpr uint64_t kEmptyHash = 0x6a09e667f3bcc908ULL;
CTC_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
CTC_HD uint64_t extend_hash(uint64_t h, int token) {
  return mix64(h * 0x9e3779b97f4a7c15ULL + (uint64_t)(uint32_t)token + 0x632be59bd9b4e019ULL);
}

// Order-preserving map float -> uint32 (larger float, larger key). 0 is reserved for "no candidate"
// (every real float maps above 0 except -NaN patterns, which the pre-pass rejects).
CTC_HD uint32_t float_key(float f) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(f);
#else
  static_assert(sizeof(float) == 4, "float must be 32-bit");
  __builtin_memcpy(&u, &f, 4);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace ctc
}  // namespace beamdec
