// Host-side lattice pieces shared by the CPU reference (wfst_lattice_cpu.cpp) and the CUDA op
// (wfst_lattice_cuda.cpp): the raw forward-pass lattice of the CPU reference, its exact backward output-beam prune,
// the canonical numbering both backends end with (the CUDA op prunes on the device and sends only what survives),
// and the packing into the op's tensors. Defined in wfst_lattice_cpu.cpp.
#pragma once
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <torch/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

namespace beamdec::lattice {

// Where a lattice op's host time goes (a diagnostic, off by default): with BEAMDEC_LATTICE_TIMING=1 every mark()
// prints one stderr line "lattice-phase <op> <phase> <ms> ms <minor page faults>" for the time since the previous
// mark. The caller synchronizes the device before a mark that should include device work.
class PhaseTimer {
 public:
  explicit PhaseTimer(const char* op) : op_(op) {
    const char* env = std::getenv("BEAMDEC_LATTICE_TIMING");
    on_ = env != nullptr && env[0] != '\0' && env[0] != '0';
    if (on_) reset();
  }
  void mark(const char* phase) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const long faults = minor_faults();
    std::fprintf(stderr, "lattice-phase %s %s %.3f ms %ld\n", op_, phase,
                 std::chrono::duration<double, std::milli>(now - last_).count(), faults - faults_);
    last_ = now;
    faults_ = faults;
  }
  // the size of one of the op's buffers (the CUDA op's workspace and arenas), for the memory side of the record
  void bytes(const char* what, long long n) const {
    if (on_) std::fprintf(stderr, "lattice-bytes %s %s %lld\n", op_, what, n);
  }

 private:
  static long minor_faults() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
  }
  void reset() {
    last_ = std::chrono::steady_clock::now();
    faults_ = minor_faults();
  }
  const char* op_;
  bool on_ = false;
  std::chrono::steady_clock::time_point last_;
  long faults_ = 0;
};

// f(b) for every b in [0, B) on at::parallel_for's threads, handed out one at a time in decreasing cost(b): the
// utterances of a batch differ in cost by 10x or more, and at::parallel_for's static chunks left most threads idle
// behind the largest. An exception thrown by f is rethrown by at::parallel_for once the other threads are done.
template <class Cost, class F>
inline void parallel_largest_first(int64_t B, Cost cost, F f) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(B, 0)));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return cost(x) > cost(y); });
  std::atomic<int64_t> next{0};
  at::parallel_for(0, std::min<int64_t>(B, at::get_num_threads()), 1, [&](int64_t, int64_t) {
    for (int64_t j; (j = next.fetch_add(1)) < B;) f(order[static_cast<size_t>(j)]);
  });
}

