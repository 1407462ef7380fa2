// Torch-free launcher of the CUDA WFST decoder: carves the caller's workspace and enqueues the whole
// decode (init, every step, epsilon closures, backtrack) on `stream` without a host synchronisation.
// Kernels: decoders/include/wfst_kernels.cuh.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "wfst_coop_launch.cuh"
#include "wfst_kernels.cuh"
#include "wfst_launch.h"

namespace wfst {
namespace {

using kernels::Workspace;

// The workspace layout (shared with the streaming launcher, which carves the same over its persistent lanes).
size_t carve(char* base, int32_t B, const Capacities& c, Workspace* ws) { return kernels::carve_workspace(base, B, c, ws); }

// Blocks per SM of the walk grids: BEAMDEC_WFST_BLOCKS_PER_SM=n (1..occupancy) overrides the occupancy maximum, for
// A/B runs at small batches (batch 1 spends ~10 us per Resolve launch on the H200 with few items, and every block of
// the grid pays its launch and the arrive counter: reports/evidence/h200_2026-12-02/wfst_profile/tiny_best_as1). Read
// on every call, so one process can compare settings; the result never depends on it (grid-stride walks). Unset:
// `unset` (capped at the occupancy) where the launcher picks a smaller grid, else the occupancy.
int walk_blocks_per_sm(int occupancy, int unset = 0) {
  const char* v = std::getenv("BEAMDEC_WFST_BLOCKS_PER_SM");
  if (v == nullptr) return unset > 0 ? std::min(unset, occupancy) : occupancy;
  const int n = std::atoi(v);
  return n >= 1 && n < occupancy ? n : occupancy;
}

// A switch of the launcher: the environment variable is set to exactly "1" (read on every call).
bool env_flag(const char* name) {
  const char* env = std::getenv(name);
  return env && std::strcmp(env, "1") == 0;
}

// A default-on switch of the launcher turned off: the environment variable is set to exactly "0" (read on every call).
bool env_off(const char* name) {
  const char* env = std::getenv(name);
  return env && std::strcmp(env, "0") == 0;
}

// The single-cluster form of the persistent kernel (wfst_kernels.cuh PersistentKernel kCluster, +2.5 % at batch 1 on
// the tiny TLG, its comment says why that is not enough to make it the default), opt-in: BEAMDEC_WFST_CLUSTER=N (2..16
// blocks in one cluster) for batches up to kClusterMaxBatch; unset, 0 or out of range: off (read on every call, so one
// process can compare both).
constexpr int32_t kClusterMaxBatch = 8;
int cluster_blocks() {
  const char* v = std::getenv("BEAMDEC_WFST_CLUSTER");
  if (v == nullptr) return 0;
  const int n = std::atoi(v);
  return n >= 2 && n <= 16 ? n : 0;
}

// The persistent step loop is the default (BEAMDEC_WFST_PERSISTENT unset or "1"); "0" selects the per-kernel
// launches. Measured on the H200 (2026-12-02, session 7, tiny BPE compact TLG, 'other', acoustic scale 1, kernel
// time of the whole decode, eval.bench.wfst_profile; reports/evidence/h200_2026-12-02/README_session7.md): batch 1
// 133.5 vs 227.3 ms (45.6 vs 88.0 us wall per lane-step), batch 32 157.3 vs 233.1, batch 200 40.8 vs 53.1 -- the
// one kernel wins at every batch, most where launches dominate. A smaller walk grid (BEAMDEC_WFST_BLOCKS_PER_SM 1
// or 2) lost to it at every batch, alone or combined. Read on every call, so one process can compare both.
bool persistent_selected() { return !env_off("BEAMDEC_WFST_PERSISTENT"); }

// The fused max (wfst_kernels.cuh) runs in the persistent kernel, OFF by default: measured on the H200 (2026-12-04,
// each A/B in one call, reports/measurements/README.md "Session 13") variant 2 does not pay. Small char compact graphs:
// HLG +6 / +1 / +4 % RTFx at batch 1 / 32 / 200, TLG -9 / -9 / -3 % (an epsilon graph's Resolves run 1 + D times per step
// and each pays the fused work, while its Max walk is cheap: ~2 emitting arcs per token); bench compact HLG (52.9 M
// arcs): -4 / -1 / +2 %, within run-to-run noise, for a second table (+234 MiB at batch 200). Dropping the Max walk saved
// about a phase at batch 1 while variant 2's Resolve grew by a chain of ~6 dependent loads and an atomic round trip;
// variant 1 (lean) keeps that chain to the arcs, and does not pay either (H100, 2026-12-06 session 21, one call, small
// char compact graphs, RTFx at batch 1 / 32 / 200: HLG 1,506 / 10,199 / 22,196 vs 1,533-1,584 / 10,656-10,690 /
// 24,796-25,338 for the Max walk in the processes before it, TLG 862 / 6,848 / 22,831 vs 860-906 / 6,961-7,317 /
// 23,344-24,338; reports/measurements/h100_2026-12-06/wfst_s21/). BEAMDEC_WFST_FUSED_MAX=1 / 2 turns variant 1 / 2 on
// (exact; the gpu tests compare both with the Max walk and the CPU bit for bit); 0 or unset: off.
int fused_max_mode() {
  if (!persistent_selected()) return 0;
  const char* env = std::getenv("BEAMDEC_WFST_FUSED_MAX");
  if (env && std::strcmp(env, "1") == 0) return 1;
  if (env && std::strcmp(env, "2") == 0) return 2;
  return 0;
}

// The persistent kernel's walk forms (wfst_kernels.cuh): the Max and Expand walks score 2 rounds of 32 arcs ahead
// (warp_arc_rounds_ahead) and the Expand walk recombines its admitted arcs through the warp's queue (AdmitQueue), by
// default on epsilon-free graphs (HLGs: ~24 emitting arcs a token on the char HLGs); epsilon graphs (TLGs: ~2) keep
// one round without the queue, the form their benchmarks measured (the new forms were not measured on them).
// BEAMDEC_WFST_ARC_AHEAD=1 / 2 and BEAMDEC_WFST_ADMIT_QUEUE=0 / 1 choose for every graph; read per call. Measured on
// an H100 (2026-12-07 session 31, bench compact HLG, one call, A/B in separate processes beside OASR's WFST decoder;
// reports/measurements/README.md "Session 31"), RTFx at batch 1 / 32 / 200 against one round without the queue
// (1,539 / 9,078 / 17,554): queue alone 1,524 / 10,191 / 19,725 (-1.0 / +12.3 / +12.4 %), 2 rounds alone 1,591 / 9,368
// / 16,892 (+3.4 / +3.2 / -3.8 %), both 1,590 / 11,081 / 23,425 (+3.3 / +22.1 / +33.4 %). 4 rounds ahead (the call
// before: +5.3 / +0.2 / -13.0 %, 124 registers, 2 blocks per SM) was not kept. The fused-max and single-cluster forms
// walk one round without the queue.
int arc_rounds_ahead(bool has_eps) {
  const char* env = std::getenv("BEAMDEC_WFST_ARC_AHEAD");
  if (env && std::strcmp(env, "1") == 0) return 1;
  if (env && std::strcmp(env, "2") == 0) return 2;
  return has_eps ? 1 : 2;
}
bool admit_queue(bool has_eps) {
  if (env_off("BEAMDEC_WFST_ADMIT_QUEUE")) return false;
  return env_flag("BEAMDEC_WFST_ADMIT_QUEUE") || !has_eps;
}
// The spread walks (wfst_kernels.cuh walk_token_arcs kSpread): a small step's tokens each walked by several warps.
// On by default with 2 rounds ahead and the queue (the HLG default; BEAMDEC_WFST_SPREAD=0 turns them off, read per
// call). Measured on an H100 (2026-12-07 session 33 call 1, bench compact HLG, each arm its own process in one call
// beside OASR's WFST decoder; reports/measurements/README.md "Session 33"), RTFx at batch 1 / 32 / 200: 1,660 / 11,197
// / 23,717 against 1,563 / 11,219 / 22,961 without (+6.2 / -0.2 / +3.3 %), WER equal.
bool spread_walks() { return !env_off("BEAMDEC_WFST_SPREAD"); }

// The HLG form of the persistent kernel (2 rounds ahead, the queue, the spread walks; not with the fused max): what
// launch_persistent runs it for, and what the bound max needs (enqueue).
bool hlg_form_selected(bool has_eps, int32_t fused) {
  return fused == 0 && arc_rounds_ahead(has_eps) == 2 && admit_queue(has_eps) && spread_walks();
}

// The walks' arrive counter as one acq_rel atomic (wfst_kernels.cuh arrive_and_prepare), the default of the offline
// launcher; BEAMDEC_WFST_ACQ_REL_ARRIVE=0 selects the fence.sc form (read per call; the streaming launchers keep that
// form: their workspace is zero-initialised). Measured on an H100 (2026-12-07 session 34 call 1, bench compact HLG,
// each arm two processes in one call, reports/measurements/README.md "Session 34"), RTFx at batch 1 / 4 / 32 against
// the fence.sc form: -0.4 / +0.6 / +5.8 % (1,884 / 1,765, 4,103 / 3,705, 11,573 / 12,042 vs 1,906 / 1,758, 3,881,
// 11,039 / 11,279), WER equal.
bool acq_rel_arrive() { return !env_off("BEAMDEC_WFST_ACQ_REL_ARRIVE"); }

// The Resolve walk's early loads in the HLG form (wfst_kernels.cuh resolve_step kEarly), opt-in and read per call:
// BEAMDEC_WFST_EARLY_LOADS=1 the early loads; =2 those and the carried ranges (each token's emitting arc range written
// beside it, so the walks of the next step skip the state -> row_splits level; Capacities::token_ranges adds 8 bytes a
// token to both frontier buffers; epsilon-free graphs only, an epsilon graph runs 1). Written in sessions 34 / 35 from
// session 34's PC sampling of the batch-1 step (reports/measurements/README.md "Session 34", items 2 and 4), so the
// default keeps the kernel every measurement ran until their A/B.
int early_loads() {
  const char* env = std::getenv("BEAMDEC_WFST_EARLY_LOADS");
  if (env && std::strcmp(env, "2") == 0) return 2;
  return env_flag("BEAMDEC_WFST_EARLY_LOADS") ? 1 : 0;
}

// The walk grid of the HLG form (2 rounds ahead, the queue, the spread walks) at small batches: kSmallGridBlocksPerSm
// blocks per SM up to kSmallGridMaxBatch lanes instead of the occupancy (4), unless BEAMDEC_WFST_BLOCKS_PER_SM says
// otherwise (launch_persistent passes it to walk_blocks_per_sm). At batch 1 a step's barriers and arrive tails over
// every resident block are a large part of its ~25 us; half the grid halves their participants while the spread walks
// keep the few tokens' arcs over the warps left.
// Measured on an H100 (session 33 call 1, as above), 2 blocks per SM at batch 1 / 32 / 200: +11.5 / -7.4 / -25.0 % RTFx
// without the spread walks, +9.4 / -6.6 / -26.4 % with them (against the full grid without). With the spread walks
// (call 2, one process per grid), 2 / 1 blocks per SM against 4 at batch 1, 2, 4, 8, 16: +5.6 / +4.0, +7.4 / +3.8,
// +16.1 / +9.3, +4.2 / -5.8, -4.5 / -18.7 %, hence 2 up to batch 8.
constexpr int32_t kSmallGridMaxBatch = 8;
constexpr int kSmallGridBlocksPerSm = 2;

// The bound max (wfst_kernels.cuh expand_step kBound), opt-in: BEAMDEC_WFST_BOUND_MAX=1 (read per call). An emitting
// step admits against the best arc of the token the last Resolve named and accumulates the exact maximum itself, so
// it runs no Max walk and one grid barrier fewer; the Resolve drops what the exact cutoff would not have admitted.
// Written in session 35 from a simulation (eval/bench/probes/wfst_step_sim.py --max-bounds: that bound is the step's
// maximum on 89 % of the small char HLG's steps, 1.08x the admitted arcs); not run on a GPU yet. Batches up to
// kSmallGridMaxBatch (every block computes the bound of every lane: one warp a lane) of the HLG form on epsilon-free
// graphs, with the carried ranges and two recombination tables (the Expand clears the step before's, as the fused
// max does): decode_hash_tables / decode_token_ranges size the workspace for it.
bool bound_max_asked(int32_t batch) { return env_flag("BEAMDEC_WFST_BOUND_MAX") && batch <= kSmallGridMaxBatch; }
static_assert(kSmallGridMaxBatch <= kernels::kBoundMaxBatch, "one warp of a block per lane");

// Emit slots (the default; BEAMDEC_WFST_EMIT_SLOTS=0 selects the candidate form, read per call; wfst_kernels.cuh
// Workspace::emit_slots). The whole WFST gpu suite and compute-sanitizer ran with them on before they became the
// default (session 23, reports/measurements/README.md). Measured on an H200 (2026-12-06, one call, small char compact
// graphs, each form in two processes, reports/measurements/README.md "Session 22"), RTFx at batch 1 / 32 / 200: TLG
// 964-973 / 7,456-7,633 / 25,540-25,725 vs 918-946 / 7,539-7,541 / 24,989-25,246 for the candidate form; HLG
// 1,549-1,683 / 11,575-11,674 / 26,443-27,106 vs 1,621-1,640 / 10,438-11,230 / 26,297-26,334 -- a mean change of -0.9
// to +7.3 % per graph and batch (reports/evidence/h200_2026-12-06/ab_emit_slots_s22), and the emitting step can no
// longer overflow the candidate capacity. The shift that packs (source token << shift) | arc offset into 30 bits, or -1
// when the graph's largest out-degree (0: not known) and the frontier capacity do not fit (the candidate form runs
// then).
int emit_slots_shift(int32_t max_degree, int32_t frontier) {
  if (max_degree < 1 || frontier < 1) return -1;
  auto bits = [](uint32_t x) { return x == 0u ? 0 : 32 - __builtin_clz(x); };
  const int shift = bits(static_cast<uint32_t>(max_degree - 1)), tok_bits = bits(static_cast<uint32_t>(frontier - 1));
  return shift + tok_bits <= 30 ? shift : -1;  // bit 31: the emit-payload mark (kernels::kEmitPayloadBit)
}

// The step loop (the start closure and every step) as one cooperative launch of PersistentKernel
// (wfst_kernels.cuh), enqueue's alternative to its per-kernel launches (the default; BEAMDEC_WFST_PERSISTENT=0
// turns it off): grid-wide barriers where the plain loop has kernel boundaries. Its grid is every
// block that can be resident at once (this kernel's occupancy x SMs, BEAMDEC_WFST_BLOCKS_PER_SM caps it), as a
// cooperative launch requires. Returns false with nothing enqueued (CUDA error state cleared) when the device or the
// launch refuses, so enqueue runs the plain loop instead.
template <typename scalar_t>
bool launch_persistent(DeviceGraph g, SearchOptions opt, kernels::Workspace ws, const scalar_t* lp, int32_t T,
                       int32_t V, int32_t F, int32_t C, int32_t H, int64_t arena_cap, int32_t B,
                       const int32_t* boost_keys, const float* boost_values, int32_t boost_cap, int32_t steps,
                       int32_t passes, int32_t num_sms, bool bound, cudaStream_t stream) {
  using namespace kernels;
  void* args[] = {&g, &opt, &ws, &lp, &T, &V, &F, &C, &H, &arena_cap, &B, &boost_keys, &boost_values, &boost_cap,
                  &steps, &passes};
  // Small batches, opt-in (BEAMDEC_WFST_CLUSTER=N, 2..16 blocks; batch <= kClusterMaxBatch; the Max walk only): one
  // N-block thread-block cluster with hardware barriers instead of every resident block with grid barriers;
  // the cooperative launch below when the device or the launch refuses it.
  if (ws.fused == 0 && !bound && B <= kClusterMaxBatch) {
    const int blocks = cluster_blocks();
    if (blocks > 0) {
      if (single_cluster_launch<PersistentKernel<scalar_t, 0, true>>(kWalkBlock, blocks, args, stream)) return true;
      static bool said = false;  // once per process and dtype: the knob was asked for and did not take effect
      if (!said) {
        said = true;
        std::fprintf(stderr, "beamdec: BEAMDEC_WFST_CLUSTER=%d: the single-cluster launch was refused on this device; "
                     "the cooperative launch runs instead\n", blocks);
      }
    }
  }
  // The HLG form (2 rounds ahead, the queue, the spread walks) takes half the grid at small batches
  const bool queue = admit_queue(g.has_eps);
  const int ahead = arc_rounds_ahead(g.has_eps);
  const bool hlg_form = hlg_form_selected(g.has_eps, ws.fused);
  const int small_grid = hlg_form && B <= kSmallGridMaxBatch ? kSmallGridBlocksPerSm : 0;
  const auto grid = [&](int blocks_per_sm, int) {
    return static_cast<int64_t>(num_sms > 0 ? num_sms : 80) * walk_blocks_per_sm(blocks_per_sm, small_grid);
  };
  // ws.fused (the fused max's variant, 0 = off) picks the instantiation: the Max-walk one has no fused code at all
  if (ws.fused == 1) return cooperative_launch<PersistentKernel<scalar_t, 1>>(kWalkBlock, grid, args, stream);
  if (ws.fused == 2) return cooperative_launch<PersistentKernel<scalar_t, 2>>(kWalkBlock, grid, args, stream);
  if (bound)  // (enqueue checked that the HLG form runs)
    return cooperative_launch<PersistentKernel<scalar_t, 0, false, 2, true, true, 2, true>>(kWalkBlock, grid, args,
                                                                                             stream);
  const int early = hlg_form ? early_loads() : 0;
  if (early == 2 && !g.has_eps && ws.front_range[0] != nullptr)  // (the closure passes would not write ranges)
    return cooperative_launch<PersistentKernel<scalar_t, 0, false, 2, true, true, 2>>(kWalkBlock, grid, args, stream);
  if (early > 0)
    return cooperative_launch<PersistentKernel<scalar_t, 0, false, 2, true, true, 1>>(kWalkBlock, grid, args, stream);
  if (hlg_form)
    return cooperative_launch<PersistentKernel<scalar_t, 0, false, 2, true, true>>(kWalkBlock, grid, args, stream);
  if (ahead == 2)
    return queue ? cooperative_launch<PersistentKernel<scalar_t, 0, false, 2, true>>(kWalkBlock, grid, args, stream)
                 : cooperative_launch<PersistentKernel<scalar_t, 0, false, 2>>(kWalkBlock, grid, args, stream);
  return queue ? cooperative_launch<PersistentKernel<scalar_t, 0, false, 1, true>>(kWalkBlock, grid, args, stream)
               : cooperative_launch<PersistentKernel<scalar_t, 0, false, 1>>(kWalkBlock, grid, args, stream);
}

// Enqueues the whole decode on `stream` (no host synchronisation; also what a CUDA graph captures; `persistent`:
// the step loop as one cooperative launch, falling back to the per-kernel loop when it is refused).
// `steps` >= max(lengths) + 1: steps past a lane's final step are idle for it (phase kDone, no items).
template <typename scalar_t>
cudaError_t enqueue(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, const scalar_t* lp,
                    int32_t B, int32_t T, int32_t V, const int32_t* lengths, int32_t steps,
                    const int32_t* boost_keys, const float* boost_values, int32_t boost_cap, void* workspace,
                    int32_t* result, int32_t num_sms, bool persistent, cudaStream_t stream,
                    const float* frame_max = nullptr, float max_emit_weight = 0.0f) {
  using namespace kernels;
  Workspace ws;
  carve(static_cast<char*>(workspace), B, caps, &ws);
  // the fused max needs the second table; token skipping needs the frame maxima and no boosts (a boost can lift an
  // arc above the bound, see fused_max_arcs)
  ws.fused = persistent && caps.hash_tables == 2 ? fused_max_mode() : 0;
  ws.frame_max = ws.fused && boost_cap == 0 ? frame_max : nullptr;
  ws.max_emit_weight = max_emit_weight;
  ws.emit_shift = emit_slots_shift(g.max_degree, caps.frontier);
  ws.emit_slots = ws.emit_shift >= 0 && !env_off("BEAMDEC_WFST_EMIT_SLOTS");
  if (!ws.emit_slots) ws.emit_shift = 0;
  ws.arrive_acq_rel = acq_rel_arrive();
  // the bound max: the persistent kernel's HLG form (below) with what the workspace was sized for
  const bool bound = persistent && bound_max_asked(B) && !g.has_eps && caps.hash_tables == 2 &&
                     ws.front_range[0] != nullptr && hlg_form_selected(g.has_eps, ws.fused);
  const int32_t F = caps.frontier, C = caps.candidates, H = caps.hash;
  cudaError_t err;
  // Hash tables start empty (all-zero slots); later steps clear only the slots they claimed.
  if ((err = cudaMemsetAsync(ws.hash, 0, sizeof(HashSlot) * static_cast<size_t>(B) * H, stream))) return err;
  if (ws.hash_alt != ws.hash &&
      (err = cudaMemsetAsync(ws.hash_alt, 0, sizeof(HashSlot) * static_cast<size_t>(B) * H, stream)))
    return err;
  if ((err = cudaMemsetAsync(ws.step_flags, 0, sizeof(int32_t), stream))) return err;
  if ((err = cudaMemsetAsync(ws.clear_lanes, 0, sizeof(int32_t) * (B + 1), stream))) return err;
  if ((err = cudaMemsetAsync(ws.arena_cursor, 0, sizeof(unsigned long long), stream))) return err;
  if ((err = cudaMemsetAsync(ws.arrive, 0, sizeof(unsigned int), stream))) return err;

  // Walk grids: as many blocks as are resident at once (a warp's span of items is sized from the grid).
  static const int blocks_per_sm = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, ExpandKernel<scalar_t, false>, kWalkBlock, 0) != cudaSuccess)
      cudaGetLastError(), n = 0;
    return n > 0 ? n : 4;
  }();
  const int walk_grid = (num_sms > 0 ? num_sms : 80) * walk_blocks_per_sm(blocks_per_sm);
  const int32_t passes = g.has_eps ? opt.eps_iterations : 0;
  InitKernel<<<1, kInitBlock, 0, stream>>>(g, opt, ws, lengths, B, F, C, H);
  // Closure passes 1..E on buffer `buf` after the expansion that produced pass 1's candidates; each Resolve
  // expands the next pass's epsilon arcs, the last one only checks convergence; then step t + 1 is prepared.
  auto closure = [&](int32_t t, int32_t buf) {
    for (int32_t k = 1; k <= passes; ++k) {
      const Prepare next = k < passes ? Prepare{kWalkCands, t, false, true, false}
                                      : Prepare{kWalkStep, t + 1, true, true, false};
      ResolveKernel<<<walk_grid, kWalkBlock, 0, stream>>>(g, opt, ws, buf, k < passes ? kEpsExpand : kEpsCheck, F, C,
                                                          H, caps.arena, B, boost_keys, boost_values, boost_cap, next);
    }
  };
  // the cooperative kernel runs the start closure and every step; else (off, or refused) one launch per kernel
  const bool fused = persistent && launch_persistent<scalar_t>(g, opt, ws, lp, T, V, F, C, H, caps.arena, B,
                                                               boost_keys, boost_values, boost_cap, steps, passes,
                                                               num_sms, bound, stream);
  if (!fused) {
    ws.fused = 0;  // the plain launches (InitKernel's bookkeeping is the same either way)
    ws.frame_max = nullptr;
    if (passes > 0) {  // the start token's closure (cutoff -search_beam), on buffer 0
      ExpandKernel<scalar_t, true><<<walk_grid, kWalkBlock, 0, stream>>>(g, opt, ws, lp, T, V, 0, 0, 0, F, C, H, B,
                                                                         boost_keys, boost_values, boost_cap);
      closure(-1, 0);
    }
    for (int32_t t = 0; t < steps; ++t) {
      const int32_t buf = t & 1, out = buf ^ 1;
      MaxKernel<scalar_t><<<walk_grid, kWalkBlock, 0, stream>>>(g, opt, ws, lp, T, V, t, buf, F, H, B, boost_keys,
                                                                boost_values, boost_cap);
      ExpandKernel<scalar_t, false><<<walk_grid, kWalkBlock, 0, stream>>>(g, opt, ws, lp, T, V, t, buf, out, F, C, H, B,
                                                                          boost_keys, boost_values, boost_cap);
      const Prepare next = passes > 0 ? Prepare{kWalkCands, t, false, true, false}
                                      : Prepare{kWalkStep, t + 1, false, true, false};
      ResolveKernel<<<walk_grid, kWalkBlock, 0, stream>>>(g, opt, ws, out, passes > 0 ? kEpsExpand : kEpsNone, F, C, H,
                                                          caps.arena, B, boost_keys, boost_values, boost_cap, next,
                                                          ws.emit_slots != 0);
      closure(t, out);
    }
  }
  BacktrackKernel<<<(B + 127) / 128, 128, 0, stream>>>(g, ws, B, caps.words, caps.arena, result);
  return cudaGetLastError();
}

