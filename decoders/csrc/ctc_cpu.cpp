// CTC prefix beam search: the CPU reference. Readable first; it is the executable spec the CUDA path is
// tested against (tests/test_ctc_*.py), and it is itself tested against a brute-force sum over alignments.
//
// Semantics (Hannun et al. 2014, "First-pass large vocabulary continuous speech recognition using
// bi-directional recurrent DNNs", prefix beam search; blank/non-blank split as in torchaudio's
// ctc_prefix_decoder):
//  * a beam is a collapsed prefix with log P(ends in blank) `pb` and log P(ends in non-blank) `pnb`;
//  * per selected frame, with A = logaddexp(pb, pnb):
//      stay:   pb' = lp[blank] + A,  pnb' = lp[last] + pnb (same label repeated without a blank)
//      extend with c != blank:  pnb' = lp[c] + (c == last ? pb : A)   (a repeat needs a blank between)
//    extensions that equal another beam's prefix are merged into that beam (log-add);
//  * keep the `beam` best prefixes by logaddexp(pb', pnb'); candidates at -inf are dropped;
//  * on the first selected frame with beam > 1 the empty prefix is always kept (one reserved slot);
//  * skipped frames (blank skipping offline, speech_mask == false streaming) act as one certain blank:
//    at the next selected frame every beam first collapses to (pb = A, pnb = -inf);
//  * an extension that would make a prefix longer than max_seq_len is not generated; a row whose
//    beam ever held a prefix of length max_seq_len reports it (status bit 1);
//  * ties: candidates with equal scores are ranked by generation order (beam order, stay first, then
//    ascending token id); the CUDA path breaks ties by its own slot order, so equal-score hypotheses may
//    come out in a different order there; the scores themselves never differ beyond float rounding.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "ctc_common.cuh"
#include "ctc_ops.h"

