// CPU reference of the STREAMING WFST beam search (decoders/wfst_stream.py): the same search as the offline
// reference (wfst_cpu.cpp, the executable spec) under k2's online semantics, advanced chunk by chunk.
//
// A `WfstStreamCpu` object (torch custom class) owns `max_streams` fixed slots. A slot holds one stream's
// search state between chunks: its frontier (state, score, word link), its k2 dynamic beam, its word links
// and the drained prefix of its transcript. `advance` runs the emitting steps of each stream's new frames
// (streams in parallel), `finalize` the final step and the backtrack.
//
// Semantics, step for step those of wfst_cpu.cpp with WfstDecoderConfig.online = true:
//  * The stream's length is unknown until `finalize`: every emitting step computes the dynamic beam with
//    final_t = wfst::kUnknownFrames, so the last-5-frames clauses never fire (k2's online intersecter); the
//    final step (FINAL arcs, or the allow_partial redirect) runs in `finalize` with beam 1e10, as offline.
//  * Epsilon closure after each emitting step (and for the start state when the stream opens), Jacobi passes,
//    at most eps_iterations; word boosting per stream; exact-tie rule "first candidate met" -- all as offline.
//  So finalize(chunks) == offline decode with online = true, for ANY chunking (tests/test_wfst_stream.py).
//
// Bounded memory: word links {prev, arc, frame} as offline, compacted when the store reaches
// max(compact_min_links, 2 L) entries (L = links still reachable from the frontier). At each compaction the
// CONVERGED prefix -- the chain every frontier token shares (the latest common ancestor of their links) -- is
// drained: its words move to the slot's transcript list and the chain is cut there, so the store holds the
// unconverged tail only. A stream then holds at most max(compact_min_links, 2 L) + (one step's links) links
// however long it runs (L: the links on the frontier's diverging tails, a few frames' worth); the words list
// is the transcript itself. Draining changes no result: every live chain runs through the drained prefix.
#include <ATen/Parallel.h>
#include <torch/custom_class.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common_check.h"
#include "wfst_cpu_closure.h"
#include "wfst_defs.h"

namespace beamdec {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Token {
  int32_t state;
  float score;
  int32_t link;  // the token's latest word link (-1: no word since the drained prefix)
};

struct Link {
  int32_t prev;   // previous word link (-1: none / the drained prefix)
  int32_t arc;    // an arc with output words
  int32_t frame;  // frame index at which the arc was taken (emitting arc: the frame it read)
};

// Per-thread map state -> token index, all -1 between uses (every step restores it), grown on demand: a
// stream advanced one frame at a time must not pay a num_states fill per call.
std::vector<int32_t>& state_scratch(int64_t num_states) {
  thread_local std::vector<int32_t> scratch;
  if (static_cast<int64_t>(scratch.size()) < num_states) scratch.resize(static_cast<size_t>(num_states), -1);
  return scratch;
}

struct Slot {
  bool open = false;
  std::vector<Token> front;
  std::vector<Link> links;
  std::vector<int32_t> boost_keys;
  std::vector<float> boost_values;
  float beam = 0.0f;
  int64_t frames = 0;  // frames decoded so far
  int32_t overflow = 0;
  int64_t compact_at = 0;
  int64_t peak_links = 0;
  int64_t links_created = 0;
  std::vector<int32_t> drained_words;  // the converged prefix of the transcript, oldest first
  std::vector<int32_t> drained_frames;
};

}  // namespace

