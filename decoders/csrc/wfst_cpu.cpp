// CPU reference of the WFST beam search: the executable spec of the semantics that the CUDA kernels
// reproduce (and the CPU decoder of the demo). Readable first; utterances run in parallel.
//
// Semantics (k2 `intersect_dense_pruned`, k2/csrc/intersect_dense_pruned.cu):
//  * Steps t = 0 .. len (len + 1 steps; k2's dense FSA has one extra "final" frame).
//  * t < len (emitting step): every emitting arc (ilabel >= 0) of every frontier state gives a
//    candidate end = score + (acoustic_scale * lp[t][ilabel] + weight [+ boost(words of the arc)]).
//    FINAL arcs read k2's -inf column on real frames, so they are never admitted; EPSILON arcs wait
//    for the closure below.
//  * t == len (final step): only FINAL arcs, no acoustic term. If allow_partial and no frontier state
//    has a FINAL arc, every arc of every frontier state is redirected into final_state with score
//    score + weight (k2's "treat all states on the last frame as final"); the redirected arc's word is
//    kept (k2 keeps its aux label through arc_map_a) and reached_final is false.
//  * Dynamic beam (GetPruningCutoffs, see wfst::k2_dynamic_beam): `active` = number of frontier states
//    (RowSplits(1) of k2's [fsa][state][arc] ArcInfo tensor). cutoff = exact max of this step's candidate
//    ends - beam; a candidate is admitted iff end > cutoff; recombination keeps the best incoming arc per
//    destination state (exact ties: the first one met in frontier/arc order; the GPU may pick another).
//  * Epsilon closure (TLG; k2 has no epsilons): after each emitting step (and once for the start state,
//    with cutoff -search_beam) epsilon arcs are relaxed in Jacobi passes: pass k expands the epsilon arcs
//    of the tokens created or strictly improved by pass k-1 (pass 0: of every token), with the step's
//    cutoff; at most eps_iterations passes. The closure has converged when no token WITH epsilon arcs was
//    created or improved by the last pass (any other change has nothing left to relax); otherwise
//    kOverflowEpsilon is set. An acyclic epsilon subgraph of depth D (arcs on its longest chain) converges
//    in D passes.
//  * Word boosting: an arc adds the utterance's boost of every word it outputs (aux CSR) to its score, which
//    equals decoding the graph composed with a one-state boost acceptor.
//  * Memory (as the GPU arena, decoders/include/wfst_kernels.cuh): back-pointers are WORD LINKS only. A token
//    reached by an arc with output words gets a new link {predecessor's link, arc}; any other token inherits
//    its predecessor's link (the backtrack reads nothing but words). Between steps, when the link store has
//    reached max(kMinCompactLinks, 2 * L) entries (L: links still reachable from the frontier after the
//    previous compaction), unreachable links are dropped and the survivors renumbered. So the store holds at
//    most max(kMinCompactLinks, 2 * L) + (links of one step) entries, where L <= the words on the frontier's
//    paths (about the best path's words plus the not-yet-recombined tail), instead of one entry per surviving
//    token per frame (8.5 GB for a 100k-frame utterance before). Results are unchanged: only unreachable
//    links are dropped and renumbering preserves every chain.
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "wfst_cpu_closure.h"
#include "wfst_defs.h"
#include "wfst_ops.h"