namespace beamdec {

using ctc::log_add;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Beam {
  std::vector<int> prefix;
  float pb = kNegInf;
  float pnb = kNegInf;
  float score() const { return log_add(pb, pnb); }
};

// Paged token storage of one state row (layout and per-frame order: ctc_common.cuh). `tails` holds each
// beam's last page before the frame and is replaced by the new beams'; winners r (rank order) came from
// beam src[r] and appended tok[r] (-1: a stay). Mirrors the CUDA kernels' phases, sequentially; pages are
// allocated in winner order, so page numbers match the CUDA path's except for the order in which pages
// released by unkept beams were pushed.
void paged_update(int32_t* w, const ctc::StateLayout& L, const std::vector<int>& old_len, std::vector<int>& tails,
                  const std::vector<int>& src, const std::vector<int>& tok, bool& pool_full) {
  const int P = L.page_size, NP = L.num_pages;
  int32_t* parent = w + L.parent();
  int32_t* rc = w + L.refcnt();
  int32_t* stack = w + L.free_stack();
  ctc::token_t* pages = reinterpret_cast<ctc::token_t*>(w + L.pages());
  int32_t& top = w[ctc::kHdrFreeTop];
  int32_t& fresh = w[ctc::kHdrNextFresh];
  const int old_nb = (int)old_len.size(), nw = (int)src.size();
  std::vector<int> uses(old_nb, 0), first(old_nb, -1);
  for (int r = 0; r < nw; ++r) {
    uses[src[r]] += 1;
    if (first[src[r]] < 0) first[src[r]] = r;
  }
  // 1. beams nobody keeps drop their last page; pages reaching zero release their parent in turn
  for (int k = 0; k < old_nb; ++k) {
    if (uses[k] != 0) continue;
    for (int32_t x = tails[k]; x >= 0;) {
      if (--rc[x] > 0) break;
      stack[top++] = x;
      x = parent[x];
    }
  }
  // 2. every winner after the first of its source shares the source's last page
  for (int r = 0; r < nw; ++r)
    if (first[src[r]] != r && tails[src[r]] >= 0) rc[tails[src[r]]] += 1;
  // 3. appends, decided on the counts after all releases and forks
  enum { kNone, kFresh, kCow, kInPlace, kLost };
  std::vector<int> need(nw, kNone), ntail(nw);
  for (int r = 0; r < nw; ++r) {
    const int32_t x = tails[src[r]];
    ntail[r] = x;
    if (tok[r] < 0) continue;
    const int pos = old_len[src[r]];
    need[r] = x == ctc::kLostPage ? kLost : pos % P == 0 ? kFresh : rc[x] > 1 ? kCow : kInPlace;
  }
  const int avail = top;
  int nalloc = 0;
  std::vector<int32_t> deferred;
  for (int r = 0; r < nw; ++r) {
    const int32_t x = ntail[r];
    const int off = old_len[src[r]] % P;
    if (need[r] == kNone) continue;
    if (need[r] == kInPlace) {
      pages[(int64_t)x * P + off] = (ctc::token_t)tok[r];
      continue;
    }
    if (need[r] == kLost) {
      pool_full = true;
      continue;
    }
    const int i = nalloc++;
    const int32_t pg = i < avail ? stack[avail - 1 - i] : (fresh + (i - avail) < NP ? fresh + (i - avail) : -1);
    if (pg < 0) {  // out of pages: this beam's tokens are lost (its references leak; the pool is full anyway)
      pool_full = true;
      ntail[r] = ctc::kLostPage;
      continue;
    }
    rc[pg] = 1;
    pages[(int64_t)pg * P + off] = (ctc::token_t)tok[r];
    ntail[r] = pg;
    if (need[r] == kFresh) {  // the beam's reference on its old last page becomes the new page's parent link
      parent[pg] = x;
    } else {  // copy on write: the copy links to x's parent; the beam drops x
      for (int q = 0; q < off; ++q) pages[(int64_t)pg * P + q] = pages[(int64_t)x * P + q];
      parent[pg] = parent[x];
      if (parent[x] >= 0) rc[parent[x]] += 1;
      if (--rc[x] == 0) deferred.push_back(x);
    }
  }
  top = avail - std::min(nalloc, avail);
  fresh = std::min(NP, fresh + std::max(0, nalloc - avail));
  // 4. pages freed by the copies go back last (their parents keep the copies' references: no cascade)
  for (int32_t x : deferred) {
    stack[top++] = x;
    if (parent[x] >= 0) rc[parent[x]] -= 1;
  }
  tails.assign(ntail.begin(), ntail.end());
}

// Tokens of a prefix (len of them) from a state row: flat from its slot, paged by walking its page chain
// back from `slot` (its last page); -1 where paged tokens were lost.
void read_tokens(const int32_t* w, const ctc::StateLayout& L, int slot, int len, int32_t* out) {
  if (!L.paged()) {
    const ctc::token_t* toks = reinterpret_cast<const ctc::token_t*>(w + L.tokens()) + (int64_t)slot * L.max_len;
    std::copy(toks, toks + len, out);
    return;
  }
  const int P = L.page_size;
  int32_t x = slot;
  for (int start = (len - 1) / P * P; len > 0 && start >= 0; start -= P) {
    // a page link outside the pool can only come from a state forged past the checksum: refuse, never read it
    CTC_ARG_CHECK(x < L.num_pages && x >= ctc::kLostPage,
                  "state: a page link (" + std::to_string(x) + ") is outside the page pool [0, " +
                      std::to_string(L.num_pages) + ") (corrupted state)");
    const ctc::token_t* pages = reinterpret_cast<const ctc::token_t*>(w + L.pages());
    for (int i = start; i < std::min(len, start + P); ++i) out[i] = x >= 0 ? (int32_t)pages[(int64_t)x * P + i - start] : -1;
    x = x >= 0 ? w[L.parent() + x] : x;
  }
}

// One row's decoder: the whole algorithm lives in `frame`.
struct RowDecoder {
  int beam, blank, max_len;
  ctc::StateLayout L;
  int32_t* paged_w = nullptr;  // paged storage: the state row whose pages hold the tokens
  int step = 0;              // selected frames decoded
  int64_t last_sel = -1;     // global index of the last selected frame
  int64_t frames_seen = 0;
  bool cap_hit = false;
  bool bad_value = false;
  bool pool_full = false;
  std::vector<Beam> beams;
  std::vector<int> slots;  // paged: last page of each beam (kNoPage: empty prefix)