class WfstStreamCpu : public torch::CustomClassHolder {
 public:
  WfstStreamCpu(at::Tensor row_splits, at::Tensor eps_begin, at::Tensor final_begin, at::Tensor dest, at::Tensor ilabel,
                at::Tensor aux_splits, at::Tensor aux_words, at::Tensor weight, int64_t start_state,
                int64_t final_state, double search_beam, int64_t min_active, int64_t max_active, bool allow_partial,
                double acoustic_scale, int64_t eps_iterations, int64_t max_streams, int64_t compact_min_links)
      : row_splits_(row_splits.contiguous()),
        eps_begin_(eps_begin.contiguous()),
        final_begin_(final_begin.contiguous()),
        dest_(dest.contiguous()),
        ilabel_(ilabel.contiguous()),
        aux_splits_(aux_splits.contiguous()),
        aux_words_(aux_words.contiguous()),
        weight_(weight.contiguous()) {
    for (const at::Tensor* t : {&row_splits_, &eps_begin_, &final_begin_, &dest_, &ilabel_, &aux_splits_, &aux_words_})
      BEAMDEC_CHECK_VALUE(t->scalar_type() == at::kInt && t->is_cpu(), "WfstStreamCpu: graph index tensors must be int32 on the CPU");
    BEAMDEC_CHECK_VALUE(weight_.scalar_type() == at::kFloat && weight_.is_cpu(), "WfstStreamCpu: weight must be float32 on the CPU");
    num_states_ = row_splits_.numel() - 1;
    const int64_t A = dest_.numel();
    BEAMDEC_CHECK_VALUE(num_states_ >= 1 && eps_begin_.numel() == num_states_ && final_begin_.numel() == num_states_,
                        "WfstStreamCpu: row_splits/eps_begin/final_begin sizes disagree");
    BEAMDEC_CHECK_VALUE(ilabel_.numel() == A && weight_.numel() == A && aux_splits_.numel() == A + 1,
                        "WfstStreamCpu: dest/ilabel/weight must have A entries and aux_splits A + 1");
    BEAMDEC_CHECK_VALUE(start_state >= 0 && start_state < num_states_ && final_state >= 0 && final_state < num_states_,
                        "WfstStreamCpu: start_state/final_state outside [0, ", num_states_, ")");
    BEAMDEC_CHECK_VALUE(search_beam > 0 && min_active >= 0 && max_active > min_active,
                        "WfstStreamCpu: need search_beam > 0 and 0 <= min_active < max_active");
    BEAMDEC_CHECK_VALUE(max_streams >= 1 && max_streams <= (1 << 20), "WfstStreamCpu: max_streams must be in [1, 2^20], got ",
                        max_streams);
    BEAMDEC_CHECK_VALUE(compact_min_links >= 1, "WfstStreamCpu: compact_min_links must be >= 1");
    start_ = static_cast<int32_t>(start_state);
    final_ = static_cast<int32_t>(final_state);
    search_beam_ = static_cast<float>(search_beam);
    min_active_ = static_cast<float>(min_active);
    max_active_ = static_cast<float>(max_active);
    allow_partial_ = allow_partial;
    acoustic_scale_ = static_cast<float>(acoustic_scale);
    eps_iterations_ = static_cast<int32_t>(eps_iterations);
    compact_min_ = compact_min_links;
    rs_ = row_splits_.data_ptr<int32_t>();
    eb_ = eps_begin_.data_ptr<int32_t>();
    fb_ = final_begin_.data_ptr<int32_t>();
    dst_ = dest_.data_ptr<int32_t>();
    il_ = ilabel_.data_ptr<int32_t>();
    as_ = aux_splits_.data_ptr<int32_t>();
    aw_ = aux_words_.data_ptr<int32_t>();
    wt_ = weight_.data_ptr<float>();
    for (int64_t s = 0; s < num_states_ && !has_eps_; ++s) has_eps_ = eb_[s] < fb_[s];
    for (int64_t a = 0; a < A; ++a) max_ilabel_ = std::max(max_ilabel_, il_[a]);
    BEAMDEC_CHECK_VALUE(!has_eps_ || eps_iterations_ >= 1, "WfstStreamCpu: the graph has epsilon arcs, eps_iterations must be >= 1");
    slots_.resize(static_cast<size_t>(max_streams));
  }