namespace beamdec {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Graph {
  const int32_t* row_splits;
  const int32_t* eps_begin;
  const int32_t* final_begin;
  const int32_t* dest;
  const int32_t* ilabel;
  const int32_t* aux_splits;  // (A+1,) words of arc a: aux_words[aux_splits[a] .. aux_splits[a+1])
  const int32_t* aux_words;
  const float* weight;
  int32_t num_states;
  int32_t start_state;
  int32_t final_state;
  bool has_eps;
};

struct Options {
  float search_beam;
  float min_active;
  float max_active;
  bool allow_partial;
  float acoustic_scale;
  int32_t eps_iterations;
  bool online = false;  // k2 online semantics: emitting steps see no utterance end (wfst_ops.h)
};

struct Token {
  int32_t state;
  float score;
  int32_t winner;  // the token's latest word link (index into the link store; -1: no word yet)
};

struct BackPointer {  // a word link
  int32_t prev;  // previous word link (-1: none)
  int32_t arc;   // an arc with output words
};

// Link-store compaction threshold (see the header comment). BEAMDEC_WFST_CPU_COMPACT_MIN overrides it (tests
// set it tiny to compact every few steps and check the results do not change).
constexpr int64_t kMinCompactLinks = int64_t{1} << 16;

int64_t min_compact_links() {
  const char* env = std::getenv("BEAMDEC_WFST_CPU_COMPACT_MIN");
  if (env == nullptr || *env == '\0') return kMinCompactLinks;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  return (end != env && v >= 1) ? static_cast<int64_t>(v) : kMinCompactLinks;
}

struct Boosts {
  const int32_t* keys;
  const float* values;
  int32_t capacity;
  float operator()(int32_t word) const { return wfst::boost_lookup(keys, values, capacity, word); }
};

struct UtteranceResult {
  std::vector<int32_t> words;
  float score = kNegInf;
  int32_t overflow = 0;
  int32_t flags = 0;
};

// What the search needed, per utterance (wfst_search_stats_cpu): the sizes the GPU capacities must hold.
struct SearchStats {
  int64_t peak_frontier = 0;    // distinct states of one step after its epsilon closure (GPU: frontier)
  int64_t sum_frontier = 0;
  int64_t peak_candidates = 0;  // admitted candidates of one step, emitting + closure passes (GPU: candidates,
  int64_t sum_candidates = 0;   //   an upper bound: the GPU drops candidates already dominated when they arrive);
                                //   the start closure counts in the peaks and the candidate sum
  int64_t word_links = 0;       // back-pointers on arcs with output words (GPU: arena entries)
  int64_t steps = 0;
  int64_t peak_stored_links = 0;  // most word links held at once by this reference (after compaction)
  int64_t closure_passes = 0;  // epsilon-closure passes that generated candidates, the start closure's included (the
                               //   GPU runs the graph's epsilon depth of them per step; the rest have no items)
};

// Drops the word links no token of `front` can reach and renumbers the rest (chains keep their order).
// `mark` is scratch. Returns the number of links kept.
int64_t compact_links(std::vector<BackPointer>& arena, std::vector<Token>& front, std::vector<int32_t>& mark) {
  mark.assign(arena.size(), -1);
  for (const Token& tok : front)  // mark: -2 = reachable; stop at links already marked (shared prefixes)
    for (int32_t w = tok.winner; w >= 0 && mark[w] == -1; w = arena[w].prev) mark[w] = -2;
  int32_t kept = 0;
  for (size_t i = 0; i < arena.size(); ++i) {  // prev < i always, so one forward pass renumbers in place
    if (mark[i] != -2) continue;
    const int32_t prev = arena[i].prev;
    arena[kept] = {prev >= 0 ? mark[prev] : prev, arena[i].arc};
    mark[i] = kept++;
  }
  arena.resize(static_cast<size_t>(kept));
  for (Token& tok : front)
    if (tok.winner >= 0) tok.winner = mark[tok.winner];
  return kept;
}

// Decodes one utterance. `slot_of_state` is scratch of num_states entries, all -1 on entry and exit.
template <typename scalar_t>
UtteranceResult decode_one(const Graph& g, const Options& opt, const scalar_t* lp, int64_t stride_t, int32_t len,
                           const Boosts& boost, std::vector<int32_t>& slot_of_state, SearchStats* stats = nullptr) {
  UtteranceResult res;
  int64_t step_cands = 0;  // admitted candidates of the current step (stats only)
  // Records a filled frontier; `step`: a search step (the start closure is not one).
  auto record = [&](int64_t frontier, bool step) {
    if (!stats) return;
    stats->peak_frontier = std::max(stats->peak_frontier, frontier);
    stats->peak_candidates = std::max(stats->peak_candidates, step_cands);
    stats->sum_candidates += step_cands;
    if (step) {
      stats->sum_frontier += frontier;
      stats->steps += 1;
    }
  };
  std::vector<BackPointer> arena;  // word links only (see the header comment)
  std::vector<int32_t> compact_scratch;
  const int64_t compact_min = min_compact_links();
  int64_t compact_at = compact_min;
  int64_t links_created = 0;
  auto has_words = [&](int32_t a) { return g.aux_splits[a + 1] > g.aux_splits[a]; };
  // The link of a token that won with {prev, arc}: a new link for a word arc, else the predecessor's.
  auto link_of = [&](int32_t prev, int32_t arc) -> int32_t {
    if (!has_words(arc)) return prev;
    arena.push_back({prev, arc});
    ++links_created;
    return static_cast<int32_t>(arena.size() - 1);
  };
  auto note_stored = [&] {
    if (stats) stats->peak_stored_links = std::max(stats->peak_stored_links, static_cast<int64_t>(arena.size()));
  };
  std::vector<Token> front{{g.start_state, 0.0f, -1}}, next;
  std::vector<int32_t> pending_arc, pending_prev;  // per next token: the winning arc and its predecessor
  float beam = opt.search_beam;

  auto arc_score = [&](int32_t a, float acoustic) {
    float arc_ll = acoustic + g.weight[a];
    if (boost.capacity > 0)
      for (int32_t k = g.aux_splits[a]; k < g.aux_splits[a + 1]; ++k) arc_ll = arc_ll + boost(g.aux_words[k]);
    return arc_ll;
  };

  // Relaxes epsilon arcs of `tokens` in Jacobi passes (see the header comment); tokens live in `next`
  // and `slot_of_state` maps their states to indices.
  auto epsilon_closure = [&](std::vector<Token>& tokens, float cutoff) {
    const wfst_cpu::ClosureStats st = wfst_cpu::jacobi_epsilon_closure(
        tokens, cutoff, opt.eps_iterations, g.eps_begin, g.final_begin, g.dest, slot_of_state,
        [&](int32_t a) { return arc_score(a, 0.0f); }, [](const Token& tok) { return tok.winner; },
        [&](Token& tok, int32_t prev, int32_t arc) { tok.winner = link_of(prev, arc); });
    step_cands += st.cands;
    if (stats) stats->closure_passes += st.passes_with_cands;
    if (!st.converged) res.overflow |= wfst::kOverflowEpsilon;
  };

  if (g.has_eps) {
    slot_of_state[g.start_state] = 0;
    epsilon_closure(front, 0.0f - opt.search_beam);
    for (const Token& tok : front) slot_of_state[tok.state] = -1;
    record(static_cast<int64_t>(front.size()), false);  // the start closure fills the frontier too
    note_stored();
  }

  const int32_t final_t = len + 1;
  bool redirected = false;
  for (int32_t t = 0; t <= len; ++t) {
    const bool final_step = (t == len);
    bool redirect = false;
    if (final_step && opt.allow_partial) {
      redirect = true;
      for (const Token& tok : front)
        if (g.final_begin[tok.state] < g.row_splits[tok.state + 1]) redirect = false;
    }
    const int64_t active = static_cast<int64_t>(front.size());  // k2: states active on this frame
    beam = wfst::k2_dynamic_beam(beam, opt.search_beam, opt.min_active, opt.max_active, active, t,
                                 opt.online && !final_step ? wfst::kUnknownFrames : final_t);

    // The arcs a token expands on this step and the acoustic term of arc a.
    auto arc_range = [&](int32_t s, int32_t& begin, int32_t& end) {
      wfst::step_arc_range(g.row_splits, g.eps_begin, g.final_begin, s, final_step, redirect, begin, end);
    };
    const scalar_t* row = lp + static_cast<int64_t>(final_step ? 0 : t) * stride_t;
    auto acoustic = [&](int32_t a) -> float {
      if (final_step) return 0.0f;
      return static_cast<float>(row[g.ilabel[a]]) * opt.acoustic_scale;
    };

    // Pass 1: the exact maximum over every candidate of this step.
    float best = kNegInf;
    for (const Token& tok : front) {
      int32_t b, e;
      arc_range(tok.state, b, e);
      for (int32_t a = b; a < e; ++a) best = std::max(best, tok.score + arc_score(a, acoustic(a)));
    }
    const float cutoff = best - beam;

    // Pass 2: admit and recombine by destination state.
    next.clear();
    pending_arc.clear();
    pending_prev.clear();
    step_cands = 0;
    for (const Token& tok : front) {
      int32_t b, e;
      arc_range(tok.state, b, e);
      for (int32_t a = b; a < e; ++a) {
        float end = tok.score + arc_score(a, acoustic(a));
        if (!(end > cutoff)) continue;
        ++step_cands;
        int32_t d = redirect ? g.final_state : g.dest[a];
        int32_t j = slot_of_state[d];
        if (j < 0) {
          j = static_cast<int32_t>(next.size());
          slot_of_state[d] = j;
          next.push_back({d, end, -1});
          pending_arc.push_back(a);
          pending_prev.push_back(tok.winner);
        } else if (end > next[j].score) {
          next[j].score = end;
          pending_arc[j] = a;
          pending_prev[j] = tok.winner;
        }
      }
    }
    for (size_t j = 0; j < next.size(); ++j) next[j].winner = link_of(pending_prev[j], pending_arc[j]);
    if (g.has_eps && !final_step) epsilon_closure(next, cutoff);
    record(static_cast<int64_t>(next.size()), true);
    note_stored();
    for (const Token& tok : next) slot_of_state[tok.state] = -1;
    front.swap(next);
    redirected = redirect;
    if (static_cast<int64_t>(arena.size()) >= compact_at) {
      const int64_t live = compact_links(arena, front, compact_scratch);
      compact_at = std::max(compact_min, 2 * live);  // amortised: the store at least doubles between passes
    }
  }

  if (stats) stats->word_links += links_created;
  // After the final step the frontier holds at most final_state.
  for (const Token& tok : front) {
    if (tok.state != g.final_state) continue;
    res.score = tok.score;
    res.flags = wfst::kFlagHasPath | (redirected ? 0 : wfst::kFlagReachedFinal);
    for (int32_t w = tok.winner; w >= 0; w = arena[w].prev) {  // newest arc first: words reversed below
      const int32_t a = arena[w].arc;
      for (int32_t k = g.aux_splits[a + 1] - 1; k >= g.aux_splits[a]; --k) res.words.push_back(g.aux_words[k]);
    }
    std::reverse(res.words.begin(), res.words.end());
  }
  return res;
}

}  // namespace