  RowDecoder(int beam_, int blank_, int max_len_, int page_size = 0, int num_pages = 0)
      : beam(beam_), blank(blank_), max_len(max_len_), L{beam_, max_len_, page_size, num_pages} {
    beams.push_back(Beam{{}, 0.0f, kNegInf});  // before any frame: the empty prefix with probability 1
    slots.push_back(ctc::kNoPage);
  }

  // Decodes one selected frame `lp` (V values) whose global frame index is `g`.
  void frame(const float* lp, int V, int64_t g) {
    for (int c = 0; c < V; ++c)
      if (std::isnan(lp[c]) || lp[c] == std::numeric_limits<float>::infinity()) bad_value = true;
    if (step > 0 && g > last_sel + 1) {  // skipped frames in between: collapse to blank-ending
      for (Beam& b : beams) {
        b.pb = b.score();
        b.pnb = kNegInf;
      }
    }
    const int nb = (int)beams.size();
    // merge map: child_of[k] = {(c, j)}: beam j's prefix is beam k's prefix + c
    std::map<std::vector<int>, int> index;
    for (int k = 0; k < nb; ++k) index[beams[k].prefix] = k;
    std::vector<std::vector<std::pair<int, int>>> children(nb);
    for (int j = 0; j < nb; ++j) {
      const auto& p = beams[j].prefix;
      if (p.empty()) continue;
      auto it = index.find(std::vector<int>(p.begin(), p.end() - 1));
      if (it != index.end()) children[it->second].push_back({p.back(), j});
    }

    struct Cand {
      float pb, pnb;
      int src, token;  // token -1: stay
      float score() const { return log_add(pb, pnb); }
    };
    std::vector<Cand> cands;
    cands.reserve((size_t)nb * V);
    for (int k = 0; k < nb; ++k) {  // stays first, so that merges can fold into them
      const Beam& b = beams[k];
      float stay_nb = b.prefix.empty() ? kNegInf : lp[b.prefix.back()] + b.pnb;
      cands.push_back({lp[blank] + b.score(), stay_nb, k, -1});
    }
    for (int k = 0; k < nb; ++k) {
      const Beam& b = beams[k];
      const float a = b.score();
      const int last = b.prefix.empty() ? -1 : b.prefix.back();
      for (int c = 0; c < V; ++c) {
        if (c == blank) continue;
        const float s = lp[c] + (c == last ? b.pb : a);
        int merged_into = -1;
        for (auto& cj : children[k])
          if (cj.first == c) merged_into = cj.second;
        if (merged_into >= 0) {
          cands[merged_into].pnb = log_add(cands[merged_into].pnb, s);
          continue;
        }
        if ((int)b.prefix.size() >= max_len || s == kNegInf) continue;
        cands.push_back({kNegInf, s, k, c});
      }
    }

    // keep the `beam` best finite candidates; on the first frame the empty prefix is reserved
    std::vector<int> order;
    std::vector<int> chosen;
    const bool reserve_empty = step == 0 && beam > 1 && cands[0].score() != kNegInf;
    for (int i = reserve_empty ? 1 : 0; i < (int)cands.size(); ++i)
      if (cands[i].score() != kNegInf) order.push_back(i);
    const int want = std::min<int>(beam - (reserve_empty ? 1 : 0), (int)order.size());
    std::partial_sort(order.begin(), order.begin() + want, order.end(), [&](int x, int y) {
      float sx = cands[x].score(), sy = cands[y].score();
      return sx > sy || (sx == sy && x < y);
    });
    if (reserve_empty) chosen.push_back(0);
    chosen.insert(chosen.end(), order.begin(), order.begin() + want);

    if (paged_w) {  // paged storage follows the same winners
      std::vector<int> old_len, src, tok;
      for (const Beam& b : beams) old_len.push_back((int)b.prefix.size());
      for (int i : chosen) {
        src.push_back(cands[i].src);
        tok.push_back(cands[i].token);
      }
      paged_update(paged_w, L, old_len, slots, src, tok, pool_full);
    }
    std::vector<Beam> next;
    for (int i : chosen) {
      const Cand& c = cands[i];
      Beam nbm;
      nbm.prefix = beams[c.src].prefix;
      if (c.token >= 0) nbm.prefix.push_back(c.token);
      nbm.pb = c.pb;
      nbm.pnb = c.pnb;
      if ((int)nbm.prefix.size() >= max_len) cap_hit = true;  // this hypothesis can grow no further
      next.push_back(std::move(nbm));
    }
    beams = std::move(next);  // may be empty only if every candidate is -inf
    step += 1;
    last_sel = g;
  }

