// Host-side lattice pieces shared by the CPU reference (wfst_lattice_cpu.cpp) and the CUDA op
// (wfst_lattice_cuda.cpp): the raw forward-pass lattice of the CPU reference, its exact backward output-beam prune,
// the canonical numbering both backends end with (the CUDA op prunes on the device and sends only what survives),
// and the packing into the op's tensors. Defined in wfst_lattice_cpu.cpp.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

namespace beamdec::lattice {

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
