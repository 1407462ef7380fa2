// CPU reference of the WFST lattice mode (decoders/lattice.py is the Python API): lattice generation with k2
// `intersect_dense_pruned` output-beam semantics, and Kaldi's minimum-Bayes-risk decoding over the lattice.
//
// Lattice generation (wfst_lattice):
//  * The forward pass is the 1-best search of wfst_cpu.cpp step for step (same candidates, same float
//    arithmetic, same k2 dynamic beam, same epsilon closure in Jacobi passes), so every token's score equals
//    the 1-best decoder's token score bit for bit; instead of word links it keeps every token of every frame
//    and every admitted arc. Frame f's tokens are the states reached after f emitting steps (frame 0: the start
//    state and its epsilon closure; frame len + 1: the final state only).
//  * The lattice arcs before pruning: every arc admitted by a step (end > cutoff), i.e. emitting arcs
//    frame f -> f + 1, FINAL (or allow_partial redirected) arcs frame len -> len + 1, and the epsilon arcs of
//    a frame's closure whose source token's final score + arc > the step's cutoff and whose destination is in
//    the frame (with a converged closure that is exactly the set the passes admitted).
//  * Backward output-beam prune (k2 MultiGraphDenseIntersectPruned::PruneTimeRange, whole utterance): the final
//    state's backward score is -forward(final); going back frame by frame, an arc is kept iff
//    forward(src) + (arc + backward(dst)) >= -output_beam, and a state's backward score is the max of
//    arc + backward(dst) over its KEPT arcs. So a lattice keeps exactly the arcs with
//    forward + arc + backward >= best - output_beam. (k2 additionally prunes window-loosely during the forward
//    pass on long inputs; its final pass is this one.) Epsilon arcs within a frame are handled in decreasing
//    epsilon level of their source (eps_level: longest epsilon path reaching the state in the graph; an epsilon
//    arc s -> d has level(d) > level(s)), which is a reverse topological order. The graph's epsilon subgraph
//    must be acyclic (decoders/lattice.py checks), else a lattice could hold cycles.
//  * Output per utterance: the kept states sorted by (frame, eps level, creation order) -- a topological order
//    with the start state first and the final state last, as k2 wants -- and the kept arcs sorted by source.
//    An utterance with no surviving path has an empty lattice (no states), flags without kFlagHasPath.
//
// MBR (wfst_lattice_mbr): Kaldi's MinimumBayesRisk (kaldi/src/lat/sausages.cc; Xu, Povey, Mangu, Zhu 2011,
// "Minimum Bayes risk decoding and system combination based on a recursion for edit distance"), run on the
// lattice as it is (arcs carry 0 or one word label, 0 = epsilon), log semiring, the lattice's scores as
// log-likelihoods: start from the lattice's Viterbi word sequence, alternate AccStats (edit-distance
// forward-backward giving the sausage posteriors gamma(q, w) and times) and the hypothesis update
// R[q] = argmax_w gamma(q, w) until no position changes (at most 100 iterations); the confidences are the
// gamma of the chosen words and the times Kaldi's averaged bin times tau_b / tau_e (frames). Difference from
// Kaldi/Riva's pipeline, on purpose: they run MBR on a lattice determinized to one best alignment per word
// sequence; this runs it on the undeterminized lattice, so a word sequence's probability sums over its
// alignments (the lattice's true word posterior).
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/types.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "wfst_cpu_closure.h"
#include "wfst_defs.h"
#include "wfst_lattice_host.h"
#include "wfst_lattice_ops.h"
#include "wfst_ops.h"

namespace beamdec {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kNegInfD = -std::numeric_limits<double>::infinity();

struct LGraph {
  const int32_t* row_splits;
  const int32_t* eps_begin;
  const int32_t* final_begin;
  const int32_t* dest;
  const int32_t* ilabel;
  const int32_t* aux_splits;
  const int32_t* aux_words;
  const float* weight;
  const int32_t* eps_level;
  int32_t num_states;
  int32_t start_state;
  int32_t final_state;
  bool has_eps;
};

struct LOptions {
  float search_beam;
  float min_active;
  float max_active;
  bool allow_partial;
  float acoustic_scale;
  int32_t eps_iterations;
  float output_beam;
};

struct LBoosts {
  const int32_t* keys;
  const float* values;
  int32_t capacity;
  float operator()(int32_t word) const { return wfst::boost_lookup(keys, values, capacity, word); }
};

struct Tok {
  int32_t state;
  float score;
};

using lattice::RawArc;
using lattice::RawLattice;
using lattice::UttLattice;

template <typename scalar_t>
void lattice_forward(const LGraph& g, const LOptions& opt, const scalar_t* lp, int64_t stride_t, int32_t len,
                     const LBoosts& boost, std::vector<int32_t>& slot_of_state, RawLattice& out) {
  std::vector<int32_t>& tok_state = out.tok_state;
  std::vector<float>& tok_score = out.tok_score;
  std::vector<int64_t>& frame_begin = out.frame_begin;  // tokens of frame f: [frame_begin[f], frame_begin[f + 1])
  std::vector<RawArc>& raw = out.arcs;
  frame_begin.assign(1, 0);
  auto arc_score = [&](int32_t a, float acoustic) {  // same expression as wfst_cpu.cpp
    float arc_ll = acoustic + g.weight[a];
    if (boost.capacity > 0)
      for (int32_t k = g.aux_splits[a]; k < g.aux_splits[a + 1]; ++k) arc_ll = arc_ll + boost(g.aux_words[k]);
    return arc_ll;
  };

  // The epsilon closure of wfst_cpu.cpp without back-pointers (same passes, same scores).
  auto epsilon_closure = [&](std::vector<Tok>& tokens, float cutoff) {
    const wfst_cpu::ClosureStats st = wfst_cpu::jacobi_epsilon_closure(
        tokens, cutoff, opt.eps_iterations, g.eps_begin, g.final_begin, g.dest, slot_of_state,
        [&](int32_t a) { return arc_score(a, 0.0f); }, [](const Tok&) { return -1; }, [](Tok&, int32_t, int32_t) {});
    if (!st.converged) out.overflow |= wfst::kOverflowEpsilon;
  };
  // Epsilon arcs of a closed frame (tokens at ids base + i; slot_of_state still maps the frame).
  auto record_eps_arcs = [&](const std::vector<Tok>& tokens, int32_t base, float cutoff) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const Tok tok = tokens[i];
      for (int32_t a = g.eps_begin[tok.state]; a < g.final_begin[tok.state]; ++a) {
        const float ll = arc_score(a, 0.0f);
        if (!(tok.score + ll > cutoff)) continue;
        const int32_t j = slot_of_state[g.dest[a]];
        if (j >= 0) raw.push_back({base + static_cast<int32_t>(i), base + j, a, ll});
      }
    }
  };
  auto commit = [&](const std::vector<Tok>& tokens) {
    for (const Tok& t : tokens) {
      tok_state.push_back(t.state);
      tok_score.push_back(t.score);
    }
    frame_begin.push_back(static_cast<int64_t>(tok_state.size()));
  };

  std::vector<Tok> front{{g.start_state, 0.0f}}, next;
  if (g.has_eps) {
    slot_of_state[g.start_state] = 0;
    epsilon_closure(front, 0.0f - opt.search_beam);
    record_eps_arcs(front, 0, 0.0f - opt.search_beam);
    for (const Tok& tok : front) slot_of_state[tok.state] = -1;
  }
  commit(front);
  int32_t front_base = 0;
  struct Emit {
    int32_t src;
    int32_t dst_local;
    int32_t arc;
    float ll;
  };
  std::vector<Emit> emits;
  float beam = opt.search_beam;
  const int32_t final_t = len + 1;
  bool redirected = false;
  for (int32_t t = 0; t <= len; ++t) {
    const bool final_step = (t == len);
    bool redirect = false;
    if (final_step && opt.allow_partial) {
      redirect = true;
      for (const Tok& tok : front)
        if (g.final_begin[tok.state] < g.row_splits[tok.state + 1]) redirect = false;
    }
    const int64_t active = static_cast<int64_t>(front.size());
    beam = wfst::k2_dynamic_beam(beam, opt.search_beam, opt.min_active, opt.max_active, active, t, final_t);
    auto arc_range = [&](int32_t s, int32_t& begin, int32_t& end) {
      wfst::step_arc_range(g.row_splits, g.eps_begin, g.final_begin, s, final_step, redirect, begin, end);
    };
    const scalar_t* row = lp + static_cast<int64_t>(final_step ? 0 : t) * stride_t;
    auto acoustic = [&](int32_t a) -> float {
      if (final_step) return 0.0f;
      return static_cast<float>(row[g.ilabel[a]]) * opt.acoustic_scale;
    };
    float best = kNegInf;
    for (const Tok& tok : front) {
      int32_t b, e;
      arc_range(tok.state, b, e);
      for (int32_t a = b; a < e; ++a) best = std::max(best, tok.score + arc_score(a, acoustic(a)));
    }
    const float cutoff = best - beam;
    next.clear();
    emits.clear();
    for (size_t i = 0; i < front.size(); ++i) {
      const Tok tok = front[i];
      int32_t b, e;
      arc_range(tok.state, b, e);
      for (int32_t a = b; a < e; ++a) {
        const float ll = arc_score(a, acoustic(a));
        const float end = tok.score + ll;
        if (!(end > cutoff)) continue;
        const int32_t d = redirect ? g.final_state : g.dest[a];
        int32_t j = slot_of_state[d];
        if (j < 0) {
          j = static_cast<int32_t>(next.size());
          slot_of_state[d] = j;
          next.push_back({d, end});
        } else if (end > next[j].score) {
          next[j].score = end;
        }
        emits.push_back({front_base + static_cast<int32_t>(i), j, a, ll});
      }
    }
    if (g.has_eps && !final_step) epsilon_closure(next, cutoff);
    const int32_t next_base = static_cast<int32_t>(tok_state.size());
    for (const Emit& e : emits) raw.push_back({e.src, next_base + e.dst_local, e.arc, e.ll});
    if (g.has_eps && !final_step) record_eps_arcs(next, next_base, cutoff);
    commit(next);
    for (const Tok& tok : next) slot_of_state[tok.state] = -1;
    front.swap(next);
    front_base = next_base;
    redirected = redirect;
  }
  out.redirected = redirected;
}

// ---------------------------------------------------------------------------------------------------------
// Kaldi's MinimumBayesRisk over one lattice (see the header comment). Nodes are 1-based as in Kaldi.
struct MbrResult {
  std::vector<int32_t> words;
  std::vector<std::pair<float, float>> times;
  std::vector<float> confidences;
  double total = kNegInfD;
};

class Mbr {
 public:
  struct Arc {
    int32_t word, start_node, end_node;
    double loglike;
  };

