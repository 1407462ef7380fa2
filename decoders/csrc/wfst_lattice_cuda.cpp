// Torch-facing CUDA op of the lattice mode: validates, allocates the workspace and arenas from torch's caching
// allocator, runs the forward pass and the backward output-beam prune on the device (decoders/csrc/
// wfst_lattice_launch.cu), copies only the kept tokens and arcs to the host and numbers them there with the CPU
// reference's canonical order (wfst_lattice_host.h), so both backends return the same lattices (CPU tensors).
#include <ATen/Parallel.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <vector>

#include "wfst_defs.h"
#include "wfst_device_graph.h"
#include "wfst_lattice_host.h"
#include "wfst_lattice_launch.h"
#include "wfst_lattice_ops.h"
#include "wfst_ops.h"

namespace beamdec {

LatticeGathered
wfst_lattice_gather_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                  const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                  const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words,
                  const at::Tensor& weight, int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                  const at::Tensor& boost_values, double search_beam, int64_t min_active, int64_t max_active,
                  bool allow_partial, double acoustic_scale, int64_t eps_iterations, const at::Tensor& eps_level,
                  double output_beam, int64_t frontier_capacity, int64_t candidate_capacity, int64_t token_capacity,
                  int64_t arc_capacity) {
  wfst_check_inputs(log_probs, lengths, row_splits, eps_begin, final_begin, dest, ilabel, aux_splits, aux_words, weight,
                    start_state, final_state, boost_keys, boost_values, search_beam, min_active, max_active,
                    eps_iterations, 1);
  BEAMDEC_CHECK(log_probs.is_cuda(), "wfst_lattice_cuda: log_probs must be a CUDA tensor");
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
  const int64_t N = row_splits.numel() - 1, A = dest.numel();
  BEAMDEC_CHECK(eps_level.scalar_type() == at::kInt && eps_level.is_contiguous() && eps_level.numel() == N &&
                    (eps_level.is_cpu() || eps_level.device() == log_probs.device()),
                "wfst_lattice: eps_level must be a contiguous int32 tensor with one entry per state (", N,
                "), on the CPU or the log-probs' device");
  BEAMDEC_CHECK(output_beam > 0, "wfst_lattice: output_beam must be > 0 (+inf keeps every arc), got ", output_beam);
  BEAMDEC_CHECK(A < wfst::kLatticeEpsArcBit, "wfst_lattice_cuda: the graph has too many arcs (", A, ") for lattices");
  BEAMDEC_CHECK(frontier_capacity >= 1 && frontier_capacity < (1LL << 28), "wfst_lattice: frontier_capacity out of range");
  BEAMDEC_CHECK(candidate_capacity >= 1 && candidate_capacity < (1LL << 30),
                "wfst_lattice: candidate_capacity out of range");
  BEAMDEC_CHECK(token_capacity >= 1 && token_capacity < (1LL << 31), "wfst_lattice: token_capacity out of range");
  BEAMDEC_CHECK(arc_capacity >= 1 && arc_capacity < (1LL << 31), "wfst_lattice: arc_capacity out of range");
  c10::cuda::CUDAGuard guard(log_probs.device());
  lattice::PhaseTimer timer("wfst_lattice_cuda");
  const int64_t* len_host = lengths.data_ptr<int64_t>();
  int64_t max_length = 0;
  for (int64_t b = 0; b < B; ++b) max_length = std::max(max_length, len_host[b]);
  const int64_t S = max_length + 2;
  const auto dev = log_probs.device();
  auto on = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).device(dev); };
  at::Tensor lengths_dev = lengths.to(at::kInt).to(dev);
  const bool has_eps = eps_iterations > 0;  // decoders/lattice.py passes 0 for epsilon-free graphs
  const wfst::DeviceGraph g = device_graph(row_splits, eps_begin, final_begin, dest, ilabel, aux_splits, aux_words,
                                           weight, start_state, final_state, has_eps);
  wfst::SearchOptions opt{static_cast<float>(search_beam), static_cast<float>(min_active),
                          static_cast<float>(max_active), allow_partial, static_cast<float>(acoustic_scale),
                          static_cast<int32_t>(eps_iterations)};
  wfst::LatticeCapacities caps{static_cast<int32_t>(frontier_capacity), static_cast<int32_t>(candidate_capacity),
                               token_capacity, arc_capacity, lattice_map_slots(B, frontier_capacity, N)};
  at::Tensor workspace = at::empty({static_cast<int64_t>(wfst::lattice_workspace_bytes(
                                       static_cast<int32_t>(B), static_cast<int32_t>(N), caps))},
                                   on(at::kByte));
  at::Tensor tok_state = at::empty({token_capacity}, on(at::kInt));
  at::Tensor tok_score = at::empty({token_capacity}, on(at::kFloat));
  at::Tensor arcs = at::empty({arc_capacity, 4}, on(at::kInt));  // LatticeArc {src, dst, arc, ll bits}
  at::Tensor frame_begin = at::zeros({B, S}, on(at::kInt)), frame_count = at::zeros({B, S}, on(at::kInt));
  at::Tensor block_begin = at::zeros({B, S}, on(at::kLong)), block_count = at::zeros({B, S}, on(at::kInt));
  at::Tensor lane_result = at::zeros({B, 2}, on(at::kInt));
  at::Tensor cursors = at::zeros({2}, on(at::kLong));
  timer.bytes(caps.map_slots > 0 ? "workspace (hashed state map)" : "workspace (dense state map)",
              workspace.numel());
  timer.bytes("token arena", token_capacity * 8);
  timer.bytes("arc arena", arc_capacity * 16);
  wfst::LatticeOutputs out{tok_state.data_ptr<int32_t>(),
                           tok_score.data_ptr<float>(),
                           reinterpret_cast<wfst::LatticeArc*>(arcs.data_ptr<int32_t>()),
                           frame_begin.data_ptr<int32_t>(),
                           frame_count.data_ptr<int32_t>(),
                           block_begin.data_ptr<int64_t>(),
                           block_count.data_ptr<int32_t>(),
                           lane_result.data_ptr<int32_t>(),
                           reinterpret_cast<unsigned long long*>(cursors.data_ptr<int64_t>())};
  const int64_t C = boost_keys.size(1);
  cudaError_t err = wfst::lattice_forward(
      g, opt, caps, log_probs.data_ptr(), log_probs.scalar_type() == at::kHalf, static_cast<int32_t>(B),
      static_cast<int32_t>(T), static_cast<int32_t>(V), lengths_dev.data_ptr<int32_t>(),
      static_cast<int32_t>(max_length), C ? boost_keys.data_ptr<int32_t>() : nullptr,
      C ? boost_values.data_ptr<float>() : nullptr, static_cast<int32_t>(C), workspace.data_ptr(), out,
      c10::cuda::getCurrentCUDAStream().stream());
  BEAMDEC_CHECK(err == cudaSuccess, "wfst_lattice_cuda: CUDA error ", cudaGetErrorString(err));

  // The output-beam prune on the device; only what survives travels to the host. Its buffers are sized by what the
  // forward pass used (the kernel reads tokens and arcs below the cursors only), not by the arenas' capacities.
  at::Tensor used = cursors.cpu();
  timer.mark("forward (allocation, kernels, cursor read-back)");
  const int64_t n_tok = std::min<int64_t>(used.data_ptr<int64_t>()[0], token_capacity);
  const int64_t n_arc = std::min<int64_t>(used.data_ptr<int64_t>()[1], arc_capacity);
  at::Tensor bwd = at::zeros({std::max<int64_t>(n_tok, 1)}, on(at::kInt));
  at::Tensor tok_frame = at::full({std::max<int64_t>(n_tok, 1)}, -1, on(at::kInt));
  at::Tensor tok_lane = at::empty({std::max<int64_t>(n_tok, 1)}, on(at::kInt));
  at::Tensor arc_keep = at::zeros({std::max<int64_t>(n_arc, 1)}, on(at::kByte));
  at::Tensor lane_out = at::empty({B, 4}, on(at::kInt));
  at::Tensor levels = eps_level.to(dev);  // a no-op for the device copy decoders/lattice.py passes
  wfst::LatticePruneBuffers buf{reinterpret_cast<uint32_t*>(bwd.data_ptr<int32_t>()), tok_frame.data_ptr<int32_t>(),
                                tok_lane.data_ptr<int32_t>(), arc_keep.data_ptr<uint8_t>(),
                                lane_out.data_ptr<int32_t>()};
  err = wfst::lattice_prune(caps, out, static_cast<int32_t>(B), static_cast<int32_t>(max_length),
                            lengths_dev.data_ptr<int32_t>(), levels.data_ptr<int32_t>(),
                            static_cast<int32_t>(final_state), static_cast<float>(output_beam), buf,
                            c10::cuda::getCurrentCUDAStream().stream());
  BEAMDEC_CHECK(err == cudaSuccess, "wfst_lattice_cuda: CUDA error ", cudaGetErrorString(err));
  at::Tensor keep = tok_frame.narrow(0, 0, n_tok) >= 0;
  at::Tensor tidx = at::nonzero(keep).squeeze(1);
  at::Tensor aidx = at::nonzero(arc_keep.narrow(0, 0, n_arc)).squeeze(1);
  at::Tensor kstate = tok_state.index_select(0, tidx);
  // each kept arc's ends as positions among the kept tokens (an exclusive count of the kept tokens below the arena
  // id, on the device; ids clamped into the arena so a bad one is caught on the host below, not by a device fault)
  at::Tensor position_of = at::cumsum(keep.to(at::kInt), 0, at::kInt) - 1;
  at::Tensor kept_arcs = arcs.index_select(0, aidx);
  auto ends = [&](int64_t col) {
    return position_of.index_select(0, kept_arcs.select(1, col).clamp(0, std::max<int64_t>(n_tok - 1, 0)).to(at::kLong));
  };
  at::Tensor h_pos = n_tok > 0 ? at::stack({ends(0), ends(1)}, 1).cpu()
                               : at::full({kept_arcs.size(0), 2}, -1, at::TensorOptions().dtype(at::kInt));
  // kept tokens, by arena id: [id, lane, frame, graph state, eps level, forward bits, ordered backward]
  const at::Tensor klane = tok_lane.index_select(0, tidx);
  // BEAMDEC_LATTICE_GROUP=device (opt-in): the grouping by utterance as a stable sort on the device
  // (wfst_lattice_host.h group_by_lane) instead of wfst_lattice_assemble's host loop on one thread. H100, bench
  // compact TLG, batch 200 (session 17): 24-27 ms against the loop's 35-40 ms, lattice RTFx 2,699 vs 2,614; the
  // lattice gpu tests (197) and memcheck passed under it. The loop stays the default: decode_lattice runs the
  // assembly beside the rescue's GPU pass, where the loop is off the critical path and the sort would be on it.
  const char* group_env = std::getenv("BEAMDEC_LATTICE_GROUP");
  const bool device_group = group_env != nullptr && std::strcmp(group_env, "device") == 0;
  at::Tensor g_tok_order = at::empty({0}, at::kLong), g_tok_begin = g_tok_order, g_local = g_tok_order,
             g_arc_order = g_tok_order, g_arc_begin = g_tok_order;
  if (device_group) {
    // arc sources clamped into [0, K) for the sort; the host checks every position (wfst_lattice_assemble). No kept
    // token (K = 0): no arc may be kept either (the check throws), so the sort gets none
    const int64_t k_kept = tidx.size(0);
    const at::Tensor src = k_kept > 0 ? ends(0).clamp(0, k_kept - 1) : at::zeros({0}, on(at::kLong));
    const auto g = lattice::group_by_lane(klane, src, B);
    g_tok_order = std::get<0>(g).cpu();
    g_tok_begin = std::get<1>(g).cpu();
    g_local = std::get<2>(g).cpu();
    g_arc_order = std::get<3>(g).cpu();
    g_arc_begin = std::get<4>(g).cpu();
  }
  at::Tensor h_tok = at::stack({tidx.to(at::kInt), klane, tok_frame.index_select(0, tidx),
                                kstate, levels.index_select(0, kstate), tok_score.index_select(0, tidx).view(at::kInt),
                                bwd.index_select(0, tidx)},
                               1)
                         .cpu();
  at::Tensor h_arc = kept_arcs.cpu();  // kept arcs {src, dst (arena ids), arc | eps bit, ll bits}
  at::Tensor h_lane = lane_out.cpu(), h_res = lane_result.cpu();
  timer.mark("prune + gather + device-to-host");
  return {h_tok, h_arc, h_pos, h_lane, h_res, g_tok_order, g_tok_begin, g_local, g_arc_order, g_arc_begin};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
wfst_lattice_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                  const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                  const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words,
                  const at::Tensor& weight, int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                  const at::Tensor& boost_values, double search_beam, int64_t min_active, int64_t max_active,
                  bool allow_partial, double acoustic_scale, int64_t eps_iterations, const at::Tensor& eps_level,
                  double output_beam, int64_t frontier_capacity, int64_t candidate_capacity, int64_t token_capacity,
                  int64_t arc_capacity) {
  const LatticeGathered x = wfst_lattice_gather_cuda(
      log_probs, lengths, row_splits, eps_begin, final_begin, dest, ilabel, aux_splits, aux_words, weight, start_state,
      final_state, boost_keys, boost_values, search_beam, min_active, max_active, allow_partial, acoustic_scale,
      eps_iterations, eps_level, output_beam, frontier_capacity, candidate_capacity, token_capacity, arc_capacity);
  return std::apply(lattice::assemble_lattices, x);
}

}  // namespace beamdec
