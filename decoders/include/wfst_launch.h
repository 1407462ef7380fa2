// Torch-free launcher interface of the CUDA WFST decoder (implemented in decoders/csrc/wfst_launch.cu).
// Every pointer is device memory owned by the caller (decoders/csrc/wfst_cuda.cpp allocates it from
// torch's caching allocator); the launcher only enqueues work on `stream` and never synchronises.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "bit_ops.h"
#include "wfst_defs.h"

namespace wfst {

// The graph as the kernels read it: states CSR (12 B a state), arcs at 10 B each (dest, weight, a 16-bit ilabel) and
// a word-arc index instead of a per-arc word CSR (decoders/wfst.py graph_on_device builds it; ~45 % of the arc bytes of
// the int32 + aux-CSR layout the CPU reference reads). The hot loops read an arc's word flag from `word_blocks`, a
// bit per arc in blocks of 32; the words of word arc r (r = the arc's rank among the word arcs, from the block's
// count and a popcount) are words[word_splits[r] .. word_splits[r + 1]).
struct DeviceGraph {
  const int32_t* row_splits;   // (N+1,)
  const int32_t* eps_begin;    // (N,) first epsilon arc of each state
  const int32_t* final_begin;  // (N,) first FINAL arc of each state
  const int32_t* dest;         // (A,)
  const int16_t* ilabel;       // (A,) column, EPSILON or FINAL: vocabularies up to kMaxDeviceTokens
  const int2* word_blocks;     // (ceil(A / 32),) x: bit i set = arc 32k + i outputs words; y: word arcs before block k
  const int32_t* word_splits;  // (word arcs + 1,)
  const int32_t* words;        // (total words,)
  const float* weight;         // (A,)
  int32_t num_states;
  int32_t start_state;
  int32_t final_state;
  bool has_eps;
  int32_t max_degree = 0;  // the largest out-degree of a state (0: not known); the emit-slots form needs it
};

inline constexpr int64_t kMaxDeviceTokens = 32768;  // int16 ilabel
inline constexpr int64_t kWordBlockArcs = 32;

using bitops::popcount32;

// Does arc `a` output any word?
WFST_HD bool arc_has_words(const DeviceGraph& g, int32_t a) {
  return (static_cast<uint32_t>(g.word_blocks[a >> 5].x) >> (a & 31)) & 1u;
}

// The words of arc `a`: g.words[begin .. end) (empty for an arc without words).
WFST_HD void arc_word_range(const DeviceGraph& g, int32_t a, int32_t& begin, int32_t& end) {
  const int2 block = g.word_blocks[a >> 5];
  const uint32_t bits = static_cast<uint32_t>(block.x), bit = 1u << (a & 31);
  if (!(bits & bit)) {
    begin = end = 0;
    return;
  }
  const int32_t r = block.y + popcount32(bits & (bit - 1u));
  begin = g.word_splits[r];
  end = g.word_splits[r + 1];
}

struct SearchOptions {
  float search_beam;
  float min_active;
  float max_active;
  bool allow_partial;
  float acoustic_scale;
  int32_t eps_iterations;
  bool online = false;        // k2 online semantics: emitting steps see no utterance end (wfst_defs.h)
  bool stream_chunk = false;  // streaming chunk (wfst_stream_launch.cu): the end of a lane's frames is not
                              // the end of its stream, so no final step happens in this call
};

struct Capacities {
  int32_t frontier;    // F: tokens (= claims) per lane and step
  int32_t candidates;  // C: admitted candidates per lane and pass
  int32_t hash;        // H: hash slots per lane (power of two)
  int64_t arena;       // back-pointer entries for the whole batch
  int32_t words;       // W: words per lane in the result
  // Recombination tables (and claim lists) per lane: 2 when the persistent kernel fuses each step's max into the
  // step before (one table per frontier buffer, see wfst_kernels.cuh "Fused max"), else 1.
  int32_t hash_tables = 1;
  // Each frontier token's emitting arc range carried beside it (Workspace::front_range): 1 with the HLG form's
  // carried ranges (opt-in: BEAMDEC_WFST_EARLY_LOADS=2; wfst_launch.cu), else 0 (8 bytes a token, both buffers).
  int32_t token_ranges = 0;
};

// Hash tables an offline decode of `batch` lanes uses (Capacities::hash_tables): 2 with the persistent kernel and the
// fused max (opt-in: BEAMDEC_WFST_FUSED_MAX=1; wfst_launch.cu says why) or the bound max (opt-in:
// BEAMDEC_WFST_BOUND_MAX=1, small batches), else 1. Read per call.
int32_t decode_hash_tables(int32_t batch);

// Whether the fused max is asked for (BEAMDEC_WFST_FUSED_MAX; its token skipping needs each frame's largest log-prob).
bool decode_fused_max();

// Capacities::token_ranges of an offline decode of `batch` lanes: 1 when BEAMDEC_WFST_EARLY_LOADS=2 (the carried
// ranges) or the bound max runs, else 0. Read per call.
int32_t decode_token_ranges(int32_t batch);

// Bytes of device workspace needed for `batch` lanes (one allocation, carved by the launcher).
size_t workspace_bytes(int32_t batch, const Capacities& caps);

// Decodes a batch: log_probs (B, T, V) row-major, fp32 (is_half = false) or fp16; lengths (B,) int32 on
// the device; boost tables (B, boost_capacity) (boost_capacity may be 0); max_length = max(lengths)
// (host value: the number of steps to enqueue). Writes result (B, kResultHeader + caps.words) int32.
// `workspace` must hold workspace_bytes(B, caps) bytes. Returns a CUDA error code (cudaSuccess on success).
// frame_max (B, T) fp32, the largest log-prob of each frame, and max_emit_weight, an upper bound of every emitting
// arc's weight, let the fused max skip tokens that cannot reach the step's maximum (wfst_kernels.cuh); null (or any
// boost table): no skipping. Neither changes a result.
cudaError_t decode_batch(const DeviceGraph& graph, const SearchOptions& opt, const Capacities& caps,
                         const void* log_probs, bool is_half, int32_t batch, int32_t frames, int32_t vocab,
                         const int32_t* lengths, int32_t max_length, const int32_t* boost_keys,
                         const float* boost_values, int32_t boost_capacity, void* workspace, int32_t* result,
                         int32_t num_sms, cudaStream_t stream, const float* frame_max = nullptr,
                         float max_emit_weight = 0.0f);

}  // namespace wfst
