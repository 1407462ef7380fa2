// Torch-facing CUDA op of the WFST beam search: validates the arguments, allocates the workspace from
// torch's caching allocator, takes the current stream and calls the torch-free launcher
// (decoders/csrc/wfst_launch.cu). The result stays on the device; decoders/wfst.py copies it once.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <torch/types.h>

#include "wfst_defs.h"
#include "wfst_device_graph.h"
#include "wfst_launch.h"
#include "wfst_ops.h"

namespace beamdec {

at::Tensor wfst_decode_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                            const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                            const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words, const at::Tensor& weight,
                            int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                            const at::Tensor& boost_values, double search_beam, int64_t min_active,
                            int64_t max_active, bool allow_partial, double acoustic_scale, int64_t eps_iterations,
                            int64_t frontier_capacity, int64_t candidate_capacity, int64_t hash_capacity,
                            int64_t arena_capacity, int64_t words_capacity, bool online,
                            double max_emit_weight, int64_t max_degree) {
  wfst_check_inputs(log_probs, lengths, row_splits, eps_begin, final_begin, dest, ilabel, aux_splits, aux_words, weight, start_state,
                    final_state, boost_keys, boost_values, search_beam, min_active, max_active, eps_iterations,
                    words_capacity);
  BEAMDEC_CHECK(log_probs.is_cuda(), "wfst_decode_cuda: log_probs must be a CUDA tensor");
  BEAMDEC_CHECK(frontier_capacity >= 1 && frontier_capacity < (1 << 28), "wfst_decode: frontier_capacity out of range");
  BEAMDEC_CHECK(candidate_capacity >= 1 && candidate_capacity < (1LL << 31),
              "wfst_decode: candidate_capacity out of range");
  BEAMDEC_CHECK(hash_capacity >= 2 && (hash_capacity & (hash_capacity - 1)) == 0 && hash_capacity < (1LL << 31),
              "wfst_decode: hash_capacity must be a power of two >= 2");
  BEAMDEC_CHECK(arena_capacity >= 1 && arena_capacity < (1LL << 31), "wfst_decode: arena_capacity out of range");
  BEAMDEC_CHECK(words_capacity < (1LL << 30), "wfst_decode: words_capacity out of range");
  c10::cuda::CUDAGuard guard(log_probs.device());
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);

  const auto* len_host = lengths.data_ptr<int64_t>();
  int64_t max_length = 0;
  for (int64_t b = 0; b < B; ++b) max_length = std::max(max_length, len_host[b]);
  auto dev_i32 = at::TensorOptions().dtype(at::kInt).device(log_probs.device());
  at::Tensor lengths_dev = lengths.to(at::kInt).to(log_probs.device(), /*non_blocking=*/true);

  // Closures are enqueued only for graphs with epsilon arcs: decoders/wfst.py passes eps_iterations = 0
  // for epsilon-free graphs (it knows from the upload), so no device->host read is needed here.
  const bool has_eps = eps_iterations > 0;

  wfst::DeviceGraph g = device_graph(row_splits, eps_begin, final_begin, dest, ilabel, aux_splits, aux_words, weight,
                                     start_state, final_state, has_eps);
  // the largest out-degree, from the caller's upload (decoders/wfst.py; 0: not known): the emit-slots form's packing
  g.max_degree = max_degree > 0 && max_degree < (1LL << 31) ? static_cast<int32_t>(max_degree) : 0;
  wfst::SearchOptions opt{static_cast<float>(search_beam), static_cast<float>(min_active),
                          static_cast<float>(max_active), allow_partial, static_cast<float>(acoustic_scale),
                          static_cast<int32_t>(eps_iterations), online};
  wfst::Capacities caps{static_cast<int32_t>(frontier_capacity), static_cast<int32_t>(candidate_capacity),
                        static_cast<int32_t>(hash_capacity), arena_capacity, static_cast<int32_t>(words_capacity)};
  caps.hash_tables = wfst::decode_hash_tables(static_cast<int32_t>(B));
  caps.token_ranges = wfst::decode_token_ranges(static_cast<int32_t>(B));
  // The fused max's token skipping (wfst_kernels.cuh): each frame's largest log-prob and the bound of the arc
  // weights the caller passed (decoders/wfst.py; >= 1e30: none given, no skipping).
  at::Tensor frame_max;
  const bool skip = wfst::decode_fused_max() && max_emit_weight < 1e30 && boost_keys.size(1) == 0 && B > 0 && T > 0;
  if (skip) frame_max = std::get<0>(log_probs.max(-1)).to(at::kFloat).contiguous();

  at::Tensor result = at::zeros({B, wfst::kResultHeader + words_capacity}, dev_i32);
  const size_t ws_bytes = wfst::workspace_bytes(static_cast<int32_t>(B), caps);
  at::Tensor workspace =
      at::empty({static_cast<int64_t>(ws_bytes)}, at::TensorOptions().dtype(at::kByte).device(log_probs.device()));
  const int64_t C = boost_keys.size(1);
  int num_sms = 0;
  cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, log_probs.device().index());
  cudaError_t err = wfst::decode_batch(
      g, opt, caps, log_probs.data_ptr(), log_probs.scalar_type() == at::kHalf, static_cast<int32_t>(B),
      static_cast<int32_t>(T), static_cast<int32_t>(V), lengths_dev.data_ptr<int32_t>(),
      static_cast<int32_t>(max_length), C ? boost_keys.data_ptr<int32_t>() : nullptr,
      C ? boost_values.data_ptr<float>() : nullptr, static_cast<int32_t>(C), workspace.data_ptr(),
      result.data_ptr<int32_t>(), num_sms, c10::cuda::getCurrentCUDAStream().stream(),
      skip ? frame_max.data_ptr<float>() : nullptr, static_cast<float>(max_emit_weight));
  BEAMDEC_CHECK(err == cudaSuccess, "wfst_decode_cuda: CUDA error ", cudaGetErrorString(err));
  return result;
}

}  // namespace beamdec