// ---- CUDA-graph replay of the per-kernel decode (opt-in: BEAMDEC_WFST_CUDA_GRAPH=1 with BEAMDEC_WFST_PERSISTENT=0) --
// The decode can be captured once per shape (batch, step bucket, epsilon passes, dtype, device) into a
// CUDA graph; later calls re-capture (host-only) and cudaGraphExecUpdate the cached executable with the new
// pointers / parameters instead of instantiating again, then launch it on the caller's stream. Steps are
// rounded up to a multiple of 32 so batches of similar length share one executable (extra steps are idle).
// Measured on the H200 (tiny char TLG/HLG, 200 utterances) with the earlier pipeline (4 launches per frame
// + 2 per epsilon pass; now 3 + 2): re-capture + update cost MORE than the launches they replace (batch 200 TLG:
// 9.7k vs 11.0k RTFx plain; batch 32: 2.4k vs 2.9k), and the executable holds extra device memory, so
// plain launches are the default. The loop never synchronises the host either way.
// Capture happens on a private non-blocking stream because the legacy default stream cannot be captured.
struct GraphCache {
  std::mutex mu;
  std::map<std::tuple<int, int32_t, int32_t, int32_t, bool, bool>, cudaGraphExec_t> execs;
  std::map<int, cudaStream_t> capture_streams;
};