  Mbr(int32_t num_states, std::vector<Arc> arcs, std::vector<double> state_times)
      : N_(num_states), arcs_(std::move(arcs)), state_times_(std::move(state_times)) {
    pre_.resize(static_cast<size_t>(N_) + 1);
    for (size_t i = 0; i < arcs_.size(); ++i) pre_[arcs_[i].end_node].push_back(static_cast<int32_t>(i));
    // the lattice's words (epsilon first), densely numbered: the sausage statistics are a (position x word) array
    words_.push_back(0);
    for (const Arc& a : arcs_) words_.push_back(a.word);
    std::sort(words_.begin(), words_.end());
    words_.erase(std::unique(words_.begin(), words_.end()), words_.end());
    arc_word_.resize(arcs_.size());
    for (size_t i = 0; i < arcs_.size(); ++i)
      arc_word_[i] =
          static_cast<int32_t>(std::lower_bound(words_.begin(), words_.end(), arcs_[i].word) - words_.begin());
    // alpha (log forward) and each arc's share of its end node's forward mass, exp(alpha(s) + ll - alpha(n)): they
    // do not depend on the hypothesis, so they are computed once here, where Kaldi's EditDistance recomputes them in
    // every iteration (and AccStats the shares again) -- the same expressions, so the same doubles
    alpha_.assign(static_cast<size_t>(N_) + 1, kNegInfD);
    if (N_ >= 1) alpha_[1] = 0.0;
    for (int32_t n = 2; n <= N_; ++n) {
      double alpha_n = kNegInfD;
      for (int32_t i : pre_[n]) alpha_n = LogAdd(alpha_n, alpha_[arcs_[i].start_node] + arcs_[i].loglike);
      alpha_[n] = alpha_n;
    }
    share_.resize(arcs_.size());
    for (int32_t n = 2; n <= N_; ++n)
      for (int32_t i : pre_[n]) share_[i] = std::exp(alpha_[arcs_[i].start_node] + arcs_[i].loglike - alpha_[n]);
  }

  static double LogAdd(double a, double b) {
    if (a < b) std::swap(a, b);
    if (b == kNegInfD) return a;
    return a + std::log1p(std::exp(b - a));
  }

  // alpha (forward log-probabilities, node-indexed) and the Viterbi word sequence.
  std::vector<int32_t> ViterbiWords() const {
    std::vector<double> best(static_cast<size_t>(N_) + 1, kNegInfD);
    std::vector<int32_t> back(static_cast<size_t>(N_) + 1, -1);
    best[1] = 0.0;
    for (int32_t n = 2; n <= N_; ++n)
      for (int32_t i : pre_[n]) {
        const double v = best[arcs_[i].start_node] + arcs_[i].loglike;
        if (v > best[n]) {
          best[n] = v;
          back[n] = i;
        }
      }
    std::vector<int32_t> words;
    for (int32_t n = N_; n > 1 && back[n] >= 0; n = arcs_[back[n]].start_node)
      if (arcs_[back[n]].word != 0) words.push_back(arcs_[back[n]].word);
    std::reverse(words.begin(), words.end());
    return words;
  }

  MbrResult Decode() {
    MbrResult res;
    R_ = ViterbiWords();
    for (size_t counter = 0;; ++counter) {
      NormalizeEps(&R_);
      AccStats();
      double delta_Q = 0.0;
      one_best_times_.clear();
      one_best_confidences_.clear();
      for (size_t q = 0; q < R_.size(); ++q) {
        const auto& this_gamma = gamma_[q];
        double old_gamma = 0, new_gamma = this_gamma[0].second;
        const int32_t rq = R_[q], rhat = this_gamma[0].first;
        for (const auto& wg : this_gamma)
          if (wg.first == rq) old_gamma = wg.second;
        delta_Q += (old_gamma - new_gamma);
        R_[q] = rhat;
        if (R_[q] != 0) {
          one_best_times_.push_back(times_[q]);
          float confidence = 0.0f;
          for (const auto& wg : this_gamma)
            if (wg.first == R_[q]) confidence = wg.second;
          one_best_confidences_.push_back(confidence);
        }
      }
      if (delta_Q == 0 || counter > 100) break;
    }
    RemoveEps(&R_);
    res.words = R_;
    res.times = one_best_times_;
    res.confidences = one_best_confidences_;
    res.total = alpha_.empty() ? kNegInfD : alpha_[N_];
    return res;
  }

  const std::vector<double>& alpha() const { return alpha_; }

 private:
  static void RemoveEps(std::vector<int32_t>* v) { v->erase(std::remove(v->begin(), v->end(), 0), v->end()); }
  static void NormalizeEps(std::vector<int32_t>* v) {  // [0, w1, 0, w2, ..., wn, 0]
    RemoveEps(v);
    std::vector<int32_t> out(1 + v->size() * 2, 0);
    for (size_t i = 0; i < v->size(); ++i) out[2 * i + 1] = (*v)[i];
    v->swap(out);
  }
  static double l(int32_t a, int32_t b, bool penalize = false) {
    if (a == b) return 0.0;
    return penalize ? 1.0 + 1.0e-05 : 1.0;  // Kaldi's delta(): prefer not inserting epsilon-matched words
  }
  int32_t r(int32_t q) const { return R_[q - 1]; }
  // l(0, r(q)) for q = 1..Q (index 0 unused): the cost of a reference symbol against no hypothesis word
  std::vector<double> insertion_costs(int32_t Q) const {
    std::vector<double> ins(static_cast<size_t>(Q) + 1, 0.0);
    for (int32_t q = 1; q <= Q; ++q) ins[q] = l(0, r(q));
    return ins;
  }

  // Kaldi MinimumBayesRisk::EditDistance: alpha (log forward) and alpha_dash (expected edit distance of each
  // node's prefixes to R's first q symbols). Returns the expected loss. Also records, per arc and position q, which
  // of the three edit operations attains the minimum (b_arc_: 1 substitution/match, 2 deletion, 3 insertion; the
  // comparisons of Kaldi's AccStats, which recomputes them), so AccStats' backward pass reads them instead.
  double EditDistance(int32_t Q, std::vector<double>& alpha_dash) {
    const int32_t W = Q + 1;
    alpha_dash.assign(static_cast<size_t>(N_ + 1) * W, 0.0);
    alpha_dash[1 * W + 0] = 0.0;
    for (int32_t q = 1; q <= Q; ++q) alpha_dash[1 * W + q] = alpha_dash[1 * W + q - 1] + l(0, r(q));
    const std::vector<double> ins_v = insertion_costs(Q);
    b_arc_.resize(arcs_.size() * static_cast<size_t>(W));
    // restrict: the rows of a start node and an end node never overlap (start < end), and the op codes are a
    // separate array -- without it every char store of an op forces the doubles and R to be read again
    const double* __restrict__ ins = ins_v.data();
    const int32_t* __restrict__ R = R_.data();  // r(q) = R[q - 1]
    for (int32_t n = 2; n <= N_; ++n) {
      double* __restrict__ dst = alpha_dash.data() + static_cast<size_t>(n) * W;
      for (int32_t i : pre_[n]) {
        const Arc& arc = arcs_[i];
        const int32_t s_a = arc.start_node, w_a = arc.word;
        const double post = share_[i];
        const double* __restrict__ src = alpha_dash.data() + static_cast<size_t>(s_a) * W;
        char* __restrict__ b = b_arc_.data() + static_cast<size_t>(i) * W;
        const double del = l(w_a, 0, true);  // the arc's word against no reference word
        double prev = src[0] + del;
        dst[0] += post * prev;
        for (int32_t q = 1; q <= Q; ++q) {
          const double a1 = src[q - 1] + l(w_a, R[q - 1]), a2 = src[q] + del, a3 = prev + ins[q];
          // the minimum of the three, ties to the earlier (a1, then a2), as selects rather than branches
          const bool c12 = a1 <= a2;
          const double m12 = c12 ? a1 : a2;
          const bool c3 = m12 <= a3;
          prev = c3 ? m12 : a3;
          b[q] = c3 ? (c12 ? 1 : 2) : 3;
          dst[q] += post * prev;
        }
      }
    }
    return alpha_dash[N_ * W + Q];
  }

  // Kaldi MinimumBayesRisk::AccStats: gamma_ (sausage posteriors per position of R) and times_.
  void AccStats() {
    const int32_t Q = static_cast<int32_t>(R_.size()), W = Q + 1;
    std::vector<double> alpha_dash, beta_dash(static_cast<size_t>(N_ + 1) * W, 0.0), beta_dash_arc(W);
    // gamma(q, w) over the lattice's words (Kaldi: a map per position; the same sums in the same order, and the
    // entries a map would hold are the touched ones, read back in increasing word id)
    const size_t K = words_.size();
    std::vector<double> gamma(static_cast<size_t>(W) * K, 0.0);
    std::vector<char> touched(static_cast<size_t>(W) * K, 0);
    auto acc = [&](int32_t q, int32_t wi, double x) {
      const size_t j = static_cast<size_t>(q) * K + static_cast<size_t>(wi);
      gamma[j] += x;
      touched[j] = 1;
    };
    std::vector<double> tau_b(W, 0.0), tau_e(W, 0.0);
    EditDistance(Q, alpha_dash);
    beta_dash[N_ * W + Q] = 1.0;
    // the backward sweep over restrict pointers: rows n (read) and s_a < n (written) never overlap, nor do the
    // statistics arrays; the same additions in the same order as through the vectors
    double* __restrict__ bda = beta_dash_arc.data();
    double* __restrict__ gam = gamma.data();
    char* __restrict__ tch = touched.data();
    double* __restrict__ tb = tau_b.data();
    double* __restrict__ te = tau_e.data();
    for (int32_t n = N_; n >= 2; --n) {
      const double* __restrict__ bn = beta_dash.data() + static_cast<size_t>(n) * W;
      const double t_n = state_times_[n];
      for (int32_t i : pre_[n]) {
        const Arc& arc = arcs_[i];
        const int32_t s_a = arc.start_node;
        const size_t wi_a = static_cast<size_t>(arc_word_[i]);
        const char* __restrict__ b_arc = b_arc_.data() + static_cast<size_t>(i) * W;  // recorded by EditDistance
        double* __restrict__ bs = beta_dash.data() + static_cast<size_t>(s_a) * W;
        const double t_s = state_times_[s_a];
        std::fill(bda, bda + W, 0.0);
        const double post = share_[i];
        for (int32_t q = Q; q >= 1; --q) {
          const double x = (bda[q] += post * bn[q]);
          const size_t j = static_cast<size_t>(q) * K;
          switch (b_arc[q]) {
            case 1:
              bs[q - 1] += x;
              gam[j + wi_a] += x;
              tch[j + wi_a] = 1;
              tb[q] += t_s * x;
              te[q] += t_n * x;
              break;
            case 2:
              bs[q] += x;
              break;
            default:  // 3
              bda[q - 1] += x;
              gam[j] += x;
              tch[j] = 1;
              tb[q] += t_n * x;
              te[q] += t_n * x;
              break;
          }
        }
        bda[0] += post * bn[0];
        bs[0] += bda[0];
      }
    }
    std::fill(beta_dash_arc.begin(), beta_dash_arc.end(), 0.0);
    for (int32_t q = Q; q >= 1; --q) {
      beta_dash_arc[q] += beta_dash[1 * W + q];
      beta_dash_arc[q - 1] += beta_dash[1 * W + q];
      acc(q, 0, beta_dash[1 * W + q]);
      tau_b[q] += state_times_[1] * beta_dash[1 * W + q];
      tau_e[q] += state_times_[1] * beta_dash[1 * W + q];
    }
    gamma_.assign(static_cast<size_t>(Q), {});
    for (int32_t q = 1; q <= Q; ++q) {
      for (size_t k = 0; k < K; ++k)
        if (touched[static_cast<size_t>(q) * K + k])
          gamma_[q - 1].push_back({words_[k], static_cast<float>(gamma[static_cast<size_t>(q) * K + k])});
      if (gamma_[q - 1].empty()) gamma_[q - 1].push_back({0, 0.0f});
      // largest posterior first (ties: lower word id, epsilon first: std::map order, stable sort)
      std::stable_sort(gamma_[q - 1].begin(), gamma_[q - 1].end(),
                       [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
                         return a.second > b.second;
                       });
    }
    times_.assign(static_cast<size_t>(Q), {0.0f, 0.0f});
    for (int32_t q = 1; q <= Q; ++q) {
      times_[q - 1] = {static_cast<float>(tau_b[q]), static_cast<float>(tau_e[q])};
      if (q > 1 && times_[q - 2].second > times_[q - 1].first) {  // Kaldi: average overlapping bin edges
        const float avg = 0.5f * (times_[q - 2].second + times_[q - 1].first);
        times_[q - 2].second = times_[q - 1].first = avg;
      }
    }
  }