void wfst_check_inputs(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                       const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                       const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words, const at::Tensor& weight,
                       int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                       const at::Tensor& boost_values, double search_beam, int64_t min_active, int64_t max_active,
                       int64_t eps_iterations, int64_t words_capacity) {
  BEAMDEC_CHECK(log_probs.dim() == 3, "wfst_decode: log_probs must be (B, T, V), got ", log_probs.dim(), " dims");
  BEAMDEC_CHECK(log_probs.scalar_type() == at::kFloat || log_probs.scalar_type() == at::kHalf,
              "wfst_decode: log_probs must be float32 or float16, got ", log_probs.scalar_type());
  BEAMDEC_CHECK(log_probs.is_contiguous(), "wfst_decode: log_probs must be contiguous");
  const int64_t B = log_probs.size(0), T = log_probs.size(1);
  BEAMDEC_CHECK(lengths.dim() == 1 && lengths.size(0) == B && lengths.scalar_type() == at::kLong && lengths.is_cpu(),
              "wfst_decode: lengths must be a CPU int64 tensor of shape (", B, ",)");
  auto len = lengths.accessor<int64_t, 1>();
  for (int64_t b = 0; b < B; ++b)
    BEAMDEC_CHECK(len[b] >= 0 && len[b] <= T, "wfst_decode: lengths[", b, "] = ", len[b], " outside [0, ", T, "]");
  const auto dev = log_probs.device();
  const int64_t N = row_splits.numel() - 1, A = dest.numel();
  BEAMDEC_CHECK(N >= 1, "wfst_decode: graph must have at least one state");
  for (const at::Tensor* t : {&row_splits, &eps_begin, &final_begin, &dest, &aux_splits, &aux_words, &boost_keys}) {
    BEAMDEC_CHECK(t->scalar_type() == at::kInt && t->is_contiguous() && t->device() == dev,
                "wfst_decode: graph/boost index tensors must be contiguous int32 on ", dev);
  }
  // The layouts (decoders/wfst.py graph_on_device): on the CPU ilabel int32 and the aux CSR (aux_splits A + 1); on
  // CUDA ilabel int16 and aux_splits the word-arc index (2 int32 per block of 32 arcs, then the word arcs' splits)
  const bool device_layout = dev.is_cuda();
  BEAMDEC_CHECK(ilabel.scalar_type() == (device_layout ? at::kShort : at::kInt) && ilabel.is_contiguous() &&
                    ilabel.device() == dev,
                "wfst_decode: ilabel must be contiguous ", device_layout ? "int16" : "int32", " on ", dev,
                " (the graph's arrays for a device come from decoders.wfst.graph_on_device)");
  BEAMDEC_CHECK(weight.scalar_type() == at::kFloat && weight.is_contiguous() && weight.device() == dev,
              "wfst_decode: weight must be contiguous float32 on ", dev);
  BEAMDEC_CHECK(boost_values.scalar_type() == at::kFloat && boost_values.is_contiguous() && boost_values.device() == dev,
              "wfst_decode: boost_values must be contiguous float32 on ", dev);
  BEAMDEC_CHECK(eps_begin.numel() == N && final_begin.numel() == N, "wfst_decode: eps_begin/final_begin need ", N,
              " entries");
  const int64_t word_blocks = (A + 31) / 32;
  BEAMDEC_CHECK(ilabel.numel() == A && weight.numel() == A &&
                    (device_layout ? aux_splits.numel() >= 2 * word_blocks + 1 : aux_splits.numel() == A + 1),
                "wfst_decode: dest/ilabel/weight must have A entries and aux_splits ",
                device_layout ? "2 per 32 arcs + the word arcs + 1" : "A + 1");
  BEAMDEC_CHECK(start_state >= 0 && start_state < N, "wfst_decode: start_state ", start_state, " outside [0, ", N, ")");
  BEAMDEC_CHECK(final_state >= 0 && final_state < N, "wfst_decode: final_state ", final_state, " outside [0, ", N, ")");
  BEAMDEC_CHECK(boost_keys.dim() == 2 && boost_values.sizes() == boost_keys.sizes() &&
                  (boost_keys.size(0) == B || boost_keys.size(1) == 0),
              "wfst_decode: boost_keys/boost_values must be (B, C) with the same shape");
  const int64_t C = boost_keys.size(1);
  BEAMDEC_CHECK(C == 0 || (C & (C - 1)) == 0, "wfst_decode: boost table capacity must be a power of two, got ", C);
  BEAMDEC_CHECK(search_beam > 0, "wfst_decode: search_beam must be > 0, got ", search_beam);
  BEAMDEC_CHECK(min_active >= 0 && max_active > min_active,
              "wfst_decode: need 0 <= min_active < max_active, got ", min_active, ", ", max_active);
  BEAMDEC_CHECK(eps_iterations >= 0, "wfst_decode: eps_iterations must be >= 0 (0: epsilon-free graph)");
  BEAMDEC_CHECK(words_capacity >= 1, "wfst_decode: words_capacity must be >= 1");
}