GraphCache& graph_cache() {
  static GraphCache* cache = new GraphCache();  // leaked on purpose: no teardown-order issues at exit
  return *cache;
}

// Captures the decode and launches it as a graph; returns false (nothing enqueued on `stream`, CUDA error
// state cleared) when any graph API call fails, so the caller can fall back to plain launches.
template <typename scalar_t>
bool run_graph(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, const scalar_t* lp,
               int32_t B, int32_t T, int32_t V, const int32_t* lengths, int32_t steps, const int32_t* boost_keys,
               const float* boost_values, int32_t boost_cap, void* workspace, int32_t* result, int32_t num_sms,
               cudaStream_t stream) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return cudaGetLastError(), false;
  GraphCache& cache = graph_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cudaStream_t cap_stream;
  auto it_s = cache.capture_streams.find(device);
  if (it_s == cache.capture_streams.end()) {
    if (cudaStreamCreateWithFlags(&cap_stream, cudaStreamNonBlocking) != cudaSuccess) return cudaGetLastError(), false;
    cache.capture_streams[device] = cap_stream;
  } else {
    cap_stream = it_s->second;
  }
  cudaGraph_t graph = nullptr;
  if (cudaStreamBeginCapture(cap_stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
    return cudaGetLastError(), false;
  const cudaError_t enq = enqueue<scalar_t>(g, opt, caps, lp, B, T, V, lengths, steps, boost_keys, boost_values,
                                            boost_cap, workspace, result, num_sms, false, cap_stream);
  const cudaError_t end = cudaStreamEndCapture(cap_stream, &graph);
  if (enq != cudaSuccess || end != cudaSuccess || graph == nullptr) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return false;
  }
  const auto key = std::make_tuple(device, B, steps, opt.eps_iterations, g.has_eps, sizeof(scalar_t) == 2);
  auto it = cache.execs.find(key);
  if (it != cache.execs.end()) {
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(it->second, graph, &info) != cudaSuccess) {
      cudaGetLastError();                // not updatable (e.g. capacities changed a memset): instantiate afresh
      cudaGraphExecDestroy(it->second);  // freed once its in-flight launches complete
      cache.execs.erase(it);
      it = cache.execs.end();
    }
  }
  if (it == cache.execs.end()) {
    cudaGraphExec_t exec;
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
      cudaGraphDestroy(graph);
      cudaGetLastError();
      return false;
    }
    if (cache.execs.size() >= 64) {  // bound the cache (distinct shapes are few in practice)
      for (auto& kv : cache.execs) cudaGraphExecDestroy(kv.second);
      cache.execs.clear();
    }
    it = cache.execs.emplace(key, exec).first;
  }
  cudaGraphDestroy(graph);
  if (cudaGraphLaunch(it->second, stream) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

template <typename scalar_t>
cudaError_t run(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, const scalar_t* lp,
                int32_t B, int32_t T, int32_t V, const int32_t* lengths, int32_t max_length,
                const int32_t* boost_keys, const float* boost_values, int32_t boost_cap, void* workspace,
                int32_t* result, int32_t num_sms, cudaStream_t stream, const float* frame_max,
                float max_emit_weight) {
  const bool persistent = persistent_selected();
  if (!persistent && env_flag("BEAMDEC_WFST_CUDA_GRAPH")) {  // the graph replays the per-kernel launches
    const int32_t steps = (max_length + 1 + 31) / 32 * 32;
    if (run_graph<scalar_t>(g, opt, caps, lp, B, T, V, lengths, steps, boost_keys, boost_values, boost_cap, workspace,
                            result, num_sms, stream))
      return cudaSuccess;
  }
  return enqueue<scalar_t>(g, opt, caps, lp, B, T, V, lengths, max_length + 1, boost_keys, boost_values, boost_cap,
                           workspace, result, num_sms, persistent, stream, frame_max, max_emit_weight);
}

}  // namespace

