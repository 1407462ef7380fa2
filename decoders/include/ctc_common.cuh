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
//   flat storage (page_size == 0):
//     tokens[beam][max_len]       token slots, 16-bit token ids (token_t), two per word
//   paged storage (page_size > 0; P = page_size, NP = num_pages):
//     parent[NP]                  the page holding the previous P tokens of a prefix (-1: none)
//     refcnt[NP]                  beams whose last page it is + pages whose parent it is
//     free_stack[NP]              recycled pages (top in header kHdrFreeTop; never-used pages come from
//                                 the bump counter kHdrNextFresh)
//     pages[NP][P]                token storage (16-bit token ids, two per word)
//     and slot[beam] holds each beam's last page (-1: empty prefix; -2: tokens lost, pool exhausted).
// Flat storage keeps each prefix in a slot (a permutation of [0, beam)): a winner that keeps its source's
// slot appends in place; a source chosen by several winners is forked into a slot freed by a source
// nobody chose, copying the prefix. Paged storage shares prefixes: a prefix is a chain of fixed-size pages
// linked to their parents (the page table of a prefix, implicit), so a fork only takes a reference on the
// source's last page, and a beam nobody keeps drops its reference (pages reaching zero return to the free
// stack and release their parent in turn). Appending into a partly filled page that someone else also
// references copies it first (copy on write); into a full page, a new page is chained. Fork, release and
// append are O(1) per beam instead of O(prefix); reading a prefix back walks its chain (finalize only).
// Per frame: release unkept beams and reference forked pages -> decide appends on those counts ->
// allocations in winner order (the i-th takes free_stack[top-1-i], then fresh pages) -> pages freed by
// the copies are pushed last, so no allocation of a frame races with a release of the same frame.
// Default NP = beam * (ceil(max_len / P) + 1): never exhausted (live pages <= beam * ceil(max_len / P),
// plus <= beam new ones per frame). A smaller pool can run out: the beam's tokens are then lost (slot -2,
// status kStatusPoolFull) and the Python layer raises if a returned hypothesis is one of them.
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
// Token ids are stored in 16 bits (two per state word): half the state and half the bytes a fork copies.
// Hence V <= kMaxVocab (every CTC vocabulary in use is far below; the ops reject larger ones).
using token_t = uint16_t;
constexpr int kMaxVocab = 65536;
constexpr int kHeaderWords = 16;
constexpr int kTile = 128;         // frames per pre-pass tile (pre-pass + decode launches per tile)
constexpr int kMaxStreamsPerLaunch = 256;  // state pointers travel by value (2 KiB of kernel params)

// header word indices
constexpr int kHdrStep = 0;        // selected frames decoded so far (0 = nothing decoded yet)
constexpr int kHdrLastSel = 1;     // global index of the last selected frame
constexpr int kHdrFramesSeen = 2;  // frames given to this row so far (selected or not)
constexpr int kHdrActive = 3;      // number of live beams
constexpr int kHdrStatus = 4;      // kStatus* bits
constexpr int kHdrFreeTop = 5;     // paged: entries on the free stack
constexpr int kHdrNextFresh = 6;   // paged: pages [next_fresh, NP) were never used

constexpr int kStatusBadValue = 1;  // NaN or +inf seen in log_probs
constexpr int kStatusCapHit = 2;    // some hypothesis reached max_seq_len (it stops growing)
constexpr int kStatusPoolFull = 4;  // paged: an append found no free page (that token is lost)

// Candidate chars kept per frame by the pre-pass: enough that any (beam, char) extension outside them
// ranks below `beam` extensions of the same beam that are inside (see ctc_decode.cuh).
CTC_HD int candidate_count(int beam, int vocab) {
  int c = 2 * beam + 1;
  return c < vocab - 1 ? c : vocab - 1;
}

struct StateLayout {
  int beam;
  int max_len;
  int page_size = 0;  // 0: flat token slots
  int num_pages = 0;  // paged: physical pages per row
  CTC_HD int pb() const { return kHeaderWords; }
  CTC_HD int pnb() const { return kHeaderWords + 1 * beam; }
  CTC_HD int last() const { return kHeaderWords + 2 * beam; }
  CTC_HD int len() const { return kHeaderWords + 3 * beam; }
  CTC_HD int slot() const { return kHeaderWords + 4 * beam; }
  CTC_HD int hash_lo() const { return kHeaderWords + 5 * beam; }
  CTC_HD int hash_hi() const { return kHeaderWords + 6 * beam; }
  CTC_HD int phash_lo() const { return kHeaderWords + 7 * beam; }
  CTC_HD int phash_hi() const { return kHeaderWords + 8 * beam; }
  CTC_HD int tokens() const { return kHeaderWords + 9 * beam; }  // flat (word offset of token_t data)
  CTC_HD bool paged() const { return page_size > 0; }
  CTC_HD int max_pages() const { return page_size > 0 ? (max_len + page_size - 1) / page_size : 0; }
  CTC_HD int64_t parent() const { return kHeaderWords + 9 * beam; }  // paged
  CTC_HD int64_t refcnt() const { return parent() + num_pages; }
  CTC_HD int64_t free_stack() const { return refcnt() + num_pages; }
  CTC_HD int64_t pages() const { return free_stack() + num_pages; }  // word offset of token_t data
  CTC_HD int64_t words() const {  // token_t data rounded up to whole words
    return paged() ? pages() + ((int64_t)num_pages * page_size + 1) / 2
                   : (int64_t)tokens() + ((int64_t)beam * max_len + 1) / 2;
  }
};

constexpr int kNoPage = -1;    // slot of a paged beam with the empty prefix
constexpr int kLostPage = -2;  // slot of a paged beam whose tokens were lost (pool exhausted)

CTC_HD int default_num_pages(int beam, int max_len, int page_size) {
  return page_size > 0 ? beam * ((max_len + page_size - 1) / page_size + 1) : 0;
}

CTC_HD int64_t state_words(int beam, int max_len, int page_size = 0, int num_pages = 0) {
  return StateLayout{beam, max_len, page_size, num_pages}.words();
}

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