  int32_t N_;
  std::vector<Arc> arcs_;
  std::vector<double> state_times_;  // 1-based
  std::vector<std::vector<int32_t>> pre_;
  std::vector<int32_t> words_;     // distinct word labels of the arcs, sorted, 0 first
  std::vector<int32_t> arc_word_;  // per arc: its word's index in words_
  std::vector<double> share_;      // per arc: exp(alpha(start) + loglike - alpha(end)), fixed for the lattice
  std::vector<int32_t> R_;
  std::vector<double> alpha_;
  std::vector<char> b_arc_;  // per arc x position: the edit operation EditDistance chose (AccStats reads it)
  std::vector<std::vector<std::pair<int32_t, float>>> gamma_;
  std::vector<std::pair<float, float>> times_;
  std::vector<std::pair<float, float>> one_best_times_;
  std::vector<float> one_best_confidences_;
};

}  // namespace

namespace lattice {

void prune_lattice(const int32_t* eps_level, int32_t final_state, float output_beam, const RawLattice& raw,
                   UttLattice& out) {
  const std::vector<int32_t>& tok_state = raw.tok_state;
  const std::vector<float>& tok_score = raw.tok_score;
  const int32_t num_frames = static_cast<int32_t>(raw.frame_begin.size()) - 1;
  const int64_t ntok = static_cast<int64_t>(tok_state.size());
  out.overflow = raw.overflow;
  out.arcs_before = static_cast<int64_t>(raw.arcs.size());
  out.tokens_before = ntok;
  if (num_frames < 1) return;
  std::vector<int32_t> frame_of(static_cast<size_t>(ntok));
  for (int32_t f = 0; f < num_frames; ++f)
    for (int64_t i = raw.frame_begin[f]; i < raw.frame_begin[f + 1]; ++i) frame_of[i] = f;
  int32_t final_tok = -1;
  for (int64_t i = raw.frame_begin[num_frames - 1]; i < raw.frame_begin[num_frames]; ++i)
    if (tok_state[i] == final_state) final_tok = static_cast<int32_t>(i);
  if (final_tok < 0) return;  // no path: empty lattice
  out.score = tok_score[final_tok];
  out.flags = wfst::kFlagHasPath | (raw.redirected ? 0 : wfst::kFlagReachedFinal);

  // Arcs by source frame (counting sort), emitting ones (into the next frame) before epsilon ones.
  const size_t A = raw.arcs.size();
  std::vector<int64_t> begin(static_cast<size_t>(2 * num_frames + 1), 0), order(A);
  auto bucket = [&](const RawArc& r) {
    const int32_t f = frame_of[r.src];
    return 2 * f + (frame_of[r.dst] == f ? 1 : 0);
  };
  for (const RawArc& r : raw.arcs) ++begin[bucket(r) + 1];
  for (size_t k = 1; k < begin.size(); ++k) begin[k] += begin[k - 1];
  {
    std::vector<int64_t> fill(begin.begin(), begin.end() - 1);
    for (size_t k = 0; k < A; ++k) order[fill[bucket(raw.arcs[k])]++] = static_cast<int64_t>(k);
  }
  // Backward prune (k2 PruneTimeRange over the whole utterance).
  std::vector<float> bwd(static_cast<size_t>(ntok), kNegInf);
  std::vector<char> keep(A, 0);
  bwd[final_tok] = -tok_score[final_tok];
  const float neg_beam = -output_beam;
  auto visit = [&](int64_t k) {
    const RawArc& r = raw.arcs[k];
    if (bwd[r.dst] == kNegInf) return;
    const float ab = r.ll + bwd[r.dst];  // k2: backward_loglike at the beginning of the arc
    if (ab + tok_score[r.src] >= neg_beam) {
      keep[k] = 1;
      bwd[r.src] = std::max(bwd[r.src], ab);
    }
  };
  for (int32_t f = num_frames - 1; f >= 0; --f) {
    for (int64_t k = begin[2 * f]; k < begin[2 * f + 1]; ++k) visit(order[k]);
    // epsilon arcs of the frame: decreasing level of their source (destinations are final by then)
    std::stable_sort(order.begin() + begin[2 * f + 1], order.begin() + begin[2 * f + 2], [&](int64_t x, int64_t y) {
      return eps_level[tok_state[raw.arcs[x].src]] > eps_level[tok_state[raw.arcs[y].src]];
    });
    for (int64_t k = begin[2 * f + 1]; k < begin[2 * f + 2]; ++k) visit(order[k]);
  }

  // The kept states (touched by a kept arc) and arcs, then the canonical numbering (shared with the CUDA op).
  std::vector<int32_t> kept_id(static_cast<size_t>(ntok), -1);
  for (size_t k = 0; k < A; ++k)
    if (keep[k]) kept_id[raw.arcs[k].src] = kept_id[raw.arcs[k].dst] = 0;
  std::vector<KeptToken> toks;
  for (int64_t i = 0; i < ntok; ++i)
    if (kept_id[i] == 0) {
      kept_id[i] = static_cast<int32_t>(toks.size());
      toks.push_back({frame_of[i], tok_state[i], eps_level[tok_state[i]], tok_score[i], bwd[i]});
    }
  std::vector<KeptArc> arcs;
  for (size_t k = 0; k < A; ++k)
    if (keep[k]) {
      const RawArc& r = raw.arcs[k];
      arcs.push_back({kept_id[r.src], kept_id[r.dst], r.arc, r.ll});
    }
  canonical_lattice(toks, arcs, out);
}

void canonical_lattice(const std::vector<KeptToken>& toks, const std::vector<KeptArc>& arcs, UttLattice& out) {
  // States in canonical order: frame, epsilon level (a topological order of the frame's epsilon arcs), graph
  // state (unique within a frame) -- independent of the order the forward pass created them in.
  const size_t n = toks.size();
  std::vector<int32_t> order(n), new_id(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    const KeptToken &a = toks[x], &b = toks[y];
    if (a.frame != b.frame) return a.frame < b.frame;
    return a.level != b.level ? a.level < b.level : a.state < b.state;
  });
  out.state_frame.reserve(n);
  out.state_graph.reserve(n);
  out.state_fwd.reserve(n);
  out.state_bwd.reserve(n);
  for (size_t r = 0; r < n; ++r) {
    const KeptToken& t = toks[order[r]];
    new_id[order[r]] = static_cast<int32_t>(r);
    out.state_frame.push_back(t.frame);
    out.state_graph.push_back(t.state);
    out.state_fwd.push_back(t.fwd);
    out.state_bwd.push_back(t.bwd);
  }
  // Arcs by (source, graph arc): unique, since a token admits each of its graph arcs once per step.
  std::vector<int64_t> kept(arcs.size());
  std::iota(kept.begin(), kept.end(), 0);
  std::sort(kept.begin(), kept.end(), [&](int64_t x, int64_t y) {
    const int32_t sx = new_id[arcs[x].src], sy = new_id[arcs[y].src];
    return sx != sy ? sx < sy : arcs[x].arc < arcs[y].arc;
  });
  out.arc_src.reserve(arcs.size());
  out.arc_dst.reserve(arcs.size());
  out.arc_id.reserve(arcs.size());
  out.arc_ll.reserve(arcs.size());
  for (int64_t k : kept) {
    out.arc_src.push_back(new_id[arcs[k].src]);
    out.arc_dst.push_back(new_id[arcs[k].dst]);
    out.arc_id.push_back(arcs[k].arc);
    out.arc_ll.push_back(arcs[k].ll);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
pack_lattices(const std::vector<UttLattice>& lats) {
  const int64_t B = static_cast<int64_t>(lats.size());
  auto i64 = at::TensorOptions().dtype(at::kLong);
  auto i32 = at::TensorOptions().dtype(at::kInt);
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor scores = at::empty({B}, f32), header = at::zeros({B, 4}, i64);
  at::Tensor state_splits = at::zeros({B + 1}, i64), arc_splits = at::zeros({B + 1}, i64);
  int64_t S = 0, A = 0;
  for (int64_t b = 0; b < B; ++b) {
    const UttLattice& L = lats[b];
    scores.data_ptr<float>()[b] = L.score;
    int64_t* h = header.data_ptr<int64_t>() + 4 * b;
    h[0] = L.overflow;
    h[1] = L.flags;
    h[2] = L.arcs_before;
    h[3] = L.tokens_before;
    S += static_cast<int64_t>(L.state_frame.size());
    A += static_cast<int64_t>(L.arc_src.size());
    state_splits.data_ptr<int64_t>()[b + 1] = S;
    arc_splits.data_ptr<int64_t>()[b + 1] = A;
  }
  at::Tensor states = at::empty({S, 2}, i32), state_scores = at::empty({S, 2}, f32);
  at::Tensor arcs = at::empty({A, 3}, i32), arc_scores = at::empty({A}, f32);
  int32_t* st = states.data_ptr<int32_t>();
  float* ss = state_scores.data_ptr<float>();
  int32_t* ar = arcs.data_ptr<int32_t>();
  float* as = arc_scores.data_ptr<float>();
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const UttLattice& L = lats[b];
      const int64_t s0 = state_splits.data_ptr<int64_t>()[b], a0 = arc_splits.data_ptr<int64_t>()[b];
      for (size_t i = 0; i < L.state_frame.size(); ++i) {
        st[2 * (s0 + i)] = L.state_frame[i];
        st[2 * (s0 + i) + 1] = L.state_graph[i];
        ss[2 * (s0 + i)] = L.state_fwd[i];
        ss[2 * (s0 + i) + 1] = L.state_bwd[i];
      }
      for (size_t i = 0; i < L.arc_src.size(); ++i) {
        ar[3 * (a0 + i)] = L.arc_src[i];
        ar[3 * (a0 + i) + 1] = L.arc_dst[i];
        ar[3 * (a0 + i) + 2] = L.arc_id[i];
        as[a0 + i] = L.arc_ll[i];
      }
    }
  });
  return {scores, header, state_splits, states, state_scores, arc_splits, arcs, arc_scores};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
