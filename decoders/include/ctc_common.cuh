// CTC prefix beam search: constants, the per-row state layout and small math helpers shared by the CPU
// reference, the launchers and the kernels. Torch-free; compiles as plain C++ (no CUDA) too.
//
// State of one row (one utterance / one stream): a flat int32 block of `state_words(beam, max_len)` words
//   header[kHeaderWords]          step, last selected frame, frames seen, active beams, status, paged free
//                                 stack top and next fresh page, then the stamp (magic/version/backend, beam,
//                                 max_len, page_size, num_pages, vocab, blank) and the row checksum; see the
//                                 kHdr* constants. Every op validates a row (validate_state_fields + checksum)
//                                 before reading it and re-seals it after writing it.
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
// Stamp (written once by create_state through the ctc_init_state op, checked on every op): what the row's
// layout and meaning depend on. A state of another config, vocabulary or backend is refused by name.
constexpr int kHdrMagic = 7;       // kStateMagic | version << 8 | backend (kBackendCpu / kBackendCuda)
constexpr int kHdrBeam = 8;
constexpr int kHdrMaxLen = 9;
constexpr int kHdrPageSize = 10;   // 0: flat
constexpr int kHdrNumPages = 11;
constexpr int kHdrVocab = 12;
constexpr int kHdrBlank = 13;
// Integrity: a 64-bit checksum of every other word of the row (state_checksum), recomputed by the op that
// last wrote the row and verified before the next op reads it. It catches any accidental or careless
// change (bit flips, zeroed ranges, edited fields, a row copied from elsewhere) with probability 1 - 2^-64;
// it is not a defence against a forger who recomputes it (not a security boundary).
constexpr int kHdrChecksumLo = 14;
constexpr int kHdrChecksumHi = 15;

constexpr int32_t kStateMagic = 0x43540000;  // "CT" in the top half
constexpr int kStateVersion = 1;             // bump when the layout or a field's meaning changes
constexpr int kBackendCpu = 1;               // the CPU reference writes no prefix hashes: not CUDA-readable
constexpr int kBackendCuda = 2;
CTC_HD int32_t state_magic_word(int backend) { return kStateMagic | (kStateVersion << 8) | backend; }

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

// ---- state integrity ----
// One word's contribution to the row checksum: the words' terms are summed mod 2^64, so any thread may add
// any word (the CUDA kernels reduce over a block). mix64 is a bijection of (index, value): changing one
// word changes the sum; several random changes cancel with probability 2^-64.
constexpr uint64_t kChecksumSalt = 0x5bd1e9955bd1e995ULL;
CTC_HD bool checksum_covers(int64_t i) { return i != kHdrChecksumLo && i != kHdrChecksumHi; }
CTC_HD uint64_t checksum_term(int64_t i, int32_t word) {
  return checksum_covers(i) ? mix64((((uint64_t)i) << 32 | (uint64_t)(uint32_t)word) ^ kChecksumSalt) : 0ULL;
}
CTC_HD uint64_t checksum_seed(int64_t words) { return mix64((uint64_t)words ^ ~kChecksumSalt); }
CTC_HD uint64_t stored_checksum(const int32_t* w) {
  return (uint64_t)(uint32_t)w[kHdrChecksumLo] | ((uint64_t)(uint32_t)w[kHdrChecksumHi] << 32);
}

// Serial checksum of one row (CPU ops; the CUDA kernels reduce the same terms over a block).
CTC_HD uint64_t state_checksum(const int32_t* w, int64_t words) {
  uint64_t h = checksum_seed(words);
  for (int64_t i = 0; i < words; ++i) h += checksum_term(i, w[i]);
  return h;
}

// What a state row is checked against: the config of the op reading it (vocab 0 = not known to this op).
struct StateStamp {
  int backend, beam, max_len, page_size, num_pages, vocab, blank;
};

// Writes the stamp words of a fresh (zeroed) row; the caller seals it afterwards.
CTC_HD void stamp_row(int32_t* w, const StateStamp& st) {
  w[kHdrMagic] = state_magic_word(st.backend);
  w[kHdrBeam] = st.beam;
  w[kHdrMaxLen] = st.max_len;
  w[kHdrPageSize] = st.page_size;
  w[kHdrNumPages] = st.num_pages;
  w[kHdrVocab] = st.vocab;
  w[kHdrBlank] = st.blank;
}

// Why a row was refused (code 0: valid). index: the beam of a per-beam field, else -1; found and [lo, hi]
// the value read and the allowed range (lo == hi: the one value expected). Five int32 words so the CUDA
// validation kernel can report it through a (rows, 5) int32 tensor.
enum StateErrorCode : int32_t {
  kStateOk = 0,
  kErrMagic, kErrVersion, kErrBackend, kErrBeam, kErrMaxLen, kErrPageSize, kErrNumPages, kErrVocab, kErrBlank,
  kErrStep, kErrFramesSeen, kErrLastSel, kErrActive, kErrStatus, kErrFreeTop, kErrNextFresh,
  kErrLen, kErrLast, kErrSlot, kErrChecksum,
  kErrCount
};
struct StateError {
  int32_t code, index, found, lo, hi;
};
constexpr int kStateErrorWords = 5;