size_t workspace_bytes(int32_t batch, const Capacities& caps) { return carve(nullptr, batch, caps, nullptr); }

bool decode_fused_max() { return fused_max_mode() > 0; }

int32_t decode_hash_tables(int32_t batch) {
  return fused_max_mode() > 0 || bound_max_asked(batch) ? 2 : 1;
}

int32_t decode_token_ranges(int32_t batch) {
  return early_loads() == 2 || bound_max_asked(batch) ? 1 : 0;
}

cudaError_t decode_batch(const DeviceGraph& graph, const SearchOptions& opt, const Capacities& caps,
                         const void* log_probs, bool is_half, int32_t batch, int32_t frames, int32_t vocab,
                         const int32_t* lengths, int32_t max_length, const int32_t* boost_keys,
                         const float* boost_values, int32_t boost_capacity, void* workspace, int32_t* result,
                         int32_t num_sms, cudaStream_t stream, const float* frame_max, float max_emit_weight) {
  if (batch == 0) return cudaSuccess;
  if (is_half)
    return run<__half>(graph, opt, caps, static_cast<const __half*>(log_probs), batch, frames, vocab, lengths,
                       max_length, boost_keys, boost_values, boost_capacity, workspace, result, num_sms, stream,
                       frame_max, max_emit_weight);
  return run<float>(graph, opt, caps, static_cast<const float*>(log_probs), batch, frames, vocab, lengths, max_length,
                    boost_keys, boost_values, boost_capacity, workspace, result, num_sms, stream, frame_max,
                    max_emit_weight);
}

}  // namespace wfst