  // N-best by score (ties: beam order). Before any frame: the empty hypothesis with score 0.
  void write_nbest(int nbest, int32_t* tokens, int32_t* lengths, float* scores) const {
    std::vector<int> order(beams.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = (int)i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int x, int y) { return beams[x].score() > beams[y].score(); });
    for (int r = 0; r < nbest; ++r) {
      if (r < (int)order.size()) {
        const Beam& b = beams[order[r]];
        lengths[r] = (int32_t)b.prefix.size();
        scores[r] = b.score();
        int32_t* out = tokens + (int64_t)r * max_len;
        if (paged_w) {  // from the pages, which must hold exactly the prefix unless the pool ran out
          read_tokens(paged_w, L, slots[order[r]], (int)b.prefix.size(), out);
          if (!pool_full)
            for (size_t i = 0; i < b.prefix.size(); ++i)
              TORCH_INTERNAL_ASSERT(out[i] == b.prefix[i], "paged token store differs from the prefix at ", i);
        } else {
          for (size_t i = 0; i < b.prefix.size(); ++i) out[i] = b.prefix[i];
        }
      } else {
        lengths[r] = 0;
        scores[r] = kNegInf;
      }
    }
  }

  // ---- the streaming state tensor (layout in ctc_common.cuh); beam j lives in token slot j ----
  // `w` is the row of a streaming state; paged storage keeps using it for the tokens.
  void load(int32_t* w) {
    if (L.paged()) paged_w = w;
    step = w[ctc::kHdrStep];
    last_sel = w[ctc::kHdrLastSel];
    frames_seen = w[ctc::kHdrFramesSeen];
    bad_value = (w[ctc::kHdrStatus] & ctc::kStatusBadValue) != 0;
    cap_hit = (w[ctc::kHdrStatus] & ctc::kStatusCapHit) != 0;
    pool_full = (w[ctc::kHdrStatus] & ctc::kStatusPoolFull) != 0;
    beams.clear();
    slots.clear();
    if (step == 0) {
      beams.push_back(Beam{{}, 0.0f, kNegInf});
      slots.push_back(ctc::kNoPage);
      return;
    }
    const int nb = w[ctc::kHdrActive];
    for (int j = 0; j < nb; ++j) slots.push_back(w[L.slot() + j]);
    for (int j = 0; j < nb; ++j) {
      Beam b;
      std::memcpy(&b.pb, &w[L.pb() + j], 4);
      std::memcpy(&b.pnb, &w[L.pnb() + j], 4);
      b.prefix.resize(w[L.len() + j]);
      read_tokens(w, L, slots[j], (int)b.prefix.size(), b.prefix.data());
      beams.push_back(std::move(b));
    }
  }

  void store(int32_t* w) const {
    w[ctc::kHdrStep] = step;
    w[ctc::kHdrLastSel] = (int32_t)last_sel;
    w[ctc::kHdrFramesSeen] = (int32_t)frames_seen;
    w[ctc::kHdrActive] = (int32_t)beams.size();
    w[ctc::kHdrStatus] = (bad_value ? ctc::kStatusBadValue : 0) | (cap_hit ? ctc::kStatusCapHit : 0) |
                         (pool_full ? ctc::kStatusPoolFull : 0);
    for (int j = 0; j < beam; ++j) {
      w[L.slot() + j] = L.paged() ? (j < (int)slots.size() ? slots[j] : ctc::kNoPage) : j;
      if (j < (int)beams.size()) {
        const Beam& b = beams[j];
        std::memcpy(&w[L.pb() + j], &b.pb, 4);
        std::memcpy(&w[L.pnb() + j], &b.pnb, 4);
        w[L.len() + j] = (int32_t)b.prefix.size();
        w[L.last() + j] = b.prefix.empty() ? -1 : b.prefix.back();
        if (!L.paged())
          std::copy(b.prefix.begin(), b.prefix.end(),
                    reinterpret_cast<ctc::token_t*>(w + L.tokens()) + (int64_t)j * max_len);
      }
    }
  }
};