// The kept tokens and arcs of a batch grouped by utterance (lane), as stable counting-sort orders, with torch ops
// on whatever device the inputs are on (the CUDA op can group on the device; its host loop did this on one thread).
// tok_lane: (K,) lane of each kept token (in arena-id order); arc_src: (M,) int64 position among the kept tokens of
// each kept arc's source (in [0, K)). Returns (tok_order (K,) int64: the tokens by lane, arena-id order within;
// tok_begin (B+1,) int64; local (K,) int64: each token's rank within its lane; arc_order (M,) int64: the arcs by
// their source's lane, kept order within; arc_begin (B+1,) int64).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_by_lane(const at::Tensor& tok_lane,
                                                                                          const at::Tensor& arc_src,
                                                                                          int64_t B) {
  const at::Tensor lane = tok_lane.to(at::kLong);
  const at::Tensor tok_order = std::get<1>(at::sort(lane, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  const at::Tensor zero = at::zeros({1}, lane.options());
  const at::Tensor tok_begin = at::cat({zero, at::bincount(lane, {}, B).cumsum(0)});
  const at::Tensor ranks = at::arange(lane.size(0), lane.options()) -
                           tok_begin.index_select(0, lane.index_select(0, tok_order));
  const at::Tensor local = at::empty_like(lane).index_copy_(0, tok_order, ranks);
  const at::Tensor arc_lane = lane.index_select(0, arc_src.to(at::kLong));
  const at::Tensor arc_order = std::get<1>(at::sort(arc_lane, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  const at::Tensor arc_begin = at::cat({zero, at::bincount(arc_lane, {}, B).cumsum(0)});
  return {tok_order, tok_begin, local, arc_order, arc_begin};
}

// The op form of group_by_lane (any device), for its tests: lanes must be in [0, B), sources in [0, K).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_group_by_lane_op(
    const at::Tensor& tok_lane, const at::Tensor& arc_src, int64_t B) {
  TORCH_CHECK(tok_lane.dim() == 1 && arc_src.dim() == 1 && B >= 0, "wfst_lattice_group_by_lane: 1-D inputs, B >= 0");
  TORCH_CHECK(tok_lane.numel() == 0 || (tok_lane.min().item<int64_t>() >= 0 && tok_lane.max().item<int64_t>() < B),
              "wfst_lattice_group_by_lane: lanes must be in [0, B)");
  TORCH_CHECK(arc_src.numel() == 0 || (arc_src.min().item<int64_t>() >= 0 &&
                                       arc_src.max().item<int64_t>() < tok_lane.numel()),
              "wfst_lattice_group_by_lane: arc sources must be in [0, K)");
  return group_by_lane(tok_lane, arc_src, B);
}

struct RawArc {
  int32_t src;  // token ids of the utterance (index into RawLattice::tok_*)
  int32_t dst;
  int32_t arc;  // graph arc
  float ll;     // acoustic_scale * log-prob + weight + boosts
};

// What a forward pass leaves: every token of every frame (frame f's tokens are [frame_begin[f],
// frame_begin[f + 1]), in any order within the frame) and every admitted arc (any order).
struct RawLattice {
  std::vector<int32_t> tok_state;
  std::vector<float> tok_score;
  std::vector<int64_t> frame_begin;  // num_frames + 1 entries; num_frames = len + 2
  std::vector<RawArc> arcs;
  int64_t overflow = 0;
  bool redirected = false;  // the final step redirected arcs into the final state (allow_partial)
};

// A pruned lattice in canonical order: states by (frame, eps level, graph state), arcs by (src, graph arc).
struct UttLattice {
  float score = -std::numeric_limits<float>::infinity();
  int64_t overflow = 0;
  int64_t flags = 0;
  int64_t arcs_before = 0;
  int64_t tokens_before = 0;
  std::vector<int32_t> state_frame, state_graph;
  std::vector<float> state_fwd, state_bwd;
  std::vector<int32_t> arc_src, arc_dst, arc_id;
  std::vector<float> arc_ll;
};

// k2's PruneTimeRange over the whole utterance (see wfst_lattice_cpu.cpp). `eps_level` per graph state.
void prune_lattice(const int32_t* eps_level, int32_t final_state, float output_beam, const RawLattice& raw,
                   UttLattice& out);

// What survives the prune, in any order: the states touched by a kept arc and the kept arcs (src / dst index into
// the kept states). The CPU prune collects them on the host, the CUDA prune on the device.
struct KeptToken {
  int32_t frame;
  int32_t state;  // graph state
  int32_t level;  // its epsilon level
  float fwd;
  float bwd;
};
struct KeptArc {
  int32_t src;
  int32_t dst;
  int32_t arc;
  float ll;
};

// Fills out's states and arcs in canonical order (states by (frame, eps level, graph state), arcs by (src, graph
// arc)), whatever order `toks` and `arcs` come in; score, flags and counts are the caller's.
void canonical_lattice(const std::vector<KeptToken>& toks, const std::vector<KeptArc>& arcs, UttLattice& out);

// (scores, header, state_splits, states, state_scores, arc_splits, arcs, arc_scores): the wfst_lattice op's result.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
pack_lattices(const std::vector<UttLattice>& lats);

}  // namespace beamdec::lattice