assemble_lattices(const at::Tensor& h_tok, const at::Tensor& h_arc, const at::Tensor& h_pos, const at::Tensor& h_lane,
                  const at::Tensor& h_res, const at::Tensor& g_tok_order, const at::Tensor& g_tok_begin,
                  const at::Tensor& g_local, const at::Tensor& g_arc_order, const at::Tensor& g_arc_begin) {
  auto table = [](const at::Tensor& t, int64_t cols, const char* name) {
    BEAMDEC_CHECK(t.is_cpu() && t.scalar_type() == at::kInt && t.dim() == 2 && t.size(1) == cols && t.is_contiguous(),
                  "wfst_lattice_assemble: ", name, " must be a contiguous CPU int32 tensor of shape (n, ", cols, ")");
  };
  table(h_tok, 7, "tokens");
  table(h_arc, 4, "arcs");
  table(h_pos, 2, "arc ends");
  table(h_lane, 4, "lane results");
  table(h_res, 2, "lane flags");
  const int64_t B = h_lane.size(0), K = h_tok.size(0), M = h_arc.size(0);
  BEAMDEC_CHECK(h_res.size(0) == B && h_pos.size(0) == M,
                "wfst_lattice_assemble: lane flags, arcs and arc ends disagree in size");
  const bool device_group = g_tok_begin.numel() > 0;
  if (device_group) {
    auto vec = [](const at::Tensor& t, int64_t n, const char* name) {
      BEAMDEC_CHECK(t.is_cpu() && t.scalar_type() == at::kLong && t.dim() == 1 && t.numel() == n && t.is_contiguous(),
                    "wfst_lattice_assemble: ", name, " must be a contiguous CPU int64 tensor of ", n, " entries");
    };
    vec(g_tok_order, K, "tok_order");
    vec(g_tok_begin, B + 1, "tok_begin");
    vec(g_local, K, "local");
    vec(g_arc_order, M, "arc_order");
    vec(g_arc_begin, B + 1, "arc_begin");
  } else {
    BEAMDEC_CHECK(g_tok_order.numel() == 0 && g_local.numel() == 0 && g_arc_order.numel() == 0 &&
                      g_arc_begin.numel() == 0,
                  "wfst_lattice_assemble: the device grouping's tensors come all five or none");
  }
  PhaseTimer timer("wfst_lattice_assemble");
  const int32_t* kt = h_tok.data_ptr<int32_t>();
  // the CUDA arena's arcs (wfst_lattice_launch.h LatticeArc): {src, dst (arena ids), arc | eps bit, ll bits}
  const int32_t* ka = h_arc.data_ptr<int32_t>();
  auto arc_src = [&](int64_t k) { return ka[4 * k]; };
  auto arc_dst = [&](int64_t k) { return ka[4 * k + 1]; };
  const int32_t* kp = h_pos.data_ptr<int32_t>();
  const int32_t* lo = h_lane.data_ptr<int32_t>();
  const int32_t* lr = h_res.data_ptr<int32_t>();
  // group by lane: tokens (kept in arena-id order) and arcs
  // the groups: computed by the host loop below, or read in place from the device grouping's tensors
  std::vector<int64_t> local_v, tok_begin_v, arc_begin_v, tok_order_v, arc_order_v;
  const int64_t *local, *tok_begin, *arc_begin, *tok_order, *arc_order;
  auto position = [&](int32_t p, int32_t id) -> int64_t {  // the device's position, checked against the arena id
    BEAMDEC_CHECK(p >= 0 && p < K && kt[7 * static_cast<int64_t>(p)] == id,
                  "wfst_lattice_assemble: a kept arc ends in an unkept token");
    return p;
  };
  std::vector<int64_t> arc_src_pos(static_cast<size_t>(M)), arc_dst_pos(static_cast<size_t>(M));
  if (device_group) {  // the orders came from the device; positions, orders and bounds are checked here
    at::parallel_for(0, M, 1 << 14, [&](int64_t a, int64_t e) {  // first: no arc without a kept source (K = 0)
      for (int64_t k = a; k < e; ++k) {
        arc_src_pos[k] = position(kp[2 * k], arc_src(k));
        arc_dst_pos[k] = position(kp[2 * k + 1], arc_dst(k));
      }
    });
    tok_order = g_tok_order.data_ptr<int64_t>();
    tok_begin = g_tok_begin.data_ptr<int64_t>();
    local = g_local.data_ptr<int64_t>();
    arc_order = g_arc_order.data_ptr<int64_t>();
    arc_begin = g_arc_begin.data_ptr<int64_t>();
    BEAMDEC_CHECK(tok_begin[0] == 0 && tok_begin[B] == K && arc_begin[0] == 0 && arc_begin[B] == M,
                  "wfst_lattice_assemble: the group bounds must run from 0 to the token / arc counts");
    for (int64_t b = 0; b < B; ++b)
      BEAMDEC_CHECK(tok_begin[b] <= tok_begin[b + 1] && arc_begin[b] <= arc_begin[b + 1],
                    "wfst_lattice_assemble: the group bounds must not decrease");
    timer.mark("group by lane (device sort)");
  } else {
    local_v.resize(static_cast<size_t>(K));
    tok_order_v.resize(static_cast<size_t>(K));
    arc_order_v.resize(static_cast<size_t>(M));
    tok_begin_v.assign(static_cast<size_t>(B) + 1, 0);
    arc_begin_v.assign(static_cast<size_t>(B) + 1, 0);
    for (int64_t p = 0; p < K; ++p) {
      const int32_t lane = kt[7 * p + 1];
      BEAMDEC_CHECK(lane >= 0 && lane < B, "wfst_lattice_assemble: a token's lane is outside the batch");
      local_v[p] = tok_begin_v[lane + 1]++;
    }
    for (int64_t b = 0; b < B; ++b) tok_begin_v[b + 1] += tok_begin_v[b];
    for (int64_t p = 0; p < K; ++p) tok_order_v[tok_begin_v[kt[7 * p + 1]] + local_v[p]] = p;
    std::vector<int32_t> arc_lane(static_cast<size_t>(M));
    for (int64_t k = 0; k < M; ++k) {
      arc_src_pos[k] = position(kp[2 * k], arc_src(k));
      arc_dst_pos[k] = position(kp[2 * k + 1], arc_dst(k));
      arc_lane[k] = kt[7 * arc_src_pos[k] + 1];
      ++arc_begin_v[arc_lane[k] + 1];
    }
    for (int64_t b = 0; b < B; ++b) arc_begin_v[b + 1] += arc_begin_v[b];
    std::vector<int64_t> fill(arc_begin_v.begin(), arc_begin_v.end() - 1);
    for (int64_t k = 0; k < M; ++k) arc_order_v[fill[arc_lane[k]]++] = k;
    local = local_v.data();
    tok_order = tok_order_v.data();
    arc_order = arc_order_v.data();
    tok_begin = tok_begin_v.data();
    arc_begin = arc_begin_v.data();
    timer.mark("group by lane (one thread)");
  }
  std::vector<UttLattice> lats(static_cast<size_t>(B));
  parallel_largest_first(B, [&](int64_t b) { return arc_begin[b + 1] - arc_begin[b]; }, [&](int64_t b) {
    UttLattice& L = lats[b];
    L.overflow = lr[2 * b];
    L.tokens_before = lo[4 * b + 1];
    L.arcs_before = lo[4 * b + 2];
    if (lo[4 * b] < 0) return;  // no path: empty lattice
    float score;
    std::memcpy(&score, lo + 4 * b + 3, sizeof(float));
    L.score = score;
    L.flags = wfst::kFlagHasPath | (lr[2 * b + 1] != 0 ? 0 : wfst::kFlagReachedFinal);
    const int64_t n_tok = tok_begin[b + 1] - tok_begin[b];
    std::vector<KeptToken> toks;
    toks.reserve(static_cast<size_t>(n_tok));
    for (int64_t r = tok_begin[b]; r < tok_begin[b + 1]; ++r) {
      const int64_t p = tok_order[r];
      BEAMDEC_CHECK(p >= 0 && p < K && kt[7 * p + 1] == b, "wfst_lattice_assemble: a token grouped under the wrong lane");
      const int32_t* t = kt + 7 * p;
      float fwd;
      std::memcpy(&fwd, t + 5, sizeof(float));
      toks.push_back({t[2], t[3], t[4], fwd, wfst::ordered_to_float(static_cast<uint32_t>(t[6]))});
    }
    std::vector<KeptArc> arcs_b;
    arcs_b.reserve(static_cast<size_t>(arc_begin[b + 1] - arc_begin[b]));
    for (int64_t r = arc_begin[b]; r < arc_begin[b + 1]; ++r) {
      const int64_t k = arc_order[r];
      BEAMDEC_CHECK(k >= 0 && k < M, "wfst_lattice_assemble: an arc order entry is out of range");
      const int64_t ls = local[arc_src_pos[k]], ld = local[arc_dst_pos[k]];
      BEAMDEC_CHECK(kt[7 * arc_src_pos[k] + 1] == b && kt[7 * arc_dst_pos[k] + 1] == b && ls >= 0 && ls < n_tok &&
                        ld >= 0 && ld < n_tok,
                    "wfst_lattice_assemble: an arc's ends are not tokens of its lane");
      float ll;
      std::memcpy(&ll, ka + 4 * k + 3, sizeof(float));
      arcs_b.push_back({static_cast<int32_t>(ls), static_cast<int32_t>(ld), ka[4 * k + 2] & ~wfst::kLatticeEpsArcBit, ll});
    }
    canonical_lattice(toks, arcs_b, L);
  });
  timer.mark("canonical numbering (parallel)");
  auto packed = pack_lattices(lats);
  timer.mark("pack");
  return packed;
}

}  // namespace lattice

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
wfst_lattice_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                 const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                 const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words,
                 const at::Tensor& weight, int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                 const at::Tensor& boost_values, double search_beam, int64_t min_active, int64_t max_active,
                 bool allow_partial, double acoustic_scale, int64_t eps_iterations, const at::Tensor& eps_level,
                 double output_beam, int64_t /*frontier_capacity*/, int64_t /*candidate_capacity*/,
                 int64_t /*token_capacity*/, int64_t /*arc_capacity*/) {
  wfst_check_inputs(log_probs, lengths, row_splits, eps_begin, final_begin, dest, ilabel, aux_splits, aux_words, weight,
                    start_state, final_state, boost_keys, boost_values, search_beam, min_active, max_active,
                    eps_iterations, 1);
  BEAMDEC_CHECK(log_probs.is_cpu(), "wfst_lattice: log_probs must be on the CPU");
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
  const int64_t N = row_splits.numel() - 1;
  BEAMDEC_CHECK(eps_level.scalar_type() == at::kInt && eps_level.is_contiguous() && eps_level.numel() == N &&
                    eps_level.is_cpu(),
                "wfst_lattice: eps_level must be a contiguous CPU int32 tensor with one entry per state (", N, ")");
  BEAMDEC_CHECK(output_beam > 0, "wfst_lattice: output_beam must be > 0 (+inf keeps every arc), got ", output_beam);
  LGraph g{row_splits.data_ptr<int32_t>(), eps_begin.data_ptr<int32_t>(), final_begin.data_ptr<int32_t>(),
           dest.data_ptr<int32_t>(),       ilabel.data_ptr<int32_t>(),    aux_splits.data_ptr<int32_t>(),
           aux_words.data_ptr<int32_t>(),  weight.data_ptr<float>(),      eps_level.data_ptr<int32_t>(),
           static_cast<int32_t>(N),        static_cast<int32_t>(start_state), static_cast<int32_t>(final_state),
           false};
  for (int64_t s = 0; s < N && !g.has_eps; ++s) g.has_eps = g.eps_begin[s] < g.final_begin[s];
  BEAMDEC_CHECK(!g.has_eps || eps_iterations >= 1, "wfst_lattice: the graph has epsilon arcs, eps_iterations must be >= 1");
  LOptions opt{static_cast<float>(search_beam), static_cast<float>(min_active), static_cast<float>(max_active),
               allow_partial, static_cast<float>(acoustic_scale), static_cast<int32_t>(eps_iterations),
               static_cast<float>(output_beam)};
  const int64_t C = boost_keys.size(1);
  const int64_t* len_ptr = lengths.data_ptr<int64_t>();
  std::vector<UttLattice> lats(static_cast<size_t>(B));
  const float output_beam_f = static_cast<float>(output_beam);
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(log_probs.scalar_type(), "wfst_lattice_cpu", [&] {
    const scalar_t* lp = log_probs.data_ptr<scalar_t>();
    at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
      std::vector<int32_t> slot_of_state(static_cast<size_t>(N), -1);
      for (int64_t b = begin; b < end; ++b) {
        LBoosts boost{C ? boost_keys.data_ptr<int32_t>() + b * C : nullptr,
                      C ? boost_values.data_ptr<float>() + b * C : nullptr, static_cast<int32_t>(C)};
        RawLattice raw;
        lattice_forward<scalar_t>(g, opt, lp + b * T * V, V, static_cast<int32_t>(len_ptr[b]), boost, slot_of_state,
                                  raw);
        lattice::prune_lattice(g.eps_level, g.final_state, output_beam_f, raw, lats[b]);
      }
    });
  });
  return lattice::pack_lattices(lats);
}