at::Tensor as_float_cpu(const at::Tensor& log_probs) { return log_probs.to(at::kFloat).contiguous(); }

CtcOutputs make_outputs(int64_t B, int64_t nbest, int64_t max_len) {
  auto i32 = at::TensorOptions().dtype(at::kInt);
  return {at::full({B, nbest, max_len}, -1, i32), at::zeros({B, nbest}, i32),
          at::full({B, nbest}, -std::numeric_limits<float>::infinity(), at::TensorOptions().dtype(at::kFloat)),
          at::zeros({B}, i32)};
}

void decode_rows(RowDecoder& dec, const float* lp, int64_t T, int64_t V, const bool* mask, double threshold) {
  // offline: skip frames with P(blank) > threshold (threshold >= 1 disables); streaming: mask
  const float log_thr = threshold >= 1.0 ? std::numeric_limits<float>::infinity() : (float)std::log(threshold);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = lp + t * V;
    if (row[dec.blank] == std::numeric_limits<float>::infinity()) dec.bad_value = true;  // even if skipped
    const bool selected = mask ? mask[t] : !(row[dec.blank] > log_thr);
    const int64_t g = dec.frames_seen + t;
    if (selected) dec.frame(row, (int)V, g);
  }
  dec.frames_seen += T;
}

}  // namespace

CtcOutputs ctc_decode_offline_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                  int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                  int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  using ctcmsg::s;
  CTC_CHECK_LOG_PROBS(log_probs, "log_probs");
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
  CTC_CHECK_CONFIG(beam_size, blank_id, V, nbest, max_seq_len, page_size, num_pages);
  CTC_ARG_CHECK(lengths.dim() == 1 && lengths.size(0) == B,
                "lengths must have shape (B=" + s(B) + ",), got " + s(lengths.sizes()));
  CTC_ARG_CHECK(!at::isFloatingType(lengths.scalar_type()) && lengths.scalar_type() != at::kBool,
                "lengths must be an integer tensor, got " + s(lengths.scalar_type()));
  CTC_ARG_CHECK(!(blank_skip_threshold != blank_skip_threshold), "blank_skip_threshold must not be NaN");
  auto lens = lengths.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t* len_p = lens.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    CTC_ARG_CHECK(len_p[b] >= 0 && len_p[b] <= T,
                  "lengths[" + s(b) + "] = " + s(len_p[b]) + " is outside [0, T=" + s(T) + "]");
  auto lp = as_float_cpu(log_probs);
  auto [tokens, tok_len, scores, status] = make_outputs(B, nbest, max_seq_len);
  const float* lp_p = lp.data_ptr<float>();
  std::vector<int32_t> row;  // paged: the token pages of the row being decoded
  for (int64_t b = 0; b < B; ++b) {
    RowDecoder dec((int)beam_size, (int)blank_id, (int)max_seq_len, (int)page_size, (int)num_pages);
    if (page_size > 0) {
      row.assign((size_t)dec.L.words(), 0);
      dec.paged_w = row.data();
    }
    decode_rows(dec, lp_p + b * T * V, len_p[b], V, nullptr, blank_skip_threshold);
    dec.write_nbest((int)nbest, tokens.data_ptr<int32_t>() + b * nbest * max_seq_len,
                    tok_len.data_ptr<int32_t>() + b * nbest, scores.data_ptr<float>() + b * nbest);
    status.data_ptr<int32_t>()[b] = (dec.bad_value ? ctc::kStatusBadValue : 0) |
                                    (dec.cap_hit ? ctc::kStatusCapHit : 0) | (dec.pool_full ? ctc::kStatusPoolFull : 0);
  }
  return {tokens, tok_len, scores, status};
}

