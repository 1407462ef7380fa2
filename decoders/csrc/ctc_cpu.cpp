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

// One row's decoder: the whole algorithm lives in `frame`.
struct RowDecoder {
  int beam, blank, max_len;
  int step = 0;              // selected frames decoded
  int64_t last_sel = -1;     // global index of the last selected frame
  int64_t frames_seen = 0;
  bool cap_hit = false;
  bool bad_value = false;
  std::vector<Beam> beams;

  RowDecoder(int beam_, int blank_, int max_len_) : beam(beam_), blank(blank_), max_len(max_len_) {
    beams.push_back(Beam{{}, 0.0f, kNegInf});  // before any frame: the empty prefix with probability 1
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
        for (size_t i = 0; i < b.prefix.size(); ++i) tokens[(int64_t)r * max_len + i] = b.prefix[i];
      } else {
        lengths[r] = 0;
        scores[r] = kNegInf;
      }
    }
  }

  // ---- the streaming state tensor (layout in ctc_common.cuh); beam j lives in token slot j ----
  void load(const int32_t* w) {
    ctc::StateLayout L{beam, max_len};
    step = w[ctc::kHdrStep];
    last_sel = w[ctc::kHdrLastSel];
    frames_seen = w[ctc::kHdrFramesSeen];
    bad_value = (w[ctc::kHdrStatus] & ctc::kStatusBadValue) != 0;
    cap_hit = (w[ctc::kHdrStatus] & ctc::kStatusCapHit) != 0;
    beams.clear();
    if (step == 0) {
      beams.push_back(Beam{{}, 0.0f, kNegInf});
      return;
    }
    const int nb = w[ctc::kHdrActive];
    for (int j = 0; j < nb; ++j) {
      Beam b;
      std::memcpy(&b.pb, &w[L.pb() + j], 4);
      std::memcpy(&b.pnb, &w[L.pnb() + j], 4);
      const int32_t* toks = w + L.tokens() + (int64_t)w[L.slot() + j] * max_len;
      b.prefix.assign(toks, toks + w[L.len() + j]);
      beams.push_back(std::move(b));
    }
  }

  void store(int32_t* w) const {
    ctc::StateLayout L{beam, max_len};
    w[ctc::kHdrStep] = step;
    w[ctc::kHdrLastSel] = (int32_t)last_sel;
    w[ctc::kHdrFramesSeen] = (int32_t)frames_seen;
    w[ctc::kHdrActive] = (int32_t)beams.size();
    w[ctc::kHdrStatus] = (bad_value ? ctc::kStatusBadValue : 0) | (cap_hit ? ctc::kStatusCapHit : 0);
    for (int j = 0; j < beam; ++j) {
      w[L.slot() + j] = j;
      if (j < (int)beams.size()) {
        const Beam& b = beams[j];
        std::memcpy(&w[L.pb() + j], &b.pb, 4);
        std::memcpy(&w[L.pnb() + j], &b.pnb, 4);
        w[L.len() + j] = (int32_t)b.prefix.size();
        w[L.last() + j] = b.prefix.empty() ? -1 : b.prefix.back();
        std::copy(b.prefix.begin(), b.prefix.end(), w + L.tokens() + (int64_t)j * max_len);
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
                                  int64_t max_seq_len) {
  ctc_check_log_probs(log_probs, "log_probs");
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
  ctc_check_config(beam_size, blank_id, V, nbest, max_seq_len);
  TORCH_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) == B, "lengths must have shape (B=", B, ",), got ",
                    lengths.sizes());
  TORCH_CHECK_VALUE(!at::isFloatingType(lengths.scalar_type()) && lengths.scalar_type() != at::kBool,
                    "lengths must be an integer tensor, got ", lengths.scalar_type());
  TORCH_CHECK_VALUE(!(blank_skip_threshold != blank_skip_threshold), "blank_skip_threshold must not be NaN");
  auto lens = lengths.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t* len_p = lens.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK_VALUE(len_p[b] >= 0 && len_p[b] <= T, "lengths[", b, "] = ", len_p[b], " is outside [0, T=", T, "]");
  auto lp = as_float_cpu(log_probs);
  auto [tokens, tok_len, scores, status] = make_outputs(B, nbest, max_seq_len);
  const float* lp_p = lp.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    RowDecoder dec((int)beam_size, (int)blank_id, (int)max_seq_len);
    decode_rows(dec, lp_p + b * T * V, len_p[b], V, nullptr, blank_skip_threshold);
    dec.write_nbest((int)nbest, tokens.data_ptr<int32_t>() + b * nbest * max_seq_len,
                    tok_len.data_ptr<int32_t>() + b * nbest, scores.data_ptr<float>() + b * nbest);
    status.data_ptr<int32_t>()[b] = (dec.bad_value ? ctc::kStatusBadValue : 0) | (dec.cap_hit ? ctc::kStatusCapHit : 0);
  }
  return {tokens, tok_len, scores, status};
}