  // Opens slot `slot` for a new stream (boost table: open addressing, power-of-two capacity, may be empty).
  void open(int64_t slot, at::Tensor boost_keys, at::Tensor boost_values) {
    check_slot(slot, "open");
    Slot& s = slots_[slot];
    BEAMDEC_CHECK_VALUE(!s.open, "WfstStreamCpu.open: slot ", slot, " is already open");
    BEAMDEC_CHECK_VALUE(boost_keys.dim() == 1 && boost_keys.scalar_type() == at::kInt && boost_values.dim() == 1 &&
                            boost_values.scalar_type() == at::kFloat && boost_values.numel() == boost_keys.numel(),
                        "WfstStreamCpu.open: boost_keys (C,) int32 and boost_values (C,) float32 expected");
    const int64_t C = boost_keys.numel();
    BEAMDEC_CHECK_VALUE(C == 0 || (C & (C - 1)) == 0, "WfstStreamCpu.open: boost table capacity must be a power of two");
    s = Slot();
    s.open = true;
    auto k = boost_keys.contiguous(), v = boost_values.contiguous();
    s.boost_keys.assign(k.data_ptr<int32_t>(), k.data_ptr<int32_t>() + C);
    s.boost_values.assign(v.data_ptr<float>(), v.data_ptr<float>() + C);
    s.beam = search_beam_;
    s.compact_at = compact_min_;
    s.front.push_back({start_, 0.0f, -1});
    if (has_eps_) {  // the start state's closure, with cutoff -search_beam (as offline)
      std::vector<int32_t>& scratch = state_scratch(num_states_);
      scratch[start_] = 0;
      epsilon_closure(s, s.front, 0.0f - search_beam_, 0, scratch);
      for (const Token& tok : s.front) scratch[tok.state] = -1;
      s.peak_links = std::max<int64_t>(s.peak_links, s.links.size());
    }
  }

  void close(int64_t slot) {
    check_slot(slot, "close");
    BEAMDEC_CHECK_VALUE(slots_[slot].open, "WfstStreamCpu.close: slot ", slot, " is not open");
    slots_[slot] = Slot();
  }