// The packed form of ctc_decode_offline (ctc_ops.h): the CPU reference of the CUDA op's layout and checks, so the
// public call's parsing and the device-side checks are tested against one definition. Never refuses a length or
// a value: lengths are clamped to [0, T] and counted in checks[0].
at::Tensor ctc_decode_offline_packed_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                         int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                         int64_t max_seq_len, int64_t page_size, int64_t num_pages,
                                         int64_t sample_frames) {
  using ctcmsg::s;
  CTC_CHECK_LOG_PROBS(log_probs, "log_probs");
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
  CTC_ARG_CHECK(lengths.dim() == 1 && lengths.size(0) == B,
                "lengths must have shape (B=" + s(B) + ",), got " + s(lengths.sizes()));
  CTC_ARG_CHECK(!at::isFloatingType(lengths.scalar_type()) && lengths.scalar_type() != at::kBool,
                "lengths must be an integer tensor, got " + s(lengths.scalar_type()));
  CTC_ARG_CHECK(sample_frames >= 0, "sample_frames must be >= 0, got " + s(sample_frames));
  const at::Tensor given = lengths.to(at::kCPU).to(at::kLong).contiguous();
  const at::Tensor clamped = given.clamp(0, T);
  auto [tokens, tok_len, scores, status] = ctc_decode_offline_cpu(log_probs, clamped, beam_size, blank_id,
                                                                  blank_skip_threshold, nbest, max_seq_len,
                                                                  page_size, num_pages);
  std::vector<int32_t> checks((size_t)kPackedHeaderWords, 0);
  const int64_t* g = given.data_ptr<int64_t>();
  const at::Tensor lp = as_float_cpu(log_probs);
  const float* x = lp.data_ptr<float>();
  const int64_t t = std::min(T, sample_frames);
  for (int64_t b = 0; b < B; ++b) {
    if (g[b] < 0 || g[b] > T) ++checks[0];
    const int64_t n = std::min(t, std::max<int64_t>(g[b], 0));
    for (int64_t f = 0; f < n; ++f) {
      const float* row = x + (b * T + f) * V;
      float mn = INFINITY, sum = 0.0f, best = row[0];
      int64_t arg = 0;  // torch.argmax: the first maximum; a NaN counts as the maximum
      for (int64_t v = 0; v < V; ++v) {
        mn = std::fmin(mn, row[v]);
        sum += row[v];
        if (v > 0 && ((row[v] > best) || (std::isnan(row[v]) && !std::isnan(best)))) {
          best = row[v];
          arg = v;
        }
      }
      ++checks[1];
      if (mn >= 0.0f && std::fabs(sum - 1.0f) < 1e-2f) ++checks[2];
      if (arg == V - 1) ++checks[3];
      if (arg == 0) ++checks[4];
    }
  }
  const at::Tensor head = at::tensor(checks, at::TensorOptions().dtype(at::kInt));
  return at::cat({head, tokens.reshape(-1), tok_len.reshape(-1), scores.reshape(-1).view(at::kInt),
                  status.reshape(-1)});
}

namespace {
ctc::StateStamp cpu_stamp(int64_t beam_size, int64_t blank_id, int64_t vocab_size, int64_t max_seq_len,
                          int64_t page_size, int64_t num_pages) {
  return ctc::StateStamp{ctc::kBackendCpu, (int)beam_size,  (int)max_seq_len, (int)page_size,
                         page_size > 0 ? (int)num_pages : 0, (int)vocab_size, (int)blank_id};
}

// Refuses (ValueError, one line) the first row whose stamp, header fields, per-beam words or checksum are
// wrong. Runs over every row before any row is decoded, so a refused call leaves every row untouched.
void check_state_rows(const int32_t* rows, int64_t n_rows, int64_t words, const ctc::StateStamp& want,
                      const std::string& name, int64_t row0 = 0) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const int32_t* w = rows + r * words;
    ctc::StateError e = ctc::validate_state_fields(w, want);
    if (e.code == ctc::kStateOk) {
      const uint64_t h = ctc::state_checksum(w, words), stored = ctc::stored_checksum(w);
      if (h != stored) e = {ctc::kErrChecksum, -1, (int32_t)(uint32_t)stored, (int32_t)(uint32_t)h, (int32_t)(uint32_t)h};
    }
    CTC_ARG_CHECK(e.code == ctc::kStateOk, describe_state_error(e, row0 + r, name));
  }
}

