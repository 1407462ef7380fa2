// Torch-free launcher of the CUDA lattice forward pass: carves the caller's workspace and enqueues every step
// (decoders/include/wfst_lattice_kernels.cuh) on `stream` without a host synchronisation.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "wfst_coop_launch.cuh"
#include "wfst_lattice_kernels.cuh"
#include "wfst_lattice_launch.h"

namespace wfst {
namespace {

using lattice_kernels::LaneState;
using lattice_kernels::Sizes;
using lattice_kernels::Workspace;

constexpr size_t kAlign = 256;
constexpr int kThreads = 256;
// grid.x of the per-lane kernels (grid-stride loops inside): 32 blocks for a few lanes, fewer as the batch grows, so
// a launch stays about one wave of blocks (H200, tiny TLG, batch 200: 32 blocks per lane made resolve / eps_expand
// launches 30 us each, mostly idle blocks; the frontier of one lane is a few hundred to a few thousand tokens).
// BEAMDEC_LATTICE_BLOCKS_PER_LANE=<n> overrides it (a tuning knob for A/B measurements).
int blocks_per_lane(int32_t batch) {
  static const int forced = [] {
    const char* v = std::getenv("BEAMDEC_LATTICE_BLOCKS_PER_LANE");
    return v ? std::max(0, std::min(1024, std::atoi(v))) : 0;
  }();
  if (forced > 0) return forced;
  return batch <= 32 ? 32 : std::max(4, std::min(32, 1024 / batch));
}
// Which arc walk the expand / max / epsilon kernels use (wfst_lattice_kernels.cuh): BEAMDEC_LATTICE_WALK=adaptive
// (the default: unset or auto) the warp-cooperative walk with as many items per warp as spread each lane's items
// over its warps (Sizes::walk_items = 0), =warp the same with 32 items per warp, =token the one-item-per-warp walk.
// Measured on the H200 (tiny BPE compact TLG, 'other', acoustic scale 1, kernel time of the lattice pass,
// eval.bench.wfst_profile, one call each: session 6 reports/evidence/h200_2026-12-02/README_session6.md, session 7
// README_session7.md): batch 1 token 174.2 ms / warp 241.2 / adaptive 177.6, batch 200 214.0 / 104.1 / 99.2 --
// adaptive is within 2 % of the best walk at batch 1 and the best at 200, so no batch threshold is needed. Read on
// every call, so tests can compare the walks in one process; decoders/lattice.py rejects other values.
enum class Walk { kToken, kWarp, kAdaptive };
Walk walk_selected() {
  const char* v = std::getenv("BEAMDEC_LATTICE_WALK");
  if (v != nullptr && std::strcmp(v, "warp") == 0) return Walk::kWarp;
  if (v != nullptr && std::strcmp(v, "token") == 0) return Walk::kToken;
  return Walk::kAdaptive;
}
constexpr int kPruneThreads = 512;  // one block per lane walks its frames backwards

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

size_t carve(char* base, int32_t B, int32_t N, const LatticeCapacities& c, Workspace* ws) {
  size_t off = 0;
  auto take = [&](size_t bytes) -> void* {
    void* p = base ? base + off : nullptr;
    off += align_up(bytes);
    return p;
  };
  // the state map: (B, N) dense entries, or (B, map_slots) hash entries with their keys and each token's entry
  const size_t BN = static_cast<size_t>(B) * (c.map_slots > 0 ? c.map_slots : N);
  const size_t BF = static_cast<size_t>(B) * c.frontier;
  const size_t BC = static_cast<size_t>(B) * c.candidates;
  Workspace w{};
  w.lanes = static_cast<LaneState*>(take(sizeof(LaneState) * B));
  w.slot = static_cast<int32_t*>(take(sizeof(int32_t) * BN));
  w.dscore = static_cast<uint32_t*>(take(sizeof(uint32_t) * BN));
  if (c.map_slots > 0) {
    w.map_key = static_cast<uint32_t*>(take(sizeof(uint32_t) * BN));
    w.st_map = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
  }
  w.st_state = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
  w.st_score = static_cast<float*>(take(sizeof(float) * BF));
  for (int k = 0; k < 2; ++k) {
    w.dirty_idx[k] = static_cast<int32_t*>(take(sizeof(int32_t) * BF));
    w.dirty_score[k] = static_cast<float*>(take(sizeof(float) * BF));
  }
  w.cands = static_cast<LatticeArc*>(take(sizeof(LatticeArc) * BC));
  if (ws) *ws = w;
  return off;
}

// The forward pass as one cooperative launch of persistent_kernel (wfst_lattice_kernels.cuh) instead of ~16 launches
// a frame: the default below kLatticePersistentBatch lanes, BEAMDEC_LATTICE_PERSISTENT=1 / 0 forces it on / off (read on
// every call). H200, tiny BPE compact TLG, same call (session 8, wfst_profile/tiny_*_s8): batch 1 wall 225.8 vs
// 462.9 ms (kernels 185.9 vs 177.6: the launch gaps were the cost); batch 200 kernels 103.3-111.9 vs 91.3-97.3 ms, wall
// within noise, MBR bench slower -- so the launches stay above. kLatticePersistentBatch (32, wfst_defs.h) is a guess
// between the two measured batches.
// Its grid is every block that can be resident at once (occupancy x SMs), at most the larger of the plain grids.
// launch_persistent returns false with nothing enqueued (CUDA error state cleared) when the device or the launch
// refuses; enqueue then launches.
bool persistent_selected(int32_t batch) {
  const char* v = std::getenv("BEAMDEC_LATTICE_PERSISTENT");
  if (v != nullptr && std::strcmp(v, "1") == 0) return true;
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  return batch < kLatticePersistentBatch;
}

template <bool kWarpWalk, typename scalar_t>
bool launch_persistent(Workspace ws, Sizes P, DeviceGraph g, SearchOptions opt, const scalar_t* lp,
                       const int32_t* lengths, const int32_t* bk, const float* bv, int32_t bc, LatticeOutputs out,
                       int32_t max_length, int32_t passes, int32_t lane_blocks, int32_t lane_x, cudaStream_t stream) {
  using namespace lattice_kernels;
  void* args[] = {&ws, &P, &g, &opt, &lp, &lengths, &bk, &bv, &bc, &out, &max_length, &passes, &lane_blocks, &lane_x};
  const int64_t most = std::max<int64_t>(lane_blocks, static_cast<int64_t>(lane_x) * P.B);
  return cooperative_launch<persistent_kernel<kWarpWalk, scalar_t>>(
      kThreads, [&](int blocks_per_sm, int sms) { return std::min<int64_t>(int64_t{blocks_per_sm} * sms, most); },
      args, stream);
}

template <bool kWarpWalk, typename scalar_t>
cudaError_t enqueue(const DeviceGraph& g, const SearchOptions& opt, const LatticeCapacities& caps, const scalar_t* lp,
                    int32_t B, int32_t T, int32_t V, const int32_t* lengths, int32_t max_length, const int32_t* bk,
                    const float* bv, int32_t bc, void* workspace, const LatticeOutputs& out, int32_t walk_items,
                    bool persistent, cudaStream_t stream) {
  using namespace lattice_kernels;
  Workspace ws;
  carve(static_cast<char*>(workspace), B, g.num_states, caps, &ws);
  const int32_t S = max_length + 2;
  const Sizes P{B, T, V, g.num_states, caps.frontier, caps.candidates, S, caps.tokens, caps.arcs, walk_items,
                caps.map_slots};
  // state maps: slot -1 (0xff bytes), dscore 0, hash keys 0 (free)
  const size_t map_entries = static_cast<size_t>(B) * (caps.map_slots > 0 ? caps.map_slots : g.num_states);
  cudaError_t err = cudaMemsetAsync(ws.slot, 0xff, sizeof(int32_t) * map_entries, stream);
  if (err != cudaSuccess) return err;
  err = cudaMemsetAsync(ws.dscore, 0, sizeof(uint32_t) * map_entries, stream);
  if (err != cudaSuccess) return err;
  if (caps.map_slots > 0 && (err = cudaMemsetAsync(ws.map_key, 0, sizeof(uint32_t) * map_entries, stream)))
    return err;
  const dim3 lanes_grid((B + kThreads - 1) / kThreads), per_lane(blocks_per_lane(B), B);
  const int32_t passes = g.has_eps ? opt.eps_iterations : 0;
  if (persistent && launch_persistent<kWarpWalk, scalar_t>(ws, P, g, opt, lp, lengths, bk, bv, bc, out, max_length,
                                                           passes, lanes_grid.x, per_lane.x, stream))
    return cudaGetLastError();

  auto closure_and_commit = [&](int32_t frame) {
    if (g.has_eps) {
      for (int32_t p = 0; p < passes; ++p) {
        const int32_t r = p & 1, q = (p + 1) & 1;
        pass_setup_kernel<<<lanes_grid, kThreads, 0, stream>>>(ws, P, q);
        eps_expand_kernel<kWarpWalk><<<per_lane, kThreads, 0, stream>>>(ws, P, g, opt, bk, bv, bc, r);
        resolve_kernel<<<per_lane, kThreads, 0, stream>>>(ws, P, g, true, q);
      }
      eps_finish_kernel<<<lanes_grid, kThreads, 0, stream>>>(ws, P, passes & 1);
      record_eps_kernel<kWarpWalk><<<per_lane, kThreads, 0, stream>>>(ws, P, g, opt, bk, bv, bc);
    }
    commit_alloc_kernel<<<lanes_grid, kThreads, 0, stream>>>(ws, P, out, frame);
    commit_copy_kernel<<<per_lane, kThreads, 0, stream>>>(ws, P, out, frame);
    clear_kernel<<<per_lane, kThreads, 0, stream>>>(ws, P);
  };

  // frame 0: the start state and its epsilon closure (cutoff -search_beam)
  init_kernel<<<lanes_grid, kThreads, 0, stream>>>(ws, P, g, opt, lengths);
  resolve_kernel<<<per_lane, kThreads, 0, stream>>>(ws, P, g, false, 0);
  closure_and_commit(0);
  for (int32_t t = 0; t <= max_length; ++t) {
    final_flag_kernel<<<per_lane, kThreads, 0, stream>>>(ws, P, g, out.tok_state, t);
    setup_kernel<<<lanes_grid, kThreads, 0, stream>>>(ws, P, g, opt, t);
    max_kernel<kWarpWalk, scalar_t><<<per_lane, kThreads, 0, stream>>>(ws, P, g, opt, lp, out.tok_state, out.tok_score,
                                                                      bk, bv, bc, t);
    cutoff_kernel<<<lanes_grid, kThreads, 0, stream>>>(ws, P);
    expand_kernel<kWarpWalk, scalar_t><<<per_lane, kThreads, 0, stream>>>(ws, P, g, opt, lp, out.tok_state,
                                                                         out.tok_score, bk, bv, bc, t);
    resolve_kernel<<<per_lane, kThreads, 0, stream>>>(ws, P, g, false, 0);
    closure_and_commit(t + 1);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t lattice_prune(const LatticeCapacities& caps, const LatticeOutputs& out, int32_t batch, int32_t max_length,
                          const int32_t* lengths, const int32_t* eps_level, int32_t final_state, float output_beam,
                          const LatticePruneBuffers& buf, cudaStream_t stream) {
  using namespace lattice_kernels;
  if (batch == 0) return cudaSuccess;
  const Sizes P{batch, 0, 0, 0, caps.frontier, caps.candidates, max_length + 2, caps.tokens, caps.arcs};
  const PruneOutputs po{buf.bwd, buf.tok_frame, buf.tok_lane, buf.arc_keep, buf.lane_out};
  prune_kernel<<<batch, kPruneThreads, 0, stream>>>(out, P, lengths, eps_level, final_state, -output_beam, po);
  return cudaGetLastError();
}

size_t lattice_workspace_bytes(int32_t batch, int32_t num_states, const LatticeCapacities& caps) {
  return carve(nullptr, batch, num_states, caps, nullptr);
}

cudaError_t lattice_forward(const DeviceGraph& graph, const SearchOptions& opt, const LatticeCapacities& caps,
                            const void* log_probs, bool is_half, int32_t batch, int32_t frames, int32_t vocab,
                            const int32_t* lengths, int32_t max_length, const int32_t* boost_keys,
                            const float* boost_values, int32_t boost_capacity, void* workspace,
                            const LatticeOutputs& out, cudaStream_t stream) {
  if (batch == 0) return cudaSuccess;
  const Walk walk = walk_selected();
  const int32_t walk_items = walk == Walk::kAdaptive ? 0 : 32;  // Sizes::walk_items
  const bool persistent = persistent_selected(batch);
  auto run = [&](auto warp_walk, const auto* lp) {
    return enqueue<decltype(warp_walk)::value>(graph, opt, caps, lp, batch, frames, vocab, lengths, max_length,
                                               boost_keys, boost_values, boost_capacity, workspace, out, walk_items,
                                               persistent, stream);
  };
  const bool warp = walk != Walk::kToken;
  if (is_half)
    return warp ? run(std::true_type{}, static_cast<const __half*>(log_probs))
                : run(std::false_type{}, static_cast<const __half*>(log_probs));
  return warp ? run(std::true_type{}, static_cast<const float*>(log_probs))
              : run(std::false_type{}, static_cast<const float*>(log_probs));
}

}  // namespace wfst