// Every header field and every per-beam word an op dereferences or indexes with, against its bounds, in a
// fixed order (the stamp first, so a foreign state is named as such; the checksum is the caller's, last).
// O(beam): the CPU ops and one thread of the CUDA validation kernel run it on each row before any other code
// reads the row.
CTC_HD StateError validate_state_fields(const int32_t* w, const StateStamp& want) {
  auto bad = [](int32_t code, int32_t index, int32_t found, int32_t lo, int32_t hi) {
    return StateError{code, index, found, lo, hi};
  };
  const int32_t magic = w[kHdrMagic];
  if ((magic & (int32_t)0xFFFF0000) != kStateMagic)
    return bad(kErrMagic, -1, (int32_t)((uint32_t)magic >> 16), (int32_t)((uint32_t)kStateMagic >> 16),
               (int32_t)((uint32_t)kStateMagic >> 16));
  if (((magic >> 8) & 0xFF) != kStateVersion) return bad(kErrVersion, -1, (magic >> 8) & 0xFF, kStateVersion, kStateVersion);
  if ((magic & 0xFF) != want.backend) return bad(kErrBackend, -1, magic & 0xFF, want.backend, want.backend);
  if (w[kHdrBeam] != want.beam) return bad(kErrBeam, -1, w[kHdrBeam], want.beam, want.beam);
  if (w[kHdrMaxLen] != want.max_len) return bad(kErrMaxLen, -1, w[kHdrMaxLen], want.max_len, want.max_len);
  if (w[kHdrPageSize] != want.page_size) return bad(kErrPageSize, -1, w[kHdrPageSize], want.page_size, want.page_size);
  if (w[kHdrNumPages] != want.num_pages) return bad(kErrNumPages, -1, w[kHdrNumPages], want.num_pages, want.num_pages);
  if (want.vocab > 0 && w[kHdrVocab] != want.vocab) return bad(kErrVocab, -1, w[kHdrVocab], want.vocab, want.vocab);
  if (w[kHdrBlank] != want.blank) return bad(kErrBlank, -1, w[kHdrBlank], want.blank, want.blank);
  const int32_t vocab = w[kHdrVocab];  // stamped (and, for the chunk ops, equal to log_probs' V)
  if (vocab < 2 || vocab > kMaxVocab) return bad(kErrVocab, -1, vocab, 2, kMaxVocab);
  const int32_t step = w[kHdrStep], seen = w[kHdrFramesSeen];
  if (seen < 0) return bad(kErrFramesSeen, -1, seen, 0, 0x7FFFFFFF);
  if (step < 0 || step > seen) return bad(kErrStep, -1, step, 0, seen);
  if (step > 0 && (w[kHdrLastSel] < 0 || w[kHdrLastSel] >= seen))
    return bad(kErrLastSel, -1, w[kHdrLastSel], 0, seen - 1);
  const int32_t nb = w[kHdrActive];
  if (step > 0 && (nb < 0 || nb > want.beam)) return bad(kErrActive, -1, nb, 0, want.beam);
  const int32_t status = w[kHdrStatus];
  if (status & ~(kStatusBadValue | kStatusCapHit | kStatusPoolFull)) return bad(kErrStatus, -1, status, 0, 7);
  const int32_t NP = want.page_size > 0 ? want.num_pages : 0;
  const int32_t top = w[kHdrFreeTop], fresh = w[kHdrNextFresh];
  if (fresh < 0 || fresh > NP) return bad(kErrNextFresh, -1, fresh, 0, NP);
  if (top < 0 || top > fresh) return bad(kErrFreeTop, -1, top, 0, fresh);  // every free page was once used
  if (step == 0) return bad(kStateOk, -1, 0, 0, 0);  // nothing decoded: the kernels read no beam word
  const StateLayout L{want.beam, want.max_len, want.page_size, want.num_pages};
  for (int j = 0; j < want.beam; ++j) {
    const int32_t slot = w[L.slot() + j];  // every slot: flat forks take the slots of dropped beams
    if (L.paged() ? (slot < kLostPage || slot >= NP) : (slot < 0 || slot >= want.beam))
      return bad(kErrSlot, j, slot, L.paged() ? kLostPage : 0, L.paged() ? NP - 1 : want.beam - 1);
    if (j >= nb) continue;
    const int32_t len = w[L.len() + j], last = w[L.last() + j];
    if (len < 0 || len > want.max_len) return bad(kErrLen, j, len, 0, want.max_len);
    if (len > 0 ? (last < 0 || last >= vocab) : (last < -1 || last >= vocab))  // lp[last] is read when len > 0
      return bad(kErrLast, j, last, len > 0 ? 0 : -1, vocab - 1);
  }
  return bad(kStateOk, -1, 0, 0, 0);
}

}  // namespace ctc
}  // namespace beamdec
