// Torch-facing CUDA op of the lattice mode: validates, allocates the workspace and arenas from torch's caching
// allocator, runs the forward pass on the device (decoders/csrc/wfst_lattice_launch.cu), copies the arenas to the
// host once and prunes there with the CPU reference's prune (wfst_lattice_host.h), so both backends return the same
// canonical lattices (CPU tensors).
#include <ATen/Parallel.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/types.h>

#include <algorithm>

#include "wfst_defs.h"
#include "wfst_lattice_host.h"
#include "wfst_lattice_launch.h"
#include "wfst_lattice_ops.h"
#include "wfst_ops.h"

namespace beamdec {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
wfst_lattice_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
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
                    eps_level.is_cpu(),
                "wfst_lattice: eps_level must be a contiguous CPU int32 tensor with one entry per state (", N, ")");
  BEAMDEC_CHECK(output_beam > 0, "wfst_lattice: output_beam must be > 0 (+inf keeps every arc), got ", output_beam);
  BEAMDEC_CHECK(A < wfst::kLatticeEpsArcBit, "wfst_lattice_cuda: the graph has too many arcs (", A, ") for lattices");
  BEAMDEC_CHECK(frontier_capacity >= 1 && frontier_capacity < (1LL << 28), "wfst_lattice: frontier_capacity out of range");
  BEAMDEC_CHECK(candidate_capacity >= 1 && candidate_capacity < (1LL << 30),
                "wfst_lattice: candidate_capacity out of range");
  BEAMDEC_CHECK(token_capacity >= 1 && token_capacity < (1LL << 31), "wfst_lattice: token_capacity out of range");
  BEAMDEC_CHECK(arc_capacity >= 1 && arc_capacity < (1LL << 31), "wfst_lattice: arc_capacity out of range");
  c10::cuda::CUDAGuard guard(log_probs.device());
  const int64_t* len_host = lengths.data_ptr<int64_t>();
  int64_t max_length = 0;
  for (int64_t b = 0; b < B; ++b) max_length = std::max(max_length, len_host[b]);
  const int64_t S = max_length + 2;
  const auto dev = log_probs.device();
  auto on = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).device(dev); };
  at::Tensor lengths_dev = lengths.to(at::kInt).to(dev);
  const bool has_eps = eps_iterations > 0;  // decoders/lattice.py passes 0 for epsilon-free graphs
  wfst::DeviceGraph g{row_splits.data_ptr<int32_t>(), eps_begin.data_ptr<int32_t>(), final_begin.data_ptr<int32_t>(),
                      dest.data_ptr<int32_t>(),       ilabel.data_ptr<int32_t>(),    aux_splits.data_ptr<int32_t>(),
                      aux_words.data_ptr<int32_t>(),  weight.data_ptr<float>(),      static_cast<int32_t>(N),
                      static_cast<int32_t>(start_state), static_cast<int32_t>(final_state), has_eps};
  wfst::SearchOptions opt{static_cast<float>(search_beam), static_cast<float>(min_active),
                          static_cast<float>(max_active), allow_partial, static_cast<float>(acoustic_scale),
                          static_cast<int32_t>(eps_iterations)};
  wfst::LatticeCapacities caps{static_cast<int32_t>(frontier_capacity), static_cast<int32_t>(candidate_capacity),
                               token_capacity, arc_capacity};
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

  // One copy of what was used (the cursors may exceed the capacities on overflow).
  at::Tensor used = cursors.cpu();
  const int64_t n_tok = std::min<int64_t>(used.data_ptr<int64_t>()[0], token_capacity);
  const int64_t n_arc = std::min<int64_t>(used.data_ptr<int64_t>()[1], arc_capacity);
  at::Tensor h_state = tok_state.narrow(0, 0, n_tok).cpu(), h_score = tok_score.narrow(0, 0, n_tok).cpu();
  at::Tensor h_arcs = arcs.narrow(0, 0, n_arc).cpu();
  at::Tensor h_fb = frame_begin.cpu(), h_fc = frame_count.cpu(), h_bb = block_begin.cpu(), h_bc = block_count.cpu();
  at::Tensor h_lane = lane_result.cpu();
  const int32_t* st = h_state.data_ptr<int32_t>();
  const float* sc = h_score.data_ptr<float>();
  const wfst::LatticeArc* ar = reinterpret_cast<const wfst::LatticeArc*>(h_arcs.data_ptr<int32_t>());
  const int32_t* fb = h_fb.data_ptr<int32_t>();
  const int32_t* fc = h_fc.data_ptr<int32_t>();
  const int64_t* bb = h_bb.data_ptr<int64_t>();
  const int32_t* bc = h_bc.data_ptr<int32_t>();
  const int32_t* lr = h_lane.data_ptr<int32_t>();
  const int32_t* levels = eps_level.data_ptr<int32_t>();
  std::vector<lattice::UttLattice> lats(static_cast<size_t>(B));
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t len = len_host[b], frames = len + 2;
      lattice::RawLattice raw;
      raw.overflow = lr[2 * b];
      raw.redirected = lr[2 * b + 1] != 0;
      std::vector<int64_t> local_off(static_cast<size_t>(frames) + 1, 0);
      raw.frame_begin.assign(1, 0);
      for (int64_t f = 0; f < frames; ++f) {
        const int64_t k = b * S + f, base = fb[k], n = fc[k];
        const bool ok = base >= 0 && base + n <= n_tok;  // a frame lost to an overflowed arena stays empty
        if (ok)
          for (int64_t i = 0; i < n; ++i) {
            raw.tok_state.push_back(st[base + i]);
            raw.tok_score.push_back(sc[base + i]);
          }
        local_off[f + 1] = local_off[f] + (ok ? n : 0);
        raw.frame_begin.push_back(local_off[f + 1]);
      }
      auto local = [&](int64_t g_id, int64_t f) -> int64_t {  // arena id -> utterance-local id, -1 if foreign
        if (f < 0 || f >= frames) return -1;
        const int64_t k = b * S + f, base = fb[k], n = local_off[f + 1] - local_off[f];
        return (g_id >= base && g_id < base + n) ? local_off[f] + (g_id - base) : -1;
      };
      for (int64_t f = 0; f < frames; ++f) {
        const int64_t k = b * S + f, base = bb[k], m = bc[k];
        if (base < 0 || base + m > n_arc) continue;
        for (int64_t i = 0; i < m; ++i) {
          const wfst::LatticeArc& a = ar[base + i];
          if (a.src < 0) continue;
          const bool eps = (a.arc & wfst::kLatticeEpsArcBit) != 0;
          const int64_t s = local(a.src, eps ? f : f - 1), d = local(a.dst, f);
          if (s < 0 || d < 0) continue;
          raw.arcs.push_back({static_cast<int32_t>(s), static_cast<int32_t>(d), a.arc & ~wfst::kLatticeEpsArcBit,
                              a.ll});
        }
      }
      lattice::prune_lattice(levels, static_cast<int32_t>(final_state), static_cast<float>(output_beam), raw, lats[b]);
    }
  });
  return lattice::pack_lattices(lats);
}

}  // namespace beamdec