namespace {

// The CPU decode of a batch; with `stats` (B entries) it also records what each utterance's search needed.
at::Tensor decode_batch_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                            const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                            const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words,
                            const at::Tensor& weight, int64_t start_state, int64_t final_state,
                            const at::Tensor& boost_keys, const at::Tensor& boost_values, double search_beam,
                            int64_t min_active, int64_t max_active, bool allow_partial, double acoustic_scale,
                            int64_t eps_iterations, int64_t words_capacity, bool online,
                            std::vector<SearchStats>* stats) {
  wfst_check_inputs(log_probs, lengths, row_splits, eps_begin, final_begin, dest, ilabel, aux_splits, aux_words, weight, start_state,
                    final_state, boost_keys, boost_values, search_beam, min_active, max_active, eps_iterations,
                    words_capacity);
  BEAMDEC_CHECK(log_probs.is_cpu(), "wfst_decode_cpu: log_probs must be on the CPU");
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
  const int64_t N = row_splits.numel() - 1;

  Graph g{row_splits.data_ptr<int32_t>(), eps_begin.data_ptr<int32_t>(), final_begin.data_ptr<int32_t>(),
          dest.data_ptr<int32_t>(),       ilabel.data_ptr<int32_t>(),    aux_splits.data_ptr<int32_t>(),
          aux_words.data_ptr<int32_t>(),
          weight.data_ptr<float>(),       static_cast<int32_t>(N),       static_cast<int32_t>(start_state),
          static_cast<int32_t>(final_state), false};
  {  // epsilon arcs present? (decides whether the closure runs at all)
    for (int64_t s = 0; s < N && !g.has_eps; ++s) g.has_eps = g.eps_begin[s] < g.final_begin[s];
  }
  BEAMDEC_CHECK(!g.has_eps || eps_iterations >= 1, "wfst_decode: the graph has epsilon arcs, eps_iterations must be >= 1");
  Options opt{static_cast<float>(search_beam), static_cast<float>(min_active), static_cast<float>(max_active),
              allow_partial, static_cast<float>(acoustic_scale), static_cast<int32_t>(eps_iterations), online};
  const int64_t C = boost_keys.size(1);
  auto out = at::zeros({B, wfst::kResultHeader + words_capacity}, at::TensorOptions().dtype(at::kInt));
  int32_t* out_ptr = out.data_ptr<int32_t>();
  const int64_t out_stride = out.size(1);
  const int64_t* len_ptr = lengths.data_ptr<int64_t>();

  AT_DISPATCH_FLOATING_TYPES_AND_HALF(log_probs.scalar_type(), "wfst_decode_cpu", [&] {
    const scalar_t* lp = log_probs.data_ptr<scalar_t>();
    at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
      std::vector<int32_t> slot_of_state(static_cast<size_t>(N), -1);
      for (int64_t b = begin; b < end; ++b) {
        Boosts boost{C ? boost_keys.data_ptr<int32_t>() + b * C : nullptr,
                     C ? boost_values.data_ptr<float>() + b * C : nullptr, static_cast<int32_t>(C)};
        UtteranceResult r = decode_one<scalar_t>(g, opt, lp + b * T * V, V, static_cast<int32_t>(len_ptr[b]), boost,
                                                 slot_of_state, stats ? &(*stats)[b] : nullptr);
        int32_t* row = out_ptr + b * out_stride;
        const int64_t n = static_cast<int64_t>(r.words.size());
        if (n > words_capacity) r.overflow |= wfst::kOverflowWords;
        row[wfst::kColNumWords] = static_cast<int32_t>(n);
        row[wfst::kColOverflow] = r.overflow;
        row[wfst::kColFlags] = r.flags;
        std::memcpy(&row[wfst::kColScore], &r.score, sizeof(float));
        for (int64_t i = 0; i < std::min(n, words_capacity); ++i) row[wfst::kResultHeader + i] = r.words[i];
      }
    });
  });
  return out;
}

}  // namespace