  // Emitting steps of lengths[i] frames of log_probs[i] for the stream in slots[i] (streams in parallel).
  void advance(at::Tensor slots, at::Tensor log_probs, at::Tensor lengths) {
    BEAMDEC_CHECK_VALUE(log_probs.dim() == 3 && (log_probs.scalar_type() == at::kFloat || log_probs.scalar_type() == at::kHalf) &&
                            log_probs.is_cpu(),
                        "WfstStreamCpu.advance: log_probs must be a CPU float32/float16 tensor (N, T, V)");
    const int64_t N = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
    check_slot_list(slots, N, "advance");
    BEAMDEC_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) == N && lengths.scalar_type() == at::kLong && lengths.is_cpu(),
                        "WfstStreamCpu.advance: lengths must be a CPU int64 tensor of shape (", N, ",)");
    BEAMDEC_CHECK_VALUE(V > max_ilabel_, "WfstStreamCpu.advance: log_probs has ", V, " columns, the graph reads label ",
                        max_ilabel_);
    const int64_t* len = lengths.data_ptr<int64_t>();
    for (int64_t i = 0; i < N; ++i)
      BEAMDEC_CHECK_VALUE(len[i] >= 0 && len[i] <= T, "WfstStreamCpu.advance: lengths[", i, "] = ", len[i],
                          " outside [0, ", T, "]");
    at::Tensor lp = log_probs.contiguous();
    const int64_t* sl = slots.data_ptr<int64_t>();
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(lp.scalar_type(), "wfst_stream_advance_cpu", [&] {
      const scalar_t* base = lp.data_ptr<scalar_t>();
      at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
        std::vector<int32_t>& scratch = state_scratch(num_states_);
        for (int64_t i = begin; i < end; ++i) {
          Slot& s = slots_[sl[i]];
          for (int64_t t = 0; t < len[i]; ++t) step<scalar_t>(s, base + (i * T + t) * V, false, scratch);
        }
      });
    });
  }

  // Best path so far of each stream: the best frontier token (first met among equal scores), no end rules.
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> partial(at::Tensor slots) {
    check_slot_list(slots, slots.numel(), "partial");
    std::vector<std::vector<int32_t>> words(slots.numel()), frames(slots.numel());
    std::vector<double> scores(slots.numel());
    std::vector<int64_t> info(3 * slots.numel());
    for (int64_t i = 0; i < slots.numel(); ++i) {
      const Slot& s = slots_[slots.data_ptr<int64_t>()[i]];
      int32_t best = -1;
      for (size_t j = 0; j < s.front.size(); ++j)
        if (best < 0 || s.front[j].score > s.front[best].score) best = static_cast<int32_t>(j);
      scores[i] = best >= 0 ? s.front[best].score : -std::numeric_limits<double>::infinity();
      if (best >= 0) backtrack(s, s.front[best].link, words[i], frames[i]);
      info[3 * i] = s.overflow;
      info[3 * i + 1] = best >= 0 ? wfst::kFlagHasPath : 0;
      info[3 * i + 2] = s.frames;
    }
    return pack(words, frames, scores, info);
  }

  // The final step (FINAL arcs or the allow_partial redirect, beam 1e10), the backtrack, and the slot closes.
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> finalize(at::Tensor slots) {
    check_slot_list(slots, slots.numel(), "finalize");
    const int64_t N = slots.numel();
    const int64_t* sl = slots.data_ptr<int64_t>();
    std::vector<std::vector<int32_t>> words(N), frames(N);
    std::vector<double> scores(N, -std::numeric_limits<double>::infinity());
    std::vector<int64_t> info(3 * N, 0);
    at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
      std::vector<int32_t>& scratch = state_scratch(num_states_);
      for (int64_t i = begin; i < end; ++i) {
        Slot& s = slots_[sl[i]];
        const bool redirected = step<float>(s, nullptr, true, scratch);
        int32_t flags = 0;
        for (const Token& tok : s.front) {  // after the final step the frontier holds at most final_state
          if (tok.state != final_) continue;
          scores[i] = tok.score;
          flags = wfst::kFlagHasPath | (redirected ? 0 : wfst::kFlagReachedFinal);
          backtrack(s, tok.link, words[i], frames[i]);
        }
        info[3 * i] = s.overflow;
        info[3 * i + 1] = flags;
        info[3 * i + 2] = s.frames;
        slots_[sl[i]] = Slot();
      }
    });
    return pack(words, frames, scores, info);
  }

  // Memory of one slot: (frames, stored links, peak stored links, links created, drained words, frontier size).
  at::Tensor stats(int64_t slot) {
    check_slot(slot, "stats");
    const Slot& s = slots_[slot];
    auto out = at::zeros({6}, at::TensorOptions().dtype(at::kLong));
    int64_t* o = out.data_ptr<int64_t>();
    o[0] = s.frames;
    o[1] = static_cast<int64_t>(s.links.size());
    o[2] = s.peak_links;
    o[3] = s.links_created;
    o[4] = static_cast<int64_t>(s.drained_words.size());
    o[5] = static_cast<int64_t>(s.front.size());
    return out;
  }

  int64_t max_streams() const { return static_cast<int64_t>(slots_.size()); }

 private:
  void check_slot(int64_t slot, const char* what) const {
    BEAMDEC_CHECK_VALUE(slot >= 0 && slot < static_cast<int64_t>(slots_.size()), "WfstStreamCpu.", what, ": slot ",
                        slot, " outside [0, ", slots_.size(), ")");
  }

  void check_slot_list(const at::Tensor& slots, int64_t n, const char* what) const {
    BEAMDEC_CHECK_VALUE(slots.dim() == 1 && slots.numel() == n && slots.scalar_type() == at::kLong && slots.is_cpu() &&
                            slots.is_contiguous(),
                        "WfstStreamCpu.", what, ": slots must be a contiguous CPU int64 tensor of shape (", n, ",)");
    std::vector<char> seen(slots_.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = slots.data_ptr<int64_t>()[i];
      check_slot(s, what);
      BEAMDEC_CHECK_VALUE(slots_[s].open, "WfstStreamCpu.", what, ": slot ", s, " is not open");
      BEAMDEC_CHECK_VALUE(!seen[s], "WfstStreamCpu.", what, ": slot ", s, " appears twice");
      seen[s] = 1;
    }
  }

  static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> pack(
      const std::vector<std::vector<int32_t>>& words, const std::vector<std::vector<int32_t>>& frames,
      const std::vector<double>& scores, const std::vector<int64_t>& info) {
    const int64_t N = static_cast<int64_t>(words.size());
    auto offsets = at::zeros({N + 1}, at::TensorOptions().dtype(at::kLong));
    int64_t* off = offsets.data_ptr<int64_t>();
    for (int64_t i = 0; i < N; ++i) off[i + 1] = off[i] + static_cast<int64_t>(words[i].size());
    auto w = at::zeros({off[N]}, at::TensorOptions().dtype(at::kInt));
    auto f = at::zeros({off[N]}, at::TensorOptions().dtype(at::kInt));
    for (int64_t i = 0; i < N; ++i) {
      if (words[i].empty()) continue;
      std::memcpy(w.data_ptr<int32_t>() + off[i], words[i].data(), sizeof(int32_t) * words[i].size());
      std::memcpy(f.data_ptr<int32_t>() + off[i], frames[i].data(), sizeof(int32_t) * frames[i].size());
    }
    auto sc = at::zeros({N}, at::TensorOptions().dtype(at::kDouble));
    std::copy(scores.begin(), scores.end(), sc.data_ptr<double>());
    auto inf = at::zeros({N, 3}, at::TensorOptions().dtype(at::kLong));
    std::copy(info.begin(), info.end(), inf.data_ptr<int64_t>());
    return {w, f, offsets, sc, inf};
  }

  // Drained prefix + the words of the chain ending at `link` (oldest first).
  void backtrack(const Slot& s, int32_t link, std::vector<int32_t>& words, std::vector<int32_t>& frames) const {
    std::vector<int32_t> tail_w, tail_f;
    for (int32_t w = link; w >= 0; w = s.links[w].prev) {
      const int32_t a = s.links[w].arc;
      for (int32_t k = as_[a + 1] - 1; k >= as_[a]; --k) {
        tail_w.push_back(aw_[k]);
        tail_f.push_back(s.links[w].frame);
      }
    }
    words = s.drained_words;
    frames = s.drained_frames;
    words.insert(words.end(), tail_w.rbegin(), tail_w.rend());
    frames.insert(frames.end(), tail_f.rbegin(), tail_f.rend());
  }

  bool has_words(int32_t a) const { return as_[a + 1] > as_[a]; }

  float boost(const Slot& s, int32_t word) const {
    return wfst::boost_lookup(s.boost_keys.data(), s.boost_values.data(), static_cast<int32_t>(s.boost_keys.size()),
                              word);
  }
  float arc_score(const Slot& s, int32_t a, float acoustic) const {
    float ll = acoustic + wt_[a];
    if (!s.boost_keys.empty())
      for (int32_t k = as_[a]; k < as_[a + 1]; ++k) ll = ll + boost(s, aw_[k]);
    return ll;
  }
  int32_t link_of(Slot& s, int32_t prev, int32_t arc, int32_t frame) const {
    if (!has_words(arc)) return prev;
    s.links.push_back({prev, arc, frame});
    ++s.links_created;
    return static_cast<int32_t>(s.links.size() - 1);
  }

  // Epsilon closure of `tokens` (wfst_cpu::jacobi_epsilon_closure, the offline reference's); `slot_of_state` maps the
  // states of `tokens` to their indices on entry and covers every token on exit.
  void epsilon_closure(Slot& s, std::vector<Token>& tokens, float cutoff, int32_t frame,
                       std::vector<int32_t>& slot_of_state) const {
    const wfst_cpu::ClosureStats st = wfst_cpu::jacobi_epsilon_closure(
        tokens, cutoff, eps_iterations_, eb_, fb_, dst_, slot_of_state,
        [&](int32_t a) { return arc_score(s, a, 0.0f); }, [](const Token& tok) { return tok.link; },
        [&](Token& tok, int32_t prev, int32_t arc) { tok.link = link_of(s, prev, arc, frame); });
    if (!st.converged) s.overflow |= wfst::kOverflowEpsilon;
  }

  // One step of stream `s`: an emitting step reading `row` (V log-probs), or the final step. Returns whether
  // the final step redirected (allow_partial without FINAL arcs). `slot_of_state`: all -1 on entry and exit.
  template <typename scalar_t>
  bool step(Slot& s, const scalar_t* row, bool final_step, std::vector<int32_t>& slot_of_state) const {
    bool redirect = false;
    if (final_step && allow_partial_) {
      redirect = true;
      for (const Token& tok : s.front)
        if (fb_[tok.state] < rs_[tok.state + 1]) redirect = false;
    }
    const int64_t active = static_cast<int64_t>(s.front.size());
    // online: an emitting step never knows the end; the final step is the last of t + 1 steps
    const int32_t t = static_cast<int32_t>(std::min<int64_t>(s.frames, wfst::kUnknownFrames - 16));
    s.beam = wfst::k2_dynamic_beam(s.beam, search_beam_, min_active_, max_active_, active, t,
                                   final_step ? t + 1 : wfst::kUnknownFrames);
    const int32_t frame = static_cast<int32_t>(final_step ? std::max<int64_t>(0, s.frames - 1) : s.frames);
    auto arc_range = [&](int32_t st, int32_t& begin, int32_t& end) {
      wfst::step_arc_range(rs_, eb_, fb_, st, final_step, redirect, begin, end);
    };
    auto acoustic = [&](int32_t a) -> float {
      if (final_step) return 0.0f;
      return static_cast<float>(row[il_[a]]) * acoustic_scale_;
    };
    float best = kNegInf;
    for (const Token& tok : s.front) {
      int32_t b, e;
      arc_range(tok.state, b, e);
      for (int32_t a = b; a < e; ++a) best = std::max(best, tok.score + arc_score(s, a, acoustic(a)));
    }
    const float cutoff = best - s.beam;
    std::vector<Token> next;
    std::vector<int32_t> pending_arc, pending_prev;
    for (const Token& tok : s.front) {
      int32_t b, e;
      arc_range(tok.state, b, e);
      for (int32_t a = b; a < e; ++a) {
        float end = tok.score + arc_score(s, a, acoustic(a));
        if (!(end > cutoff)) continue;
        int32_t d = redirect ? final_ : dst_[a];
        int32_t j = slot_of_state[d];
        if (j < 0) {
          j = static_cast<int32_t>(next.size());
          slot_of_state[d] = j;
          next.push_back({d, end, -1});
          pending_arc.push_back(a);
          pending_prev.push_back(tok.link);
        } else if (end > next[j].score) {
          next[j].score = end;
          pending_arc[j] = a;
          pending_prev[j] = tok.link;
        }
      }
    }
    for (size_t j = 0; j < next.size(); ++j) next[j].link = link_of(s, pending_prev[j], pending_arc[j], frame);
    if (has_eps_ && !final_step) epsilon_closure(s, next, cutoff, frame, slot_of_state);
    s.peak_links = std::max<int64_t>(s.peak_links, s.links.size());
    for (const Token& tok : next) slot_of_state[tok.state] = -1;
    s.front.swap(next);
    if (!final_step) {
      ++s.frames;
      if (static_cast<int64_t>(s.links.size()) >= s.compact_at) {
        const int64_t live = compact_and_drain(s);
        s.compact_at = std::max(compact_min_, 2 * live);
      }
    }
    return redirect;
  }

  // Drains the converged prefix into the slot's transcript and drops the links no frontier token reaches;
  // the survivors are renumbered (prev < index is kept). Returns the links kept.
  int64_t compact_and_drain(Slot& s) const {
    // The latest link every frontier token's chain contains (links are stored after their predecessors, so the
    // larger of two links can never be the other's ancestor: walk it back until the two meet).
    int32_t common = s.front.empty() ? -1 : s.front[0].link;
    for (size_t i = 1; i < s.front.size() && common >= 0; ++i) {
      int32_t w = s.front[i].link;
      while (w != common && w >= 0 && common >= 0) {
        if (w > common) w = s.links[w].prev;
        else common = s.links[common].prev;
      }
      if (w < 0) common = -1;
    }
    std::vector<int32_t> mark(s.links.size(), -1);  // -1 unreachable, -2 reachable, -3 drained
    if (common >= 0) {
      std::vector<int32_t> chain;
      for (int32_t w = common; w >= 0; w = s.links[w].prev) chain.push_back(w);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const int32_t a = s.links[*it].arc;
        for (int32_t k = as_[a]; k < as_[a + 1]; ++k) {
          s.drained_words.push_back(aw_[k]);
          s.drained_frames.push_back(s.links[*it].frame);
        }
        mark[*it] = -3;
      }
    }
    for (const Token& tok : s.front)
      for (int32_t w = tok.link; w >= 0 && mark[w] == -1; w = s.links[w].prev) mark[w] = -2;
    int32_t kept = 0;
    std::vector<int32_t> renum(s.links.size(), -1);  // drained and dropped links map to -1
    for (size_t i = 0; i < s.links.size(); ++i) {
      if (mark[i] != -2) continue;
      const int32_t prev = s.links[i].prev;
      s.links[kept] = {prev >= 0 ? renum[prev] : -1, s.links[i].arc, s.links[i].frame};
      renum[i] = kept++;
    }
    s.links.resize(static_cast<size_t>(kept));
    for (Token& tok : s.front)
      if (tok.link >= 0) tok.link = renum[tok.link];
    return kept;
  }

  at::Tensor row_splits_, eps_begin_, final_begin_, dest_, ilabel_, aux_splits_, aux_words_, weight_;
  const int32_t *rs_, *eb_, *fb_, *dst_, *il_, *as_, *aw_;
  const float* wt_;
  int64_t num_states_ = 0;
  int32_t start_ = 0, final_ = 0;
  float search_beam_ = 0, min_active_ = 0, max_active_ = 0, acoustic_scale_ = 1;
  bool allow_partial_ = true, has_eps_ = false;
  int32_t eps_iterations_ = 0, max_ilabel_ = -1;
  int64_t compact_min_ = 4096;
  std::vector<Slot> slots_;
};

}  // namespace beamdec

#ifdef BEAMDEC_WITH_WFST
// Registered here (not in bindings.cpp) so the streaming decoder stays one file pair; a custom class, not an
// op: the state is an object the Python decoder owns (STYLE.md: no integer handles through schemas).
TORCH_LIBRARY_FRAGMENT(beamdec, m) {
  m.class_<beamdec::WfstStreamCpu>("WfstStreamCpu")
      .def(torch::init<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                       int64_t, int64_t, double, int64_t, int64_t, bool, double, int64_t, int64_t, int64_t>())
      .def("open", &beamdec::WfstStreamCpu::open)
      .def("close", &beamdec::WfstStreamCpu::close)
      .def("advance", &beamdec::WfstStreamCpu::advance)
      .def("partial", &beamdec::WfstStreamCpu::partial)
      .def("finalize", &beamdec::WfstStreamCpu::finalize)
      .def("stats", &beamdec::WfstStreamCpu::stats)
      .def("max_streams", &beamdec::WfstStreamCpu::max_streams);
}
#endif