// The packed lattice batch every lattice op reads (the wfst_lattice op's layout, wfst_lattice_ops.h): one-line errors
// naming `op`; returns the batch size B.
static int64_t check_packed_lattices(const char* op, const at::Tensor& state_splits, const at::Tensor& states,
                                     const at::Tensor& arc_splits, const at::Tensor& arcs,
                                     const at::Tensor& arc_scores) {
  BEAMDEC_CHECK(state_splits.dim() == 1 && state_splits.scalar_type() == at::kLong && state_splits.is_contiguous() &&
                    arc_splits.sizes() == state_splits.sizes() && arc_splits.scalar_type() == at::kLong &&
                    arc_splits.is_contiguous() && state_splits.numel() >= 1,
                op, ": state_splits/arc_splits must be contiguous int64 (B + 1,)");
  const int64_t B = state_splits.numel() - 1;
  const int64_t S = state_splits.data_ptr<int64_t>()[B], A = arc_splits.data_ptr<int64_t>()[B];
  BEAMDEC_CHECK(states.dim() == 2 && states.size(0) == S && states.size(1) == 2 && states.scalar_type() == at::kInt &&
                    states.is_contiguous(),
                op, ": states must be contiguous int32 (S, 2) with S = state_splits[-1]");
  BEAMDEC_CHECK(arcs.dim() == 2 && arcs.size(0) == A && arcs.size(1) == 3 && arcs.scalar_type() == at::kInt &&
                    arcs.is_contiguous(),
                op, ": arcs must be contiguous int32 (A, 3) with A = arc_splits[-1]");
  BEAMDEC_CHECK(arc_scores.dim() == 1 && arc_scores.numel() == A && arc_scores.scalar_type() == at::kFloat &&
                    arc_scores.is_contiguous(),
                op, ": arc_scores must be contiguous float32 (A,)");
  return B;
}

// What the ops that walk a packed batch as DAGs read besides check_packed_lattices' layout: monotone splits, every arc
// from a lower to a higher state id of its utterance and, with `by_source`, the arcs sorted by source. One-line
// errors naming `op`.
static void check_dags(const char* op, const at::Tensor& state_splits, const at::Tensor& arc_splits,
                       const at::Tensor& arcs, bool by_source) {
  const int64_t B = state_splits.numel() - 1;
  const int64_t* ssp = state_splits.data_ptr<int64_t>();
  const int64_t* asp = arc_splits.data_ptr<int64_t>();
  const int32_t* ar = arcs.data_ptr<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t ns = ssp[b + 1] - ssp[b];
    BEAMDEC_CHECK(ssp[b + 1] >= ssp[b] && asp[b + 1] >= asp[b], op, ": splits must be monotone");
    for (int64_t k = asp[b]; k < asp[b + 1]; ++k)
      BEAMDEC_CHECK(ar[3 * k] >= 0 && ar[3 * k] < ar[3 * k + 1] && ar[3 * k + 1] < ns &&
                        (!by_source || k == asp[b] || ar[3 * k - 3] <= ar[3 * k]),
                    op, ": arcs must go from a lower to a higher state id within the utterance (topologically "
                    "sorted lattice)", by_source ? ", sorted by source" : "", "; arc ", k);
  }
}

// check_dags plus one int32 label per arc (`labels_name`).
static void check_labeled_dags(const char* op, const at::Tensor& state_splits, const at::Tensor& arc_splits,
                               const at::Tensor& arcs, const at::Tensor& labels, const char* labels_name,
                               bool by_source) {
  const int64_t B = state_splits.numel() - 1;
  BEAMDEC_CHECK(labels.dim() == 1 && labels.numel() == arc_splits.data_ptr<int64_t>()[B] &&
                    labels.scalar_type() == at::kInt && labels.is_contiguous(),
                op, ": ", labels_name, " must be contiguous int32 (A,) with A = arc_splits[-1]");
  check_dags(op, state_splits, arc_splits, arcs, by_source);
}

// What the path ops read of the graph: its ilabel (null where unused) and each arc's words (aux CSR xs / xw) over
// AG arcs and XW words.
struct GraphWords {
  const int32_t* il;
  const int32_t* xs;
  const int32_t* xw;
  int64_t AG, XW;
  // Whether graph arc `ga` and its word range [xs[ga], xs[ga + 1]) lie inside the graph.
  bool arc_ok(int32_t ga) const { return ga >= 0 && ga < AG && xs[ga] >= 0 && xs[ga] <= xs[ga + 1] && xs[ga + 1] <= XW; }
};

// The hypothesis of one lattice path (local arc indices `path` of an utterance whose states are `st_u` [frame, graph
// state] (ns of them) and arcs `ar_u` [src, dst, graph arc]): tokens with their frames, words with start / end frames;
// decoders/lattice.py _path_hypothesis, the same rules. Graph arcs are checked against the graph (`op` names the error).
struct PathHypothesis {
  std::vector<int32_t> tokens, steps, words, starts, ends;
};

static void path_hypothesis(const int32_t* st_u, int64_t ns, const int32_t* ar_u, const std::vector<int64_t>& path,
                            const GraphWords& gw, int64_t blank_id, const char* op, PathHypothesis& r) {
  const int32_t *il = gw.il, *xs = gw.xs, *xw = gw.xw;
  auto frame = [&](int64_t s) { return st_u[2 * s]; };
  const int64_t final_state = ns - 1;
  int32_t last_real = -1, prev_token = -1;
  bool have_prev = false;
  size_t group = 0;  // words of the current word arc, waiting for their end
  auto word_end = [&](int32_t otherwise) { return (last_real >= 0 && blank_id >= 0) ? last_real + 1 : otherwise; };
  for (const int64_t k : path) {
    const int32_t src = ar_u[3 * k], dst = ar_u[3 * k + 1], ga = ar_u[3 * k + 2];
    BEAMDEC_CHECK(gw.arc_ok(ga), op, ": graph arc ", ga, " outside the graph");
    const int32_t f = frame(src);
    const bool emitting = dst != final_state && frame(dst) == f + 1;
    const int32_t lab = emitting ? il[ga] : -1;
    if (xs[ga + 1] > xs[ga]) {
      r.ends.insert(r.ends.end(), group, word_end(f));
      group = 0;
      for (int32_t j = xs[ga]; j < xs[ga + 1]; ++j) {
        r.words.push_back(xw[j]);
        r.starts.push_back(f);
        ++group;
      }
      last_real = -1;
    }
    if (lab >= 0) {
      if (lab != blank_id) {
        last_real = f;
        if (!have_prev || lab != prev_token) {
          r.tokens.push_back(lab);
          r.steps.push_back(f);
        }
      }
      prev_token = lab;
      have_prev = true;
    }
  }
  r.ends.insert(r.ends.end(), group, word_end(frame(ns - 1) - 1));  // frames read: 0 .. len - 1
}

// Hypotheses as packed tensors: (tok_splits (N + 1,) i64, toks (T, 2) i32 [token, frame], word_splits (N + 1,) i64,
// words (W, 3) i32 [word, start, end]).
static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> pack_hypotheses(
    const std::vector<const PathHypothesis*>& hyps) {
  const int64_t N = static_cast<int64_t>(hyps.size());
  auto i64 = at::TensorOptions().dtype(at::kLong);
  auto i32 = at::TensorOptions().dtype(at::kInt);
  at::Tensor tok_splits = at::zeros({N + 1}, i64), word_splits = at::zeros({N + 1}, i64);
  int64_t nt = 0, nw = 0;
  for (int64_t b = 0; b < N; ++b) {
    tok_splits.data_ptr<int64_t>()[b + 1] = (nt += static_cast<int64_t>(hyps[b]->tokens.size()));
    word_splits.data_ptr<int64_t>()[b + 1] = (nw += static_cast<int64_t>(hyps[b]->words.size()));
  }
  at::Tensor toks = at::empty({nt, 2}, i32), words = at::empty({nw, 3}, i32);
  for (int64_t b = 0; b < N; ++b) {
    const PathHypothesis& r = *hyps[b];
    int32_t* t = toks.data_ptr<int32_t>() + 2 * tok_splits.data_ptr<int64_t>()[b];
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      t[2 * i] = r.tokens[i];
      t[2 * i + 1] = r.steps[i];
    }
    int32_t* w = words.data_ptr<int32_t>() + 3 * word_splits.data_ptr<int64_t>()[b];
    for (size_t i = 0; i < r.words.size(); ++i) {
      w[3 * i] = r.words[i];
      w[3 * i + 1] = r.starts[i];
      w[3 * i + 2] = r.ends[i];
    }
  }
  return {tok_splits, toks, word_splits, words};
}