void seal_row(int32_t* w, int64_t words) {
  const uint64_t h = ctc::state_checksum(w, words);
  w[ctc::kHdrChecksumLo] = (int32_t)(uint32_t)(h & 0xFFFFFFFFull);
  w[ctc::kHdrChecksumHi] = (int32_t)(uint32_t)(h >> 32);
}

void check_mask(const std::optional<at::Tensor>& speech_mask, int64_t rows, int64_t T) {
  using ctcmsg::s;
  if (!speech_mask) return;
  const at::Tensor& m = *speech_mask;
  CTC_ARG_CHECK(m.dim() == 2 && m.size(0) == rows && m.size(1) == T,
                "speech_mask must have shape (" + s(rows) + ", " + s(T) + ") like log_probs' first two dims, got " +
                    s(m.sizes()));
  CTC_ARG_CHECK(m.scalar_type() == at::kBool, "speech_mask must be a bool tensor, got " + s(m.scalar_type()));
}

void decode_chunk_rows(int32_t* state_rows, int64_t words, const at::Tensor& log_probs,
                       const std::optional<at::Tensor>& speech_mask, int64_t row0, int64_t rows, int64_t beam_size,
                       int64_t blank_id, int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  const int64_t T = log_probs.size(1), V = log_probs.size(2);
  auto lp = as_float_cpu(log_probs);
  at::Tensor mask;
  if (speech_mask) mask = speech_mask->to(at::kCPU).contiguous();
  for (int64_t r = 0; r < rows; ++r) {
    RowDecoder dec((int)beam_size, (int)blank_id, (int)max_seq_len, (int)page_size, (int)num_pages);
    int32_t* w = state_rows + r * words;
    dec.load(w);
    decode_rows(dec, lp.data_ptr<float>() + (row0 + r) * T * V, T, V,
                speech_mask ? mask.data_ptr<bool>() + (row0 + r) * T : nullptr, 1.0);
    dec.store(w);
    seal_row(w, words);
  }
}
}  // namespace

void ctc_decode_chunk_cpu(at::Tensor& state, const at::Tensor& log_probs,
                          const std::optional<at::Tensor>& speech_mask, int64_t beam_size, int64_t blank_id,
                          int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  using ctcmsg::s;
  CTC_CHECK_LOG_PROBS(log_probs, "log_probs");
  CTC_CHECK_CONFIG(beam_size, blank_id, log_probs.size(2), 1, max_seq_len, page_size, num_pages);
  CTC_CHECK_STATE(state, beam_size, max_seq_len, page_size, num_pages, "state");
  CTC_ARG_CHECK(state.size(0) == log_probs.size(0),
                "state has " + s(state.size(0)) + " rows but log_probs has batch " + s(log_probs.size(0)));
  check_mask(speech_mask, log_probs.size(0), log_probs.size(1));
  check_state_rows(state.data_ptr<int32_t>(), state.size(0), state.size(1),
                   cpu_stamp(beam_size, blank_id, log_probs.size(2), max_seq_len, page_size, num_pages), "state");
  decode_chunk_rows(state.data_ptr<int32_t>(), state.size(1), log_probs, speech_mask, 0, state.size(0), beam_size,
                    blank_id, max_seq_len, page_size, num_pages);
}

void ctc_decode_chunk_batched_cpu(at::TensorList states, const at::Tensor& log_probs,
                                  const std::optional<at::Tensor>& speech_mask, int64_t beam_size,
                                  int64_t blank_id, int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  using ctcmsg::s;
  CTC_CHECK_LOG_PROBS(log_probs, "log_probs");
  CTC_CHECK_CONFIG(beam_size, blank_id, log_probs.size(2), 1, max_seq_len, page_size, num_pages);
  CTC_ARG_CHECK((int64_t)states.size() == log_probs.size(0),
                "states: got " + s((int64_t)states.size()) + " states for " + s(log_probs.size(0)) +
                    " log_probs rows (one row per stream)");
  check_mask(speech_mask, log_probs.size(0), log_probs.size(1));
  for (size_t i = 0; i < states.size(); ++i) {
    CTC_CHECK_STATE(states[i], beam_size, max_seq_len, page_size, num_pages, "states[i]");
    CTC_ARG_CHECK(states[i].size(0) == 1,
                  "states[" + s((int64_t)i) + "] must hold one row (batch 1), got " + s(states[i].size(0)));
  }
  check_distinct_states(states);
  const ctc::StateStamp want = cpu_stamp(beam_size, blank_id, log_probs.size(2), max_seq_len, page_size, num_pages);
  for (size_t i = 0; i < states.size(); ++i)
    check_state_rows(states[i].data_ptr<int32_t>(), 1, states[i].size(1), want, "states[" + s((int64_t)i) + "]");
  for (size_t i = 0; i < states.size(); ++i)
    decode_chunk_rows(states[i].data_ptr<int32_t>(), states[i].size(1), log_probs, speech_mask, (int64_t)i, 1,
                      beam_size, blank_id, max_seq_len, page_size, num_pages);
}

