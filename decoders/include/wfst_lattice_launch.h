// Torch-free launcher interface of the CUDA lattice forward pass (decoders/csrc/wfst_lattice_launch.cu, kernels in
// decoders/include/wfst_lattice_kernels.cuh). The pass is the CPU reference's lattice_forward
// (decoders/csrc/wfst_lattice_cpu.cpp) on every lane at once: it keeps every token of every frame and every admitted
// arc in two arenas; lattice_prune then marks what the output beam keeps, on the device, and only that is copied to
// the host for the canonical numbering both backends share (wfst_lattice_host.h).
// Every pointer is device memory owned by the caller; the launcher only enqueues work on `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "wfst_launch.h"

namespace wfst {

// (kLatticeEpsArcBit, the epsilon bit of LatticeArc::arc: wfst_defs.h, where the host code reads it too)
struct LatticeArc {
  int32_t src;  // token arena ids (-1: dropped by an overflowed lane; the host skips it)
  int32_t dst;
  int32_t arc;  // graph arc, | kLatticeEpsArcBit for an epsilon arc (source and destination in the same frame)
  float ll;
};

struct LatticeCapacities {
  int32_t frontier;    // F: tokens per lane and frame
  int32_t candidates;  // C: arcs per lane and step (emitting + the new frame's epsilon arcs)
  int64_t tokens;      // token arena, whole batch
  int64_t arcs;        // arc arena, whole batch
  // The per-lane map from graph state to the frame being built's token: 0 = dense (B x num_states entries, 8 B each),
  // else an open-addressing hash table of this many entries per lane (a power of two, 12 B each; the caller picks
  // >= 2 x frontier, so a LibriSpeech-scale graph's map is sized by the search, not by the graph)
  int32_t map_slots = 0;
};

// Outputs the host reads after the pass (all device memory, caller-allocated):
struct LatticeOutputs {
  int32_t* tok_state;            // (tokens,)
  float* tok_score;              // (tokens,)
  LatticeArc* arcs;              // (arcs,)
  int32_t* frame_begin;          // (B, S) token arena offset of lane b's frame f (S = max_length + 2)
  int32_t* frame_count;          // (B, S)
  int64_t* block_begin;          // (B, S) arc arena offset of the arcs committed with frame f
  int32_t* block_count;          // (B, S)
  int32_t* lane_result;          // (B, 2) [overflow bits, redirected (allow_partial final step)]
  unsigned long long* cursors;   // (2,) tokens and arcs used (may exceed the capacities: overflow)
};

// Bytes of scratch workspace for `batch` lanes over a graph of `num_states` states.
size_t lattice_workspace_bytes(int32_t batch, int32_t num_states, const LatticeCapacities& caps);

// Enqueues the lattice forward pass of a batch (log_probs (B, T, V) fp32 or fp16, lengths (B,) int32 on the device,
// max_length = max(lengths) on the host, eps_iterations closure passes per frame when the graph has epsilons).
cudaError_t lattice_forward(const DeviceGraph& graph, const SearchOptions& opt, const LatticeCapacities& caps,
                            const void* log_probs, bool is_half, int32_t batch, int32_t frames, int32_t vocab,
                            const int32_t* lengths, int32_t max_length, const int32_t* boost_keys,
                            const float* boost_values, int32_t boost_capacity, void* workspace,
                            const LatticeOutputs& out, cudaStream_t stream);

// Device buffers of the backward output-beam prune (lattice_prune); sizes are the arena capacities.
struct LatticePruneBuffers {
  uint32_t* bwd;       // (tokens,) zeroed by the caller
  int32_t* tok_frame;  // (tokens,) filled with -1 by the caller
  int32_t* tok_lane;   // (tokens,)
  uint8_t* arc_keep;   // (arcs,) zeroed by the caller
  int32_t* lane_out;   // (B, 4) [final token id or -1, tokens before, arcs before, final score bits]
};

// Enqueues the backward output-beam prune of what lattice_forward left in `out` (the CPU reference's
// prune_lattice, one block per lane): marks the kept arcs and tokens and computes every kept token's backward score.
// `eps_level` (num_states,) int32 on the device.
cudaError_t lattice_prune(const LatticeCapacities& caps, const LatticeOutputs& out, int32_t batch, int32_t max_length,
                          const int32_t* lengths, const int32_t* eps_level, int32_t final_state, float output_beam,
                          const LatticePruneBuffers& buf, cudaStream_t stream);

}  // namespace wfst