at::Tensor wfst_decode_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                           const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                           const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words, const at::Tensor& weight,
                           int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                           const at::Tensor& boost_values, double search_beam, int64_t min_active,
                           int64_t max_active, bool allow_partial, double acoustic_scale, int64_t eps_iterations,
                           int64_t /*frontier_capacity*/, int64_t /*candidate_capacity*/, int64_t /*hash_capacity*/,
                           int64_t /*arena_capacity*/, int64_t words_capacity, bool online,
                           double /*max_emit_weight: the GPU's fused-max bound, see wfst_kernels.cuh*/,
                           int64_t /*max_degree: the GPU's emit-slots packing, see wfst_kernels.cuh*/) {
  return decode_batch_cpu(log_probs, lengths, row_splits, eps_begin, final_begin, dest, ilabel, aux_splits, aux_words,
                          weight, start_state, final_state, boost_keys, boost_values, search_beam, min_active,
                          max_active, allow_partial, acoustic_scale, eps_iterations, words_capacity, online, nullptr);
}

std::tuple<at::Tensor, at::Tensor> wfst_search_stats_cpu(
    const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits, const at::Tensor& eps_begin,
    const at::Tensor& final_begin, const at::Tensor& dest, const at::Tensor& ilabel, const at::Tensor& aux_splits,
    const at::Tensor& aux_words, const at::Tensor& weight, int64_t start_state, int64_t final_state,
    const at::Tensor& boost_keys, const at::Tensor& boost_values, double search_beam, int64_t min_active,
    int64_t max_active, bool allow_partial, double acoustic_scale, int64_t eps_iterations, int64_t words_capacity,
    bool online) {
  std::vector<SearchStats> stats(static_cast<size_t>(log_probs.dim() == 3 ? log_probs.size(0) : 0));
  at::Tensor result = decode_batch_cpu(log_probs, lengths, row_splits, eps_begin, final_begin, dest, ilabel, aux_splits,
                                       aux_words, weight, start_state, final_state, boost_keys, boost_values,
                                       search_beam, min_active, max_active, allow_partial, acoustic_scale,
                                       eps_iterations, words_capacity, online, &stats);
  constexpr int64_t kCols = 8;
  auto out = at::zeros({static_cast<int64_t>(stats.size()), kCols}, at::TensorOptions().dtype(at::kLong));
  int64_t* o = out.data_ptr<int64_t>();
  for (size_t b = 0; b < stats.size(); ++b) {
    const SearchStats& st = stats[b];
    const int64_t row[kCols] = {st.peak_frontier, st.sum_frontier, st.peak_candidates, st.sum_candidates,
                                st.word_links,    st.steps,        st.peak_stored_links, st.closure_passes};
    std::copy(row, row + kCols, o + kCols * b);
  }
  return {result, out};
}

}  // namespace beamdec
