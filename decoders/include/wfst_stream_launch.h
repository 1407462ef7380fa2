// Torch-free launcher interface of streaming WFST decoding on CUDA (implemented in
// decoders/csrc/wfst_stream_launch.cu; kernels: wfst_kernels.cuh + wfst_stream_kernels.cuh). Every pointer is device
// memory owned by the caller (decoders/csrc/wfst_stream_cuda.cpp); functions only enqueue work on `stream`.
//
// A workspace of `lanes` slots is laid out once (workspace_bytes) and persists across calls; slot = lane.
// lane_len (lanes,) int32 on the device: frames each lane steps in this call, -1 = not in this call.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "wfst_launch.h"

namespace wfst {
namespace stream {

size_t workspace_bytes(int32_t lanes, const Capacities& caps);
size_t gc_bytes(int32_t lanes, int64_t arena);

// Zeroes the workspace and the GC scratch (a fresh decoder: every lane parked, every table empty).
cudaError_t reset(void* workspace, void* gc, int32_t lanes, const Capacities& caps, cudaStream_t stream);

// Opens `lane`: clears its hash table, places the start token and runs the start state's epsilon closure
// (eps_passes > 0) with the lane's boost row.
cudaError_t open_lane(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, void* workspace,
                      int32_t lanes, int32_t lane, int32_t eps_passes, const int32_t* boost_keys,
                      const float* boost_values, int32_t boost_capacity, int32_t num_sms, cudaStream_t stream);

// Emitting steps: lane b reads lane_len[b] frames of log_probs[b] ((lanes, T, V), fp32 or fp16); `steps` =
// max(lane_len) (host value). opt.stream_chunk must be set.
cudaError_t advance(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, void* workspace,
                    int32_t lanes, const void* log_probs, bool is_half, int32_t T, int32_t V, const int32_t* lane_len,
                    int32_t steps, int32_t eps_passes, const int32_t* boost_keys, const float* boost_values,
                    int32_t boost_capacity, int32_t num_sms, cudaStream_t stream);

// The final step of the lanes with lane_len == 0 (others -1); their results are read with heads(final = true).
cudaError_t finalize(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, void* workspace,
                     int32_t lanes, const int32_t* lane_len, const int32_t* boost_keys, const float* boost_values,
                     int32_t boost_capacity, int32_t num_sms, cudaStream_t stream);

// Results of which[0..n): head (n, 5) int32 = {link, score bits, flags (wfst_defs.h), overflow bits, words}.
// final: the lanes just finalized; else partial (best frontier token, no end rules).
cudaError_t heads(const DeviceGraph& g, const Capacities& caps, void* workspace, int32_t lanes, const int32_t* which,
                  int32_t n, bool final, int32_t* head, cudaStream_t stream);

// The words of heads' chains, oldest first, into rows (n, W) (W >= every head's word count).
cudaError_t words(const DeviceGraph& g, const Capacities& caps, void* workspace, int32_t lanes, int32_t n,
                  const int32_t* head, int32_t W, int32_t* rows, cudaStream_t stream);

// Per lane {n_front, overflow bits} into out (lanes, 2) int32.
cudaError_t lane_stats(const Capacities& caps, void* workspace, int32_t lanes, int32_t* out, cudaStream_t stream);

// The arena cursor (device pointer to one unsigned long long: word links in use).
const unsigned long long* arena_cursor(void* workspace, int32_t lanes, const Capacities& caps);

// Garbage collection of the word-link arena (wfst_stream_kernels.cuh): drains each open lane's converged prefix
// into drain (lanes, D) (arc ids, oldest first; counts in drain_count (lanes,)) and compacts the rest.
cudaError_t collect(const Capacities& caps, void* workspace, void* gc, int32_t lanes, const int32_t* open, int32_t D,
                    int32_t* drain, int32_t* drain_count, cudaStream_t stream);

}  // namespace stream
}  // namespace wfst