// The graph arrays the path ops read, checked (one-line errors naming `op`).
static GraphWords checked_graph_words(const char* op, const at::Tensor& ilabel, const at::Tensor& aux_splits,
                                      const at::Tensor& aux_words) {
  BEAMDEC_CHECK(ilabel.dim() == 1 && ilabel.scalar_type() == at::kInt && ilabel.is_contiguous() &&
                    aux_splits.dim() == 1 && aux_splits.numel() == ilabel.numel() + 1 &&
                    aux_splits.scalar_type() == at::kInt && aux_splits.is_contiguous() &&
                    aux_words.scalar_type() == at::kInt && aux_words.is_contiguous(),
                op, ": the graph's ilabel (A_g,), aux_splits (A_g + 1,) and aux_words must be int32");
  return GraphWords{ilabel.data_ptr<int32_t>(), aux_splits.data_ptr<int32_t>(), aux_words.data_ptr<int32_t>(),
                    ilabel.numel(), aux_words.numel()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_best_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& state_scores,
    const at::Tensor& arc_splits, const at::Tensor& arcs, const at::Tensor& arc_scores, const at::Tensor& ilabel,
    const at::Tensor& aux_splits, const at::Tensor& aux_words, int64_t blank_id) {
  const int64_t B = check_packed_lattices("wfst_lattice_best", state_splits, states, arc_splits, arcs, arc_scores);
  const int64_t* ssp = state_splits.data_ptr<int64_t>();
  const int64_t* asp = arc_splits.data_ptr<int64_t>();
  BEAMDEC_CHECK(state_scores.sizes() == states.sizes() && state_scores.scalar_type() == at::kFloat &&
                    state_scores.is_contiguous(),
                "wfst_lattice_best: state_scores must be contiguous float32 (S, 2) like states");
  const GraphWords gw = checked_graph_words("wfst_lattice_best", ilabel, aux_splits, aux_words);
  const int32_t* st = states.data_ptr<int32_t>();
  const float* ss = state_scores.data_ptr<float>();
  const int32_t* ar = arcs.data_ptr<int32_t>();
  const float* as = arc_scores.data_ptr<float>();
  struct Best : PathHypothesis {
    int64_t status = 0;  // 0 empty lattice, 1 traced, -1 no tight path (the caller falls back to the exact search)
  };
  std::vector<Best> res(static_cast<size_t>(B));
  lattice::parallel_largest_first(B, [&](int64_t b) { return asp[b + 1] - asp[b]; }, [&](int64_t b) {
    const int64_t s0 = ssp[b], ns = ssp[b + 1] - s0, a0 = asp[b], na = asp[b + 1] - a0;
    Best& r = res[b];
    if (ns == 0) return;
    auto fwd = [&](int64_t s) { return ss[2 * (s0 + s)]; };
    // the first arc (in arc order) into each state whose float32 forward(src) + score equals forward(dst)
    std::vector<int64_t> first_in(static_cast<size_t>(ns), -1);
    for (int64_t k = na - 1; k >= 0; --k) {
      const int32_t src = ar[3 * (a0 + k)], dst = ar[3 * (a0 + k) + 1];
      BEAMDEC_CHECK(src >= 0 && src < ns && dst >= 0 && dst < ns, "wfst_lattice_best: arc ", a0 + k,
                    " leaves the utterance's states");
      const float sum = fwd(src) + as[a0 + k];
      if (sum == fwd(dst)) first_in[dst] = k;
    }
    std::vector<int64_t> path;
    int64_t s = ns - 1;
    while (s != 0 && static_cast<int64_t>(path.size()) <= na) {
      const int64_t k = first_in[s];
      if (k < 0) break;
      path.push_back(k);
      s = ar[3 * (a0 + k)];
    }
    if (s != 0) {
      r.status = -1;
      return;
    }
    std::reverse(path.begin(), path.end());
    r.status = 1;
    path_hypothesis(st + 2 * s0, ns, ar + 3 * a0, path, gw, blank_id, "wfst_lattice_best", r);
  });
  at::Tensor status = at::empty({B}, at::TensorOptions().dtype(at::kLong));
  std::vector<const PathHypothesis*> hyps(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    status.data_ptr<int64_t>()[b] = res[b].status;
    hyps[b] = &res[b];
  }
  auto [tok_splits, toks, word_splits, words] = pack_hypotheses(hyps);
  return {status, tok_splits, toks, word_splits, words};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_path_hypotheses_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& arc_splits, const at::Tensor& arcs,
    const at::Tensor& arc_scores, const at::Tensor& path_utt, const at::Tensor& path_splits,
    const at::Tensor& path_arcs, const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words,
    int64_t blank_id) {
  const char* op = "wfst_lattice_path_hypotheses";
  const int64_t B = check_packed_lattices(op, state_splits, states, arc_splits, arcs, arc_scores);
  const GraphWords gw = checked_graph_words(op, ilabel, aux_splits, aux_words);
  BEAMDEC_CHECK(path_utt.dim() == 1 && path_utt.scalar_type() == at::kLong && path_utt.is_contiguous() &&
                    path_splits.dim() == 1 && path_splits.numel() == path_utt.numel() + 1 &&
                    path_splits.scalar_type() == at::kLong && path_splits.is_contiguous() && path_arcs.dim() == 1 &&
                    path_arcs.scalar_type() == at::kInt && path_arcs.is_contiguous(),
                op, ": path_utt must be int64 (P,), path_splits int64 (P + 1,), path_arcs int32 (L,), contiguous");
  const int64_t P = path_utt.numel();
  const int64_t* ssp = state_splits.data_ptr<int64_t>();
  const int64_t* asp = arc_splits.data_ptr<int64_t>();
  const int64_t* pu = path_utt.data_ptr<int64_t>();
  const int64_t* ps = path_splits.data_ptr<int64_t>();
  const int32_t* pa = path_arcs.data_ptr<int32_t>();
  BEAMDEC_CHECK(ps[0] == 0 && ps[P] == path_arcs.numel(), op, ": path_splits must start at 0 and end at L");
  for (int64_t p = 0; p < P; ++p) {
    BEAMDEC_CHECK(pu[p] >= 0 && pu[p] < B && ps[p + 1] >= ps[p], op, ": path ", p,
                  " names no utterance or has a negative length");
    BEAMDEC_CHECK(ssp[pu[p] + 1] > ssp[pu[p]], op, ": path ", p, " is in an empty lattice");
    for (int64_t j = ps[p]; j < ps[p + 1]; ++j)
      BEAMDEC_CHECK(pa[j] >= 0 && pa[j] < asp[pu[p] + 1] - asp[pu[p]], op, ": path ", p, " has an arc outside its "
                    "utterance");
  }
  const int32_t* st = states.data_ptr<int32_t>();
  const int32_t* ar = arcs.data_ptr<int32_t>();
  std::vector<PathHypothesis> res(static_cast<size_t>(P));
  at::parallel_for(0, P, 16, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t b = pu[p], s0 = ssp[b], a0 = asp[b];
      const std::vector<int64_t> path(pa + ps[p], pa + ps[p + 1]);
      path_hypothesis(st + 2 * s0, ssp[b + 1] - s0, ar + 3 * a0, path, gw, blank_id, op, res[p]);
    }
  });
  std::vector<const PathHypothesis*> hyps(static_cast<size_t>(P));
  for (int64_t p = 0; p < P; ++p) hyps[p] = &res[p];
  return pack_hypotheses(hyps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_mbr_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& arc_splits, const at::Tensor& arcs,
    const at::Tensor& arc_scores, const at::Tensor& arc_words) {
  const int64_t B = check_packed_lattices("wfst_lattice_mbr", state_splits, states, arc_splits, arcs, arc_scores);
  const int64_t* ssp = state_splits.data_ptr<int64_t>();
  const int64_t* asp = arc_splits.data_ptr<int64_t>();
  const int64_t A = asp[B];
  check_labeled_dags("wfst_lattice_mbr", state_splits, arc_splits, arcs, arc_words, "arc_words", false);
  const int32_t* st = states.data_ptr<int32_t>();
  const int32_t* ar = arcs.data_ptr<int32_t>();
  const float* as = arc_scores.data_ptr<float>();
  const int32_t* aw = arc_words.data_ptr<int32_t>();
  std::vector<MbrResult> res(static_cast<size_t>(B));
  at::Tensor post = at::empty({A}, at::TensorOptions().dtype(at::kFloat));
  float* pp = post.data_ptr<float>();
  // an MBR iteration costs arcs x hypothesis length: the utterances with the most arcs first
  lattice::parallel_largest_first(B, [&](int64_t b) { return asp[b + 1] - asp[b]; }, [&](int64_t b) {
    const int64_t s0 = ssp[b], ns = ssp[b + 1] - s0, a0 = asp[b], na = asp[b + 1] - a0;
    if (ns == 0) return;
    std::vector<Mbr::Arc> marcs(static_cast<size_t>(na));
    for (int64_t k = 0; k < na; ++k)
      marcs[k] = {aw[a0 + k], ar[3 * (a0 + k)] + 1, ar[3 * (a0 + k) + 1] + 1, static_cast<double>(as[a0 + k])};
    std::vector<double> times(static_cast<size_t>(ns) + 1, 0.0);
    for (int64_t i = 0; i < ns; ++i) times[i + 1] = st[2 * (s0 + i)];
    Mbr mbr(static_cast<int32_t>(ns), marcs, times);
    res[b] = mbr.Decode();
    // arc posteriors: alpha from the decode, beta by one reverse sweep over the source-sorted arcs
    const std::vector<double>& alpha = mbr.alpha();
    std::vector<double> beta(static_cast<size_t>(ns) + 1, kNegInfD);
    beta[ns] = 0.0;
    for (int64_t k = na - 1; k >= 0; --k)
      beta[marcs[k].start_node] = Mbr::LogAdd(beta[marcs[k].start_node], marcs[k].loglike + beta[marcs[k].end_node]);
    for (int64_t k = 0; k < na; ++k)
      pp[a0 + k] = static_cast<float>(
          std::exp(alpha[marcs[k].start_node] + marcs[k].loglike + beta[marcs[k].end_node] - alpha[ns]));
  });
  auto i64 = at::TensorOptions().dtype(at::kLong);
  int64_t W = 0;
  at::Tensor word_splits = at::zeros({B + 1}, i64);
  for (int64_t b = 0; b < B; ++b) word_splits.data_ptr<int64_t>()[b + 1] = (W += static_cast<int64_t>(res[b].words.size()));
  at::Tensor words = at::empty({W}, at::TensorOptions().dtype(at::kInt));
  at::Tensor times = at::empty({W, 2}, at::TensorOptions().dtype(at::kFloat));
  at::Tensor conf = at::empty({W}, at::TensorOptions().dtype(at::kFloat));
  at::Tensor total = at::empty({B}, at::TensorOptions().dtype(at::kDouble));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t w0 = word_splits.data_ptr<int64_t>()[b];
    for (size_t i = 0; i < res[b].words.size(); ++i) {
      words.data_ptr<int32_t>()[w0 + i] = res[b].words[i];
      times.data_ptr<float>()[2 * (w0 + i)] = res[b].times[i].first;
      times.data_ptr<float>()[2 * (w0 + i) + 1] = res[b].times[i].second;
      conf.data_ptr<float>()[w0 + i] = res[b].confidences[i];
    }
    total.data_ptr<double>()[b] = res[b].total;
  }
  return {word_splits, words, times, conf, post, total};
}


