// Torch-free launcher of streaming WFST decoding on CUDA: the persistent workspace of `lanes` stream slots, and the
// launch sequences of open / advance / finalize / partial / garbage collection. The search steps are the offline
// decoder's kernels (wfst_kernels.cuh) in the same order as wfst_launch.cu's `enqueue`; the stream kernels are in
// wfst_stream_kernels.cuh. Nothing here synchronises the host.
#include <cub/device/device_scan.cuh>

#include "wfst_stream_kernels.cuh"
#include "wfst_stream_launch.h"

namespace wfst {
namespace stream {
namespace {

using kernels::GcScratch;
using kernels::Workspace;

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The offline workspace layout (kernels::carve_workspace) over `lanes` persistent lanes.
size_t carve(char* base, int32_t B, const Capacities& c, Workspace* ws) { return kernels::carve_workspace(base, B, c, ws); }

size_t scan_temp_bytes(int64_t arena) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                static_cast<int>(arena));
  return bytes;
}

size_t carve_gc(char* base, int32_t S, int64_t A, GcScratch* gc, void** scan_temp, size_t* scan_bytes) {
  size_t off = 0;
  auto take = [&](size_t bytes) -> void* {
    void* p = base ? base + off : nullptr;
    off += align_up(bytes);
    return p;
  };
  GcScratch g{};
  // the arrays GcMarkKernel / GcKidsKernel accumulate into come first: reset clears [0, zeroed) at once
  g.mark = static_cast<int32_t*>(take(sizeof(int32_t) * A));
  g.kids = static_cast<int32_t*>(take(sizeof(int32_t) * A));
  g.tokref = static_cast<int32_t*>(take(sizeof(int32_t) * A));
  g.roots = static_cast<int32_t*>(take(sizeof(int32_t) * S));
  g.null_tok = static_cast<int32_t*>(take(sizeof(int32_t) * S));
  g.child = static_cast<int32_t*>(take(sizeof(int32_t) * A));
  g.owner = static_cast<int32_t*>(take(sizeof(int32_t) * A));
  g.keep = static_cast<int32_t*>(take(sizeof(int32_t) * A));
  g.newidx = static_cast<int32_t*>(take(sizeof(int32_t) * A));
  g.tmp = static_cast<int2*>(take(sizeof(int2) * A));
  g.root_id = static_cast<int32_t*>(take(sizeof(int32_t) * S));
  const size_t sb = scan_temp_bytes(A);
  void* st = take(sb);
  if (gc) *gc = g;
  if (scan_temp) *scan_temp = st;
  if (scan_bytes) *scan_bytes = sb;
  return off;
}

int walk_grid(int32_t num_sms) {
  static const int blocks_per_sm = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernels::ExpandKernel<float, false>, kernels::kWalkBlock, 0) !=
        cudaSuccess)
      cudaGetLastError(), n = 0;
    return n > 0 ? n : 4;
  }();
  return (num_sms > 0 ? num_sms : 80) * blocks_per_sm;
}

// Closure passes 1..E on buffer `buf` after the expansion that produced pass 1's candidates (wfst_launch.cu).
void closure(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, Workspace& ws, int32_t B,
             int32_t t, int32_t buf, int32_t passes, const int32_t* bk, const float* bv, int32_t bcap, int grid,
             cudaStream_t stream) {
  using namespace kernels;
  for (int32_t k = 1; k <= passes; ++k) {
    const Prepare next = k < passes ? Prepare{kWalkCands, t, false, true, false} : Prepare{kWalkStep, t + 1, true, true, false};
    ResolveKernel<<<grid, kWalkBlock, 0, stream>>>(g, opt, ws, buf, k < passes ? kEpsExpand : kEpsCheck, caps.frontier,
                                                   caps.candidates, caps.hash, caps.arena, B, bk, bv, bcap, next);
  }
}

// One search step t (buffer t & 1 -> the other), as in wfst_launch.cu's enqueue.
template <typename scalar_t>
void step(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, Workspace& ws, int32_t B,
          const scalar_t* lp, int32_t T, int32_t V, int32_t t, int32_t passes, const int32_t* bk, const float* bv,
          int32_t bcap, int grid, cudaStream_t stream) {
  using namespace kernels;
  const int32_t F = caps.frontier, C = caps.candidates, H = caps.hash;
  const int32_t buf = t & 1, out = buf ^ 1;
  MaxKernel<scalar_t><<<grid, kWalkBlock, 0, stream>>>(g, opt, ws, lp, T, V, t, buf, F, H, B, bk, bv, bcap);
  ExpandKernel<scalar_t, false><<<grid, kWalkBlock, 0, stream>>>(g, opt, ws, lp, T, V, t, buf, out, F, C, H, B, bk, bv,
                                                                 bcap);
  const Prepare next = passes > 0 ? Prepare{kWalkCands, t, false, true, false} : Prepare{kWalkStep, t + 1, false, true, false};
  ResolveKernel<<<grid, kWalkBlock, 0, stream>>>(g, opt, ws, out, passes > 0 ? kEpsExpand : kEpsNone, F, C, H,
                                                 caps.arena, B, bk, bv, bcap, next);
  closure(g, opt, caps, ws, B, t, out, passes, bk, bv, bcap, grid, stream);
}

}  // namespace

