// Torch-free launcher of the CUDA WFST decoder: carves the caller's workspace and enqueues the whole
// decode (init, every step, epsilon closures, backtrack) on `stream` without a host synchronisation.
// Kernels: decoders/include/wfst_kernels.cuh.
#include "wfst_kernels.cuh"
#include "wfst_launch.h"

namespace wfst {
namespace {

using kernels::Workspace;

constexpr size_t kAlign = 256;

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Walks the workspace layout once: with base == nullptr it only measures.
size_t carve(char* base, int32_t B, const Capacities& c, Workspace* ws) {
  size_t off = 0;
  auto take = [&](size_t bytes) -> void* {
    void* p = base ? base + off : nullptr;
    off += align_up(bytes);
    return p;
  };
  const size_t BF = static_cast<size_t>(B) * c.frontier;
  const size_t BH = static_cast<size_t>(B) * c.hash;
  Workspace w{};
  w.lanes = static_cast<kernels::LaneState*>(take(sizeof(kernels::LaneState) * B));
  w.lane_offsets = static_cast<int32_t*>(take(sizeof(int32_t) * (B + 1)));
  for (int k = 0; k < 2; ++k) {
    w.front_state[k] = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
    w.front_score[k] = static_cast<float*>(take(sizeof(float) * BF));
    w.front_winner[k] = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
  }
  w.tok_first = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
  w.arc_offsets = static_cast<int32_t*>(take(sizeof(int32_t) * (BF + B)));
  w.dirty = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
  w.claims = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
  w.hash_key = static_cast<uint32_t*>(take(sizeof(uint32_t) * BH));
  w.hash_val = static_cast<unsigned long long*>(take(sizeof(unsigned long long) * BH));
  w.cands = static_cast<int2*>(take(sizeof(int2) * static_cast<size_t>(B) * c.candidates));
  w.arena = static_cast<int2*>(take(sizeof(int2) * static_cast<size_t>(c.arena)));
  w.arena_cursor = static_cast<unsigned long long*>(take(sizeof(unsigned long long)));
  if (ws) *ws = w;
  return off;
}

template <typename scalar_t>
cudaError_t run(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, const scalar_t* lp,
                int32_t B, int32_t T, int32_t V, const int32_t* lengths, int32_t max_length,
                const int32_t* boost_keys, const float* boost_values, int32_t boost_cap, void* workspace,
                int32_t* result, int32_t num_sms, cudaStream_t stream) {
  using namespace kernels;
  Workspace ws;
  carve(static_cast<char*>(workspace), B, caps, &ws);
  const int32_t F = caps.frontier, C = caps.candidates, H = caps.hash;
  cudaError_t err;
  // Hash tables start empty (keys all-ones, payload 0); later steps clear only what they claimed.
  if ((err = cudaMemsetAsync(ws.hash_key, 0xff, sizeof(uint32_t) * static_cast<size_t>(B) * H, stream))) return err;
  if ((err = cudaMemsetAsync(ws.hash_val, 0, sizeof(unsigned long long) * static_cast<size_t>(B) * H, stream)))
    return err;
  if ((err = cudaMemsetAsync(ws.arena_cursor, 0, sizeof(unsigned long long), stream))) return err;

  const int walk_grid = (num_sms > 0 ? num_sms : 80) * 8;
  const int lane_grid = (B + 127) / 128;
  InitKernel<<<lane_grid, 128, 0, stream>>>(g, opt, ws, lengths, B, F, H);

  auto closure = [&](int32_t t, int32_t buf) {
    for (int32_t k = 0; k < opt.eps_iterations; ++k) {
      ScanKernel<<<B, kBlock, 0, stream>>>(g, opt, ws, t, kModeEps, buf, F);
      LaneScanKernel<<<1, kBlock, 0, stream>>>(ws, B);
      ExpandKernel<scalar_t><<<walk_grid, kWalkBlock, 0, stream>>>(g, opt, ws, lp, T, V, t, buf, kModeEps, F, C, H, B,
                                                                   boost_keys, boost_values, boost_cap);
      ResolveKernel<<<B, kBlock, 0, stream>>>(g, ws, kModeEps, buf, F, C, H, caps.arena, true);
    }
    ClearKernel<<<B, kBlock, 0, stream>>>(ws, F, H);
  };

  if (g.has_eps) closure(0, 0);
  for (int32_t t = 0; t <= max_length; ++t) {
    const int32_t buf = t & 1, out = buf ^ 1;
    ScanKernel<<<B, kBlock, 0, stream>>>(g, opt, ws, t, kModeStep, buf, F);
    LaneScanKernel<<<1, kBlock, 0, stream>>>(ws, B);
    MaxKernel<scalar_t><<<walk_grid, kWalkBlock, 0, stream>>>(g, opt, ws, lp, T, V, t, buf, F, B, boost_keys,
                                                              boost_values, boost_cap);
    ExpandKernel<scalar_t><<<walk_grid, kWalkBlock, 0, stream>>>(g, opt, ws, lp, T, V, t, buf, kModeStep, F, C, H, B,
                                                                 boost_keys, boost_values, boost_cap);
    ResolveKernel<<<B, kBlock, 0, stream>>>(g, ws, kModeStep, out, F, C, H, caps.arena, g.has_eps);
    if (g.has_eps) closure(t, out);
  }
  BacktrackKernel<<<lane_grid, 128, 0, stream>>>(g, ws, B, caps.words, caps.arena, result);
  return cudaGetLastError();
}

}  // namespace

size_t workspace_bytes(int32_t batch, const Capacities& caps) { return carve(nullptr, batch, caps, nullptr); }

cudaError_t decode_batch(const DeviceGraph& graph, const SearchOptions& opt, const Capacities& caps,
                         const void* log_probs, bool is_half, int32_t batch, int32_t frames, int32_t vocab,
                         const int32_t* lengths, int32_t max_length, const int32_t* boost_keys,
                         const float* boost_values, int32_t boost_capacity, void* workspace, int32_t* result,
                         int32_t num_sms, cudaStream_t stream) {
  if (batch == 0) return cudaSuccess;
  if (is_half)
    return run<__half>(graph, opt, caps, static_cast<const __half*>(log_probs), batch, frames, vocab, lengths,
                       max_length, boost_keys, boost_values, boost_capacity, workspace, result, num_sms, stream);
  return run<float>(graph, opt, caps, static_cast<const float*>(log_probs), batch, frames, vocab, lengths, max_length,
                    boost_keys, boost_values, boost_capacity, workspace, result, num_sms, stream);
}

}  // namespace wfst