namespace {

// One lattice's word-determinized form (wfst_lattice_word_determinize): states in topological order, the start
// first, one final state last; arcs {src, dst, label, score}.
struct DetLattice {
  int32_t num_states = 0;
  std::vector<int32_t> frames;  // per state: where its word prefix's best path emitted the prefix's last word
  std::vector<std::array<int32_t, 3>> arcs;  // src, dst, label
  std::vector<float> scores;
};

// Weighted subset construction in the tropical semiring over costs (-score) with epsilon closure, for an acyclic
// lattice whose arcs go from lower to higher state ids (start 0, final n - 1). A determinized state is the set of
// lattice states reachable by one word prefix, each with its residual cost (normalized: the smallest is 0); its
// residuals are quantized to `kDelta` to tell states apart (OpenFst's default delta). States are expanded in A*
// order of (cost so far + best completion), the completion from the lattice's exact backward costs, so a state's
// cost is final when it is expanded and a determinized path whose total is worse than the best by more than `beam`
// is never built (every word sequence within the beam is kept; pieces of worse ones may remain, as in Kaldi's
// determinize-pruned). Dead ends left by the pruning are removed.
DetLattice word_determinize_one(int32_t n, const int32_t* ar, const float* sc, const int32_t* lab, int64_t na,
                                const int32_t* frame, double beam) {
  constexpr double kDelta = 1.0 / 1024.0;
  constexpr size_t kMaxDetStates = size_t{1} << 22;
  const double inf = std::numeric_limits<double>::infinity();
  DetLattice out;
  if (n <= 0) return out;
  std::vector<int64_t> first(static_cast<size_t>(n) + 1, 0);  // arcs are sorted by source
  for (int64_t k = 0; k < na; ++k) ++first[ar[3 * k] + 1];
  for (int32_t s = 0; s < n; ++s) first[s + 1] += first[s];
  std::vector<double> beta(static_cast<size_t>(n), inf);  // best cost to the final state
  beta[n - 1] = 0.0;
  for (int64_t k = na - 1; k >= 0; --k) {
    const int32_t s = ar[3 * k], t = ar[3 * k + 1];
    beta[s] = std::min(beta[s], -static_cast<double>(sc[k]) + beta[t]);
  }
  const double best = beta[0];
  if (!std::isfinite(best)) return out;
  const double limit = best + beam + 1e-6;
  struct State {
    std::vector<std::pair<int32_t, double>> elems;  // (lattice state, residual), by state
    double cost;  // best cost from the start so far
    double h;     // best completion: min over elements of residual + beta
    bool expanded = false;
    int32_t frame = 0;  // the frame of the best lattice state the word arc reached (before the closure)
  };
  struct KeyHash {
    size_t operator()(const std::vector<int64_t>& k) const {
      uint64_t h = 1469598103934665603ull;
      for (int64_t x : k) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
      return static_cast<size_t>(h);
    }
  };
  std::vector<State> states;
  std::unordered_map<std::vector<int64_t>, int32_t, KeyHash> index;
  // scratch for one closure: residual per lattice state (inf: not in the set), the set as a bitset over state ids
  // (words lo_word..hi_word in use) and its states: the seeds before the closure, all of them, by id, after it
  std::vector<double> acc(static_cast<size_t>(n), inf);
  std::vector<uint64_t> member((static_cast<size_t>(n) + 63) / 64, 0);
  int64_t lo_word = std::numeric_limits<int64_t>::max(), hi_word = -1;
  std::vector<int32_t> touched;
  std::vector<int64_t> key;  // close_and_intern's key buffer
  auto mark = [&](int32_t t) {
    member[t >> 6] |= uint64_t{1} << (t & 63);
    lo_word = std::min<int64_t>(lo_word, t >> 6);
    hi_word = std::max<int64_t>(hi_word, t >> 6);
  };
  auto add = [&](int32_t t, double c) {
    if (acc[t] == inf) {
      touched.push_back(t);
      mark(t);
    }
    if (c < acc[t]) acc[t] = c;
  };
  // the epsilon closure of the (state, cost) pairs added since the last call (epsilon arcs go to higher ids, so
  // popping states in increasing id order sees each one's final cost), normalized (the smallest residual is 0);
  // finds or adds its determinized state; returns (state, the arc weight W taken out)
  auto close_and_intern = [&]() -> std::pair<int32_t, double> {
    // the time of the new state, as Kaldi's compact lattices have it: where the best path of the word prefix emitted
    // its last word (the best of the states the word's arcs reached; ties: the lowest state id)
    int32_t at = -1;
    for (int32_t t : touched)
      if (at < 0 || acc[t] < acc[at] || (acc[t] == acc[at] && t < at)) at = t;
    const int32_t at_frame = at >= 0 ? frame[at] : 0;
    // epsilon arcs go to higher ids, so taking the set's members in increasing id order (the lowest set bit of
    // the lowest word; a member added while its word is read has a higher id, so it is taken later) sees each one's
    // final residual, and lists the closure sorted by id
    touched.clear();
    for (int64_t i = lo_word; i <= hi_word; ++i) {
      while (member[i] != 0) {
        const int32_t x = static_cast<int32_t>((i << 6) + __builtin_ctzll(member[i]));
        member[i] &= member[i] - 1;
        touched.push_back(x);
        for (int64_t k = first[x]; k < first[x + 1]; ++k) {
          if (lab[k] != 0) continue;
          const int32_t t = ar[3 * k + 1];
          const double c = acc[x] - static_cast<double>(sc[k]);
          if (acc[t] == inf) mark(t);
          if (c < acc[t]) acc[t] = c;
        }
      }
    }
    lo_word = std::numeric_limits<int64_t>::max();
    hi_word = -1;
    double w = inf;
    for (int32_t t : touched) w = std::min(w, acc[t]);
    // the key (state, quantized residual) in a reused buffer; the state's element list only when it is new
    key.clear();
    for (int32_t t : touched) {
      key.push_back(t);
      key.push_back(std::llround((acc[t] - w) / kDelta));
    }
    auto found = index.find(key);
    if (found != index.end()) {
      for (int32_t t : touched) acc[t] = inf;
      touched.clear();
      return {found->second, w};
    }
    State st;
    st.h = inf;
    st.elems.reserve(touched.size());
    for (int32_t t : touched) {
      const double r = acc[t] - w;
      st.elems.emplace_back(t, r);
      st.h = std::min(st.h, r + beta[t]);
      acc[t] = inf;
    }
    touched.clear();
    st.cost = inf;
    st.frame = at_frame;
    // without a beam (or with a very wide one) a lattice can determinize to exponentially many states: a one-line
    // error instead of exhausting memory
    BEAMDEC_CHECK(states.size() < kMaxDetStates, "wfst_lattice_word_determinize: more than ", kMaxDetStates,
                  " determinized states in one lattice; determinize with a finite, narrower output_beam");
    states.push_back(std::move(st));
    const int32_t id = static_cast<int32_t>(states.size()) - 1;
    index.emplace(key, id);
    return {id, w};
  };
  add(0, 0.0);
  const int32_t s0 = close_and_intern().first;
  states[s0].cost = 0.0;
  using Item = std::pair<double, int32_t>;  // (cost + h, state)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  queue.push({states[s0].h, s0});
  struct DetArc {
    int32_t src, dst, label;
    double w;
  };
  std::vector<DetArc> arcs;
  const int32_t kFinal = -1;  // dst of a final arc until the final state gets its id
  struct Step {
    int32_t label, dst;
    double cost;
    bool operator<(const Step& o) const { return label < o.label; }
  };
  std::vector<Step> steps;
  while (!queue.empty()) {
    const auto [f, d] = queue.top();
    queue.pop();
    if (states[d].expanded || f > states[d].cost + states[d].h + 1e-9) continue;  // stale entry
    states[d].expanded = true;
    if (f > limit) continue;
    double final_w = inf;
    const std::vector<std::pair<int32_t, double>> elems = states[d].elems;  // close_and_intern grows `states`
    const double cost_d = states[d].cost;
    steps.clear();
    for (const auto& [x, r] : elems) {
      if (x == n - 1) final_w = std::min(final_w, r);
      for (int64_t k = first[x]; k < first[x + 1]; ++k)
        if (lab[k] != 0) steps.push_back({lab[k], ar[3 * k + 1], r - static_cast<double>(sc[k])});
    }
    if (std::isfinite(final_w) && cost_d + final_w <= limit) arcs.push_back({d, kFinal, 0, final_w});
    std::stable_sort(steps.begin(), steps.end());
    for (size_t a = 0; a < steps.size();) {  // one determinized arc per label
      size_t e = a;
      // the best total through this label's arc, before its closure: the closure's best element plus its best
      // completion is the best seed plus its completion (beta is exact and a seed is in its own closure), so a label
      // beyond the beam is skipped without closing it (the check after the closure below stays: this one has a
      // margin, so rounding never makes it prune what that one keeps)
      double bound = inf;
      for (; e < steps.size() && steps[e].label == steps[a].label; ++e)
        bound = std::min(bound, steps[e].cost + beta[steps[e].dst]);
      if (cost_d + bound > limit + 1e-6) {
        a = e;
        continue;
      }
      for (size_t i = a; i < e; ++i) add(steps[i].dst, steps[i].cost);
      const auto [t, w] = close_and_intern();
      const double ct = cost_d + w;
      const int32_t label = steps[a].label;
      a = e;
      if (ct + states[t].h > limit) continue;
      arcs.push_back({d, t, label, w});
      if (ct < states[t].cost - 1e-12 && !states[t].expanded) {
        states[t].cost = ct;
        queue.push({ct + states[t].h, t});
      }
    }
  }
  // keep the states on a start-to-final path, number them topologically (Kahn; the start first), the final last
  const int32_t m = static_cast<int32_t>(states.size());
  std::vector<std::vector<int32_t>> in_arcs(static_cast<size_t>(m) + 1);
  for (size_t k = 0; k < arcs.size(); ++k) in_arcs[arcs[k].dst == kFinal ? m : arcs[k].dst].push_back(static_cast<int32_t>(k));
  std::vector<char> live(static_cast<size_t>(m) + 1, 0);
  live[m] = 1;
  std::vector<int32_t> stack{m};
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    for (int32_t k : in_arcs[x])
      if (!live[arcs[k].src]) {
        live[arcs[k].src] = 1;
        stack.push_back(arcs[k].src);
      }
  }
  if (!live[s0]) return out;
  std::vector<std::vector<int32_t>> out_arcs(static_cast<size_t>(m));
  std::vector<int32_t> indeg(static_cast<size_t>(m) + 1, 0);
  for (size_t k = 0; k < arcs.size(); ++k) {
    const int32_t t = arcs[k].dst == kFinal ? m : arcs[k].dst;
    if (!live[arcs[k].src] || !live[t]) continue;
    out_arcs[arcs[k].src].push_back(static_cast<int32_t>(k));
    ++indeg[t];
  }
  std::vector<int32_t> order{s0}, pos(static_cast<size_t>(m) + 1, -1);
  for (size_t i = 0; i < order.size(); ++i)
    for (int32_t k : out_arcs[order[i]]) {
      const int32_t t = arcs[k].dst == kFinal ? m : arcs[k].dst;
      if (--indeg[t] == 0 && t != m) order.push_back(t);
    }
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int32_t>(i);
  pos[m] = static_cast<int32_t>(order.size());
  out.num_states = static_cast<int32_t>(order.size()) + 1;
  for (int32_t x : order) out.frames.push_back(states[x].frame);
  out.frames.push_back(frame[n - 1]);  // the final state: the lattice's final frame
  for (int32_t x : order) {
    std::vector<int32_t> ks = out_arcs[x];
    std::sort(ks.begin(), ks.end(), [&](int32_t a, int32_t b) {
      const int32_t da = pos[arcs[a].dst == kFinal ? m : arcs[a].dst], db = pos[arcs[b].dst == kFinal ? m : arcs[b].dst];
      return da != db ? da < db : arcs[a].label < arcs[b].label;
    });
    for (int32_t k : ks) {
      out.arcs.push_back({pos[x], pos[arcs[k].dst == kFinal ? m : arcs[k].dst], arcs[k].label});
      out.scores.push_back(static_cast<float>(-arcs[k].w));
    }
  }
  return out;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_word_determinize_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& arc_splits, const at::Tensor& arcs,
    const at::Tensor& arc_scores, const at::Tensor& labels, double beam) {
  const int64_t B =
      check_packed_lattices("wfst_lattice_word_determinize", state_splits, states, arc_splits, arcs, arc_scores);
  const int64_t* ssp = state_splits.data_ptr<int64_t>();
  const int64_t* asp = arc_splits.data_ptr<int64_t>();
  check_labeled_dags("wfst_lattice_word_determinize", state_splits, arc_splits, arcs, labels, "labels", true);
  BEAMDEC_CHECK(beam > 0, "wfst_lattice_word_determinize: beam must be > 0 (+inf: no pruning), got ", beam);
  const int32_t* ar = arcs.data_ptr<int32_t>();
  const float* as = arc_scores.data_ptr<float>();
  const int32_t* lb = labels.data_ptr<int32_t>();
  const int32_t* st = states.data_ptr<int32_t>();
  for (int64_t k = 0; k < asp[B]; ++k)
    BEAMDEC_CHECK(lb[k] >= 0 && std::isfinite(as[k]),
                  "wfst_lattice_word_determinize: labels must be >= 0 and scores finite; arc ", k);
  std::vector<DetLattice> det(static_cast<size_t>(B));
  lattice::parallel_largest_first(B, [&](int64_t b) { return asp[b + 1] - asp[b]; }, [&](int64_t b) {
    std::vector<int32_t> frames(static_cast<size_t>(ssp[b + 1] - ssp[b]));
    for (int64_t i = ssp[b]; i < ssp[b + 1]; ++i) frames[i - ssp[b]] = st[2 * i];
    det[b] = word_determinize_one(static_cast<int32_t>(ssp[b + 1] - ssp[b]), ar + 3 * asp[b], as + asp[b],
                                  lb + asp[b], asp[b + 1] - asp[b], frames.data(), beam);
  });
  auto i64 = at::TensorOptions().dtype(at::kLong);
  at::Tensor o_ss = at::zeros({B + 1}, i64), o_as = at::zeros({B + 1}, i64);
  int64_t S = 0, A = 0;
  for (int64_t b = 0; b < B; ++b) {
    o_ss.data_ptr<int64_t>()[b + 1] = (S += det[b].num_states);
    o_as.data_ptr<int64_t>()[b + 1] = (A += static_cast<int64_t>(det[b].arcs.size()));
  }
  at::Tensor o_states = at::zeros({S, 2}, at::TensorOptions().dtype(at::kInt));
  at::Tensor o_arcs = at::zeros({A, 3}, at::TensorOptions().dtype(at::kInt));
  at::Tensor o_scores = at::empty({A}, at::TensorOptions().dtype(at::kFloat));
  at::Tensor o_labels = at::empty({A}, at::TensorOptions().dtype(at::kInt));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s0 = o_ss.data_ptr<int64_t>()[b];
    for (size_t i = 0; i < det[b].frames.size(); ++i) o_states.data_ptr<int32_t>()[2 * (s0 + i)] = det[b].frames[i];
    const int64_t a0 = o_as.data_ptr<int64_t>()[b];
    for (size_t k = 0; k < det[b].arcs.size(); ++k) {
      o_arcs.data_ptr<int32_t>()[3 * (a0 + k)] = det[b].arcs[k][0];
      o_arcs.data_ptr<int32_t>()[3 * (a0 + k) + 1] = det[b].arcs[k][1];
      o_labels.data_ptr<int32_t>()[a0 + k] = det[b].arcs[k][2];
      o_scores.data_ptr<float>()[a0 + k] = det[b].scores[k];
    }
  }
  return {o_ss, o_states, o_as, o_arcs, o_scores, o_labels};
}