size_t workspace_bytes(int32_t lanes, const Capacities& caps) { return carve(nullptr, lanes, caps, nullptr); }

size_t gc_bytes(int32_t lanes, int64_t arena) { return carve_gc(nullptr, lanes, arena, nullptr, nullptr, nullptr); }

cudaError_t reset(void* workspace, void* gc, int32_t lanes, const Capacities& caps, cudaStream_t stream) {
  cudaError_t err;
  if ((err = cudaMemsetAsync(workspace, 0, stream::workspace_bytes(lanes, caps), stream))) return err;
  return cudaMemsetAsync(gc, 0, gc_bytes(lanes, caps.arena), stream);
}

const unsigned long long* arena_cursor(void* workspace, int32_t lanes, const Capacities& caps) {
  Workspace ws;
  carve(static_cast<char*>(workspace), lanes, caps, &ws);
  return ws.arena_cursor;
}

cudaError_t open_lane(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, void* workspace,
                      int32_t lanes, int32_t lane, int32_t eps_passes, const int32_t* bk, const float* bv, int32_t bcap,
                      int32_t num_sms, cudaStream_t stream) {
  using namespace kernels;
  Workspace ws;
  carve(static_cast<char*>(workspace), lanes, caps, &ws);
  cudaError_t err;
  if ((err = cudaMemsetAsync(ws.hash + static_cast<size_t>(lane) * caps.hash, 0, sizeof(HashSlot) * caps.hash, stream)))
    return err;
  StreamOpenKernel<<<1, kInitBlock, 0, stream>>>(g, opt, ws, lanes, caps.frontier, caps.candidates, caps.hash, lane);
  if (g.has_eps && eps_passes > 0) {  // the start closure on buffer 0 (cutoff -search_beam), this lane only
    const int grid = walk_grid(num_sms);
    ExpandKernel<float, true><<<grid, kWalkBlock, 0, stream>>>(g, opt, ws, nullptr, 0, 0, 0, 0, 0, caps.frontier,
                                                               caps.candidates, caps.hash, lanes, bk, bv, bcap);
    closure(g, opt, caps, ws, lanes, -1, 0, eps_passes, bk, bv, bcap, grid, stream);
  }
  return cudaGetLastError();
}

cudaError_t advance(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, void* workspace,
                    int32_t lanes, const void* log_probs, bool is_half, int32_t T, int32_t V, const int32_t* lane_len,
                    int32_t steps, int32_t eps_passes, const int32_t* bk, const float* bv, int32_t bcap,
                    int32_t num_sms, cudaStream_t stream) {
  using namespace kernels;
  Workspace ws;
  carve(static_cast<char*>(workspace), lanes, caps, &ws);
  const int grid = walk_grid(num_sms);
  const int32_t passes = g.has_eps ? eps_passes : 0;
  StreamBeginKernel<<<1, kInitBlock, 0, stream>>>(g, opt, ws, lanes, caps.frontier, caps.candidates, caps.hash, lane_len);
  for (int32_t t = 0; t < steps; ++t) {
    if (is_half)
      step<__half>(g, opt, caps, ws, lanes, static_cast<const __half*>(log_probs), T, V, t, passes, bk, bv, bcap, grid,
                   stream);
    else
      step<float>(g, opt, caps, ws, lanes, static_cast<const float*>(log_probs), T, V, t, passes, bk, bv, bcap, grid,
                  stream);
  }
  StreamParityKernel<<<lanes, 256, 0, stream>>>(ws, caps.frontier, lane_len);
  return cudaGetLastError();
}