CtcOutputs ctc_finalize_cpu(const at::Tensor& state, int64_t beam_size, int64_t blank_id, int64_t vocab_size,
                            int64_t nbest, int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  CTC_CHECK_CONFIG(beam_size, blank_id, vocab_size, nbest, max_seq_len, page_size, num_pages);
  CTC_CHECK_STATE(state, beam_size, max_seq_len, page_size, num_pages, "state");
  const int64_t B = state.size(0), words = state.size(1);
  check_state_rows(state.data_ptr<int32_t>(), B, words,
                   cpu_stamp(beam_size, blank_id, vocab_size, max_seq_len, page_size, num_pages), "state");
  auto [tokens, tok_len, scores, status] = make_outputs(B, nbest, max_seq_len);
  for (int64_t b = 0; b < B; ++b) {
    RowDecoder dec((int)beam_size, 0, (int)max_seq_len, (int)page_size, (int)num_pages);
    // read-only use: load() keeps a pointer for paged reads, nothing is written
    int32_t* w = const_cast<int32_t*>(state.data_ptr<int32_t>()) + b * words;
    dec.load(w);
    dec.write_nbest((int)nbest, tokens.data_ptr<int32_t>() + b * nbest * max_seq_len,
                    tok_len.data_ptr<int32_t>() + b * nbest, scores.data_ptr<float>() + b * nbest);
    status.data_ptr<int32_t>()[b] = w[ctc::kHdrStatus];
  }
  return {tokens, tok_len, scores, status};
}

void ctc_init_state_cpu(at::Tensor& state, int64_t beam_size, int64_t blank_id, int64_t vocab_size,
                        int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  CTC_CHECK_CONFIG(beam_size, blank_id, vocab_size, 1, max_seq_len, page_size, num_pages);
  CTC_CHECK_STATE(state, beam_size, max_seq_len, page_size, num_pages, "state");
  const ctc::StateStamp st = cpu_stamp(beam_size, blank_id, vocab_size, max_seq_len, page_size, num_pages);
  const int64_t words = state.size(1);
  state.zero_();
  for (int64_t r = 0; r < state.size(0); ++r) {
    int32_t* w = state.data_ptr<int32_t>() + r * words;
    ctc::stamp_row(w, st);
    seal_row(w, words);
  }
}

// ---- error-path diagnostics (ctc_ops.h) ----
__attribute__((noinline)) void ctc_debug_throw_from_helper(int64_t mode) {
  if (mode == 2) TORCH_CHECK_VALUE(false, "debug_raise: helper frame, string message");
  if (mode == 3) TORCH_CHECK_VALUE(false, "debug_raise: helper frame, integer message ", mode);
  CTC_ARG_CHECK(false, "debug_raise: helper frame, preformatted message " + std::to_string(mode));
}

void ctc_debug_raise_cpu(const at::Tensor& x, int64_t mode) {
  (void)x;
  if (mode == 0) TORCH_CHECK_VALUE(false, "debug_raise: op frame, string message");
  if (mode == 1) TORCH_CHECK_VALUE(false, "debug_raise: op frame, integer message ", mode);
  if (mode == 4) CTC_ARG_CHECK(false, "debug_raise: op frame, preformatted message " + std::to_string(mode));
  ctc_debug_throw_from_helper(mode);
}

}  // namespace beamdec