namespace {

// The k best distinct word sequences of one lattice (wfst_lattice_nbest): A* over (lattice state, word prefix) nodes,
// popped in order of g + h (g: the node's path score, h: the state's exact best completion), ties by push order, so
// the first pop of a node has its best g and the i-th final pop is the i-th best word sequence. The executable spec
// is WfstLattices._nbest_paths_reference (decoders/lattice.py), which this follows step for step in float64.
struct NbestPaths {
  std::vector<std::vector<int32_t>> paths;  // local arc indices, in path order
  std::vector<double> scores;
};

NbestPaths nbest_one(int32_t n, const int32_t* ar, const float* sc, int64_t na, const int32_t* xs, const int32_t* xw,
                     int64_t k) {
  NbestPaths out;
  if (n <= 0) return out;
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<int64_t> first(static_cast<size_t>(n) + 1, 0);  // arcs are sorted by source
  for (int64_t a = 0; a < na; ++a) ++first[ar[3 * a] + 1];
  for (int32_t s = 0; s < n; ++s) first[s + 1] += first[s];
  std::vector<double> h(static_cast<size_t>(n), ninf);
  h[n - 1] = 0.0;
  for (int64_t a = na - 1; a >= 0; --a) {
    const double v = static_cast<double>(sc[a]) + h[ar[3 * a + 1]];
    if (v > h[ar[3 * a]]) h[ar[3 * a]] = v;
  }
  struct Item {
    double key;  // -(g + h)
    int64_t counter;
    int32_t state, prefix;
    double g;
    int32_t parent, arc;
  };
  struct Later {
    bool operator()(const Item& x, const Item& y) const {
      return x.key != y.key ? x.key > y.key : x.counter > y.counter;
    }
  };
  std::priority_queue<Item, std::vector<Item>, Later> heap;
  auto node_key = [](int32_t s, int32_t p) { return (static_cast<uint64_t>(static_cast<uint32_t>(s)) << 32) | static_cast<uint32_t>(p); };
  std::unordered_map<uint64_t, int32_t> trie;  // (prefix, word) -> prefix id; 0 = the empty prefix
  std::unordered_set<uint64_t> seen;
  std::vector<int32_t> node_parent, node_arc;
  heap.push({-(0.0 + h[0]), 0, 0, 0, 0.0, -1, -1});
  int64_t counter = 1;
  while (!heap.empty() && static_cast<int64_t>(out.paths.size()) < k) {
    const Item it = heap.top();
    heap.pop();
    if (!seen.insert(node_key(it.state, it.prefix)).second) continue;
    const int32_t node = static_cast<int32_t>(node_parent.size());
    node_parent.push_back(it.parent);
    node_arc.push_back(it.arc);
    if (it.state == n - 1) {
      std::vector<int32_t> path;
      for (int32_t m = node; m >= 0 && node_arc[m] >= 0; m = node_parent[m]) path.push_back(node_arc[m]);
      std::reverse(path.begin(), path.end());
      out.paths.push_back(std::move(path));
      out.scores.push_back(it.g);
      continue;
    }
    for (int64_t a = first[it.state]; a < first[it.state + 1]; ++a) {
      const int32_t d = ar[3 * a + 1];
      if (h[d] == ninf) continue;
      int32_t q = it.prefix;
      for (int32_t j = xs[ar[3 * a + 2]]; j < xs[ar[3 * a + 2] + 1]; ++j) {
        const uint64_t tk = node_key(q, xw[j]);
        auto found = trie.find(tk);
        if (found == trie.end()) found = trie.emplace(tk, static_cast<int32_t>(trie.size()) + 1).first;
        q = found->second;
      }
      if (seen.count(node_key(d, q))) continue;
      const double g2 = it.g + static_cast<double>(sc[a]);
      heap.push({-(g2 + h[d]), counter++, d, q, g2, node, static_cast<int32_t>(a)});
    }
  }
  return out;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_nbest_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& arc_splits, const at::Tensor& arcs,
    const at::Tensor& arc_scores, const at::Tensor& aux_splits, const at::Tensor& aux_words, int64_t k) {
  const char* op = "wfst_lattice_nbest";
  const int64_t B = check_packed_lattices(op, state_splits, states, arc_splits, arcs, arc_scores);
  const int64_t* ssp = state_splits.data_ptr<int64_t>();
  const int64_t* asp = arc_splits.data_ptr<int64_t>();
  const int64_t A = asp[B];
  check_dags(op, state_splits, arc_splits, arcs, true);
  BEAMDEC_CHECK(k >= 1, op, ": k must be >= 1, got ", k);
  BEAMDEC_CHECK(aux_splits.dim() == 1 && aux_splits.numel() >= 1 && aux_splits.scalar_type() == at::kInt &&
                    aux_splits.is_contiguous() && aux_words.dim() == 1 && aux_words.scalar_type() == at::kInt &&
                    aux_words.is_contiguous(),
                op, ": the graph's aux_splits (A_g + 1,) and aux_words must be contiguous int32");
  const int32_t* ar = arcs.data_ptr<int32_t>();
  const float* as = arc_scores.data_ptr<float>();
  const int32_t* xs = aux_splits.data_ptr<int32_t>();
  const int32_t* xw = aux_words.data_ptr<int32_t>();
  const GraphWords gw{nullptr, xs, xw, aux_splits.numel() - 1, aux_words.numel()};
  for (int64_t a = 0; a < A; ++a) {
    const int32_t ga = ar[3 * a + 2];
    BEAMDEC_CHECK(gw.arc_ok(ga), op, ": graph arc ", ga, " outside the graph; arc ", a);
    for (int32_t j = xs[ga]; j < xs[ga + 1]; ++j)
      BEAMDEC_CHECK(xw[j] >= 0, op, ": words must be >= 0; graph arc ", ga);
    BEAMDEC_CHECK(std::isfinite(as[a]), op, ": arc scores must be finite; arc ", a);
  }
  std::vector<NbestPaths> res(static_cast<size_t>(B));
  lattice::parallel_largest_first(B, [&](int64_t b) { return asp[b + 1] - asp[b]; }, [&](int64_t b) {
    // arc indices are local to the utterance; an arc's words are the graph's words of its graph arc
    res[b] = nbest_one(static_cast<int32_t>(ssp[b + 1] - ssp[b]), ar + 3 * asp[b], as + asp[b], asp[b + 1] - asp[b],
                       xs, xw, k);
  });
  auto i64 = at::TensorOptions().dtype(at::kLong);
  at::Tensor counts = at::zeros({B}, i64);
  int64_t P = 0, L = 0;
  for (int64_t b = 0; b < B; ++b) {
    counts.data_ptr<int64_t>()[b] = static_cast<int64_t>(res[b].paths.size());
    P += static_cast<int64_t>(res[b].paths.size());
    for (const auto& p : res[b].paths) L += static_cast<int64_t>(p.size());
  }
  at::Tensor path_splits = at::zeros({P + 1}, i64);
  at::Tensor path_arcs = at::empty({L}, at::TensorOptions().dtype(at::kInt));
  at::Tensor path_scores = at::empty({P}, at::TensorOptions().dtype(at::kDouble));
  int64_t pi = 0, li = 0;
  for (int64_t b = 0; b < B; ++b)
    for (size_t j = 0; j < res[b].paths.size(); ++j, ++pi) {
      for (int32_t a : res[b].paths[j]) path_arcs.data_ptr<int32_t>()[li++] = a;
      path_splits.data_ptr<int64_t>()[pi + 1] = li;
      path_scores.data_ptr<double>()[pi] = res[b].scores[j];
    }
  return {counts, path_splits, path_arcs, path_scores};
}

}  // namespace beamdec
