// Torch-free launcher interface of the CUDA WFST decoder (implemented in decoders/csrc/wfst_launch.cu).
// Every pointer is device memory owned by the caller (decoders/csrc/wfst_cuda.cpp allocates it from
// torch's caching allocator); the launcher only enqueues work on `stream` and never synchronises.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace wfst {

struct DeviceGraph {
  const int32_t* row_splits;   // (N+1,)
  const int32_t* eps_begin;    // (N,) first epsilon arc of each state
  const int32_t* final_begin;  // (N,) first FINAL arc of each state
  const int32_t* dest;         // (A,)
  const int32_t* ilabel;       // (A,)
  const int32_t* aux_splits;   // (A+1,) words of arc a: aux_words[aux_splits[a] .. aux_splits[a+1])
  const int32_t* aux_words;
  const float* weight;         // (A,)
  int32_t num_states;
  int32_t start_state;
  int32_t final_state;
  bool has_eps;
};

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
};

// Bytes of device workspace needed for `batch` lanes (one allocation, carved by the launcher).
size_t workspace_bytes(int32_t batch, const Capacities& caps);

// Decodes a batch: log_probs (B, T, V) row-major, fp32 (is_half = false) or fp16; lengths (B,) int32 on
// the device; boost tables (B, boost_capacity) (boost_capacity may be 0); max_length = max(lengths)
// (host value: the number of steps to enqueue). Writes result (B, kResultHeader + caps.words) int32.
// `workspace` must hold workspace_bytes(B, caps) bytes. Returns a CUDA error code (cudaSuccess on success).
cudaError_t decode_batch(const DeviceGraph& graph, const SearchOptions& opt, const Capacities& caps,
                         const void* log_probs, bool is_half, int32_t batch, int32_t frames, int32_t vocab,
                         const int32_t* lengths, int32_t max_length, const int32_t* boost_keys,
                         const float* boost_values, int32_t boost_capacity, void* workspace, int32_t* result,
                         int32_t num_sms, cudaStream_t stream);

}  // namespace wfst