namespace {
void check_mask(const std::optional<at::Tensor>& speech_mask, int64_t rows, int64_t T) {
  if (!speech_mask) return;
  const at::Tensor& m = *speech_mask;
  TORCH_CHECK_VALUE(m.dim() == 2 && m.size(0) == rows && m.size(1) == T, "speech_mask must have shape (", rows,
                    ", ", T, ") like log_probs' first two dims, got ", m.sizes());
  TORCH_CHECK_VALUE(m.scalar_type() == at::kBool, "speech_mask must be a bool tensor, got ", m.scalar_type());
}

void decode_chunk_rows(int32_t* state_rows, int64_t words, const at::Tensor& log_probs,
                       const std::optional<at::Tensor>& speech_mask, int64_t row0, int64_t rows, int64_t beam_size,
                       int64_t blank_id, int64_t max_seq_len) {
  const int64_t T = log_probs.size(1), V = log_probs.size(2);
  auto lp = as_float_cpu(log_probs);
  at::Tensor mask;
  if (speech_mask) mask = speech_mask->to(at::kCPU).contiguous();
  for (int64_t r = 0; r < rows; ++r) {
    RowDecoder dec((int)beam_size, (int)blank_id, (int)max_seq_len);
    int32_t* w = state_rows + r * words;
    dec.load(w);
    decode_rows(dec, lp.data_ptr<float>() + (row0 + r) * T * V, T, V,
                speech_mask ? mask.data_ptr<bool>() + (row0 + r) * T : nullptr, 1.0);
    dec.store(w);
  }
}
}  // namespace

void ctc_decode_chunk_cpu(at::Tensor& state, const at::Tensor& log_probs,
                          const std::optional<at::Tensor>& speech_mask, int64_t beam_size, int64_t blank_id,
                          int64_t max_seq_len) {
  ctc_check_log_probs(log_probs, "log_probs");
  ctc_check_config(beam_size, blank_id, log_probs.size(2), 1, max_seq_len);
  ctc_check_state(state, beam_size, max_seq_len, "state");
  TORCH_CHECK_VALUE(state.size(0) == log_probs.size(0), "state has ", state.size(0),
                    " rows but log_probs has batch ", log_probs.size(0));
  check_mask(speech_mask, log_probs.size(0), log_probs.size(1));
  decode_chunk_rows(state.data_ptr<int32_t>(), state.size(1), log_probs, speech_mask, 0, state.size(0), beam_size,
                    blank_id, max_seq_len);
}

void ctc_decode_chunk_batched_cpu(at::TensorList states, const at::Tensor& log_probs,
                                  const std::optional<at::Tensor>& speech_mask, int64_t beam_size,
                                  int64_t blank_id, int64_t max_seq_len) {
  ctc_check_log_probs(log_probs, "log_probs");
  ctc_check_config(beam_size, blank_id, log_probs.size(2), 1, max_seq_len);
  TORCH_CHECK_VALUE((int64_t)states.size() == log_probs.size(0), "states: got ", states.size(),
                    " states for ", log_probs.size(0), " log_probs rows (one row per stream)");
  check_mask(speech_mask, log_probs.size(0), log_probs.size(1));
  for (size_t i = 0; i < states.size(); ++i) {
    ctc_check_state(states[i], beam_size, max_seq_len, "states[i]");
    TORCH_CHECK_VALUE(states[i].size(0) == 1, "states[", i, "] must hold one row (batch 1), got ",
                      states[i].size(0));
    decode_chunk_rows(states[i].data_ptr<int32_t>(), states[i].size(1), log_probs, speech_mask, (int64_t)i, 1,
                      beam_size, blank_id, max_seq_len);
  }
}

CtcOutputs ctc_finalize_cpu(const at::Tensor& state, int64_t beam_size, int64_t nbest, int64_t max_seq_len) {
  ctc_check_config(beam_size, 0, 2, nbest, max_seq_len);
  ctc_check_state(state, beam_size, max_seq_len, "state");
  const int64_t B = state.size(0), words = state.size(1);
  auto [tokens, tok_len, scores, status] = make_outputs(B, nbest, max_seq_len);
  for (int64_t b = 0; b < B; ++b) {
    RowDecoder dec((int)beam_size, 0, (int)max_seq_len);
    const int32_t* w = state.data_ptr<int32_t>() + b * words;
    dec.load(w);
    dec.write_nbest((int)nbest, tokens.data_ptr<int32_t>() + b * nbest * max_seq_len,
                    tok_len.data_ptr<int32_t>() + b * nbest, scores.data_ptr<float>() + b * nbest);
    status.data_ptr<int32_t>()[b] = w[ctc::kHdrStatus];
  }
  return {tokens, tok_len, scores, status};
}

}  // namespace beamdec