cudaError_t finalize(const DeviceGraph& g, const SearchOptions& opt, const Capacities& caps, void* workspace,
                     int32_t lanes, const int32_t* lane_len, const int32_t* bk, const float* bv, int32_t bcap,
                     int32_t num_sms, cudaStream_t stream) {
  using namespace kernels;
  Workspace ws;
  carve(static_cast<char*>(workspace), lanes, caps, &ws);
  const int grid = walk_grid(num_sms);
  StreamBeginKernel<<<1, kInitBlock, 0, stream>>>(g, opt, ws, lanes, caps.frontier, caps.candidates, caps.hash, lane_len);
  // the final step (t = 0 = len) reads no log-probs and has no epsilon closure
  step<float>(g, opt, caps, ws, lanes, nullptr, 0, 0, 0, 0, bk, bv, bcap, grid, stream);
  return cudaGetLastError();
}

cudaError_t heads(const DeviceGraph& g, const Capacities& caps, void* workspace, int32_t lanes, const int32_t* which,
                  int32_t n, bool final, int32_t* head, cudaStream_t stream) {
  using namespace kernels;
  if (n == 0) return cudaSuccess;
  Workspace ws;
  carve(static_cast<char*>(workspace), lanes, caps, &ws);
  StreamHeadKernel<<<n, 256, 0, stream>>>(ws, caps.frontier, which, final, head);
  StreamCountKernel<<<(n + 127) / 128, 128, 0, stream>>>(g, ws, n, caps.arena, head);
  return cudaGetLastError();
}

cudaError_t words(const DeviceGraph& g, const Capacities& caps, void* workspace, int32_t lanes, int32_t n,
                  const int32_t* head, int32_t W, int32_t* rows, cudaStream_t stream) {
  using namespace kernels;
  if (n == 0 || W == 0) return cudaSuccess;
  Workspace ws;
  carve(static_cast<char*>(workspace), lanes, caps, &ws);
  StreamFillKernel<<<(n + 127) / 128, 128, 0, stream>>>(g, ws, n, caps.arena, head, W, rows);
  return cudaGetLastError();
}

cudaError_t lane_stats(const Capacities& caps, void* workspace, int32_t lanes, int32_t* out, cudaStream_t stream) {
  using namespace kernels;
  Workspace ws;
  carve(static_cast<char*>(workspace), lanes, caps, &ws);
  StreamStatsKernel<<<(lanes + 127) / 128, 128, 0, stream>>>(ws, lanes, out);
  return cudaGetLastError();
}

cudaError_t collect(const Capacities& caps, void* workspace, void* gc_mem, int32_t lanes, const int32_t* open, int32_t D,
                    int32_t* drain, int32_t* drain_count, cudaStream_t stream) {
  using namespace kernels;
  Workspace ws;
  carve(static_cast<char*>(workspace), lanes, caps, &ws);
  GcScratch gc;
  void* scan_temp = nullptr;
  size_t scan_bytes = 0;
  carve_gc(static_cast<char*>(gc_mem), lanes, caps.arena, &gc, &scan_temp, &scan_bytes);
  gc.drain_count = drain_count;
  const int64_t A = caps.arena;
  const int grid = static_cast<int>(std::min<int64_t>((A + 255) / 256, 4096));
  GcMarkKernel<<<lanes, 256, 0, stream>>>(ws, gc, caps.frontier, open);
  GcKidsKernel<<<grid, 256, 0, stream>>>(ws, gc, A);
  GcDrainKernel<<<(lanes + 127) / 128, 128, 0, stream>>>(ws, gc, lanes, open, D, drain);
  GcKeepKernel<<<grid, 256, 0, stream>>>(ws, gc, A);
  // the scan runs over the whole capacity (entries past the cursor: keep is 0 there, cleared below)
  cudaError_t err = cub::DeviceScan::ExclusiveSum(scan_temp, scan_bytes, gc.keep, gc.newidx, static_cast<int>(A), stream);
  if (err) return err;
  GcRewriteKernel<<<grid, 256, 0, stream>>>(ws, gc, A);
  GcRemapKernel<<<lanes, 256, 0, stream>>>(ws, gc, caps.frontier, open);
  GcCopyBackKernel<<<grid, 256, 0, stream>>>(ws, gc, A);
  GcSetCursorKernel<<<1, 1, 0, stream>>>(ws, gc, A);
  // scratch the next collection accumulates into (mark, kids, tokref, roots, null_tok are carved contiguously)
  const size_t zeroed = reinterpret_cast<char*>(gc.child) - reinterpret_cast<char*>(gc.mark);
  if ((err = cudaMemsetAsync(gc.mark, 0, zeroed, stream))) return err;
  if ((err = cudaMemsetAsync(gc.keep, 0, sizeof(int32_t) * static_cast<size_t>(A), stream))) return err;
  return cudaGetLastError();
}

}  // namespace stream
}  // namespace wfst
