// Hardware probe for issue 16's CTC question (not a decoder benchmark; it decodes nothing and writes no result rows):
// the latency, in SM cycles, of each dependent cross-lane step one warp can take, and of the one-warp CTC kernel's
// top-`beam` round built from them. The kernel (decoders/include/ctc_kernels.cuh, ctc_decode_warp_kernel, step 4)
// picks a frame's `beam` winners in `beam` rounds: a warp max of the lanes' heads (REDUX), a tie vote (VOTE), the
// first set bit (FLO), the winner's new head (selects). Nsight Compute put a round at ~260-350 cycles (sessions 15-24);
// the rows below say which link of that chain costs what. Measured (H100, session 24): the chain alone is ~117 cycles,
// a third of the kernel's round -- the rest is the round's own dependent path (reports/measurements/README.md).
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/warp_probe eval/bench/probes/warp_probe.cu && /tmp/warp_probe
//   (bash eval/bench/probes/probe_gpu_run.sh warp on the GPU host; prints tab-separated rows, cycles per step)
//
// Every row is one warp of one block, a chain of N dependent steps timed with clock64 (the SM's own clock), so the
// figure is the step's latency, not its throughput. Rows whose step is several instructions say which.
#include <cuda_runtime.h>

#include "probe_check.h"

#include <cstdio>
#include <cstdlib>

constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kSteps = 4096;

enum Probe {
  kRedux,        // x = __reduce_max_sync(x + lane)
  kBallot,       // x = __ballot_sync((x >> lane) & 1) ^ lane-independent salt
  kShfl,         // x = __shfl_sync(x, x & 31)
  kFfs,          // x = __ffs(x) + x (FLO + IADD)
  kSelect,       // x = x > y ? x - y : x + y (ISETP + SEL)
  kShared,       // x = s[x] (a pointer chase in shared memory)
  kRoundFfs,     // the kernel's round: REDUX -> VOTE x2 -> FLO -> ISETP -> SEL -> REDUX
  kRoundMask,    // the same winner without FLO: won = bk == m && !(tie & lanes below)
  kRoundRedux2,  // the winner by a second REDUX over lane codes: REDUX -> ISETP -> SEL -> REDUX -> ISETP -> SEL
  kButterfly64,  // a 64-bit warp max by 5 xor-shuffle levels (2 SHFL + compare + 2 SEL each): one step = 5 levels
  kNumProbes
};
const char* kNames[kNumProbes] = {
    "REDUX.max (__reduce_max_sync)",
    "VOTE.ballot (__ballot_sync)",
    "SHFL.idx (__shfl_sync)",
    "FLO + IADD (__ffs)",
    "ISETP + SEL (compare, select)",
    "LDS (shared pointer chase)",
    "round: REDUX, 2 ballots, ffs, winner, new head",
    "round: REDUX, 2 ballots, lane mask (no ffs)",
    "round: REDUX, then REDUX over lane codes",
    "64-bit warp max by 5 xor-shuffle levels",
};

__global__ void probe_kernel(int probe, unsigned seed, unsigned* out, long long* cycles) {
  __shared__ unsigned s[1024];
  const int lane = threadIdx.x;
  for (int i = lane; i < 1024; i += 32) s[i] = (i * 7 + 13) & 1023;
  __syncwarp();
  unsigned x = seed + lane, y = seed * 3u + 1u;
  unsigned long long w = ((unsigned long long)x << 32) | (seed ^ lane);
  // the round probes: each lane's head bk and the head it would offer after winning (precomputed, as a kernel
  // that keeps its next head a round ahead would)
  unsigned bk = (seed * 2654435761u + lane * 40503u) | 1u, nxt = bk >> 1;
  const unsigned lt_mask = (1u << lane) - 1u;
  __syncwarp();
  const long long t0 = clock64();
  switch (probe) {
    case kRedux:
      for (int i = 0; i < kSteps; ++i) x = __reduce_max_sync(kFull, x + lane);
      break;
    case kBallot:
      for (int i = 0; i < kSteps; ++i) x = __ballot_sync(kFull, (x >> lane) & 1u) ^ y;
      break;
    case kShfl:
      for (int i = 0; i < kSteps; ++i) x = __shfl_sync(kFull, x, x & 31u) + 1u;
      break;
    case kFfs:
      for (int i = 0; i < kSteps; ++i) x = (unsigned)__ffs((int)x) + x;
      break;
    case kSelect:
      for (int i = 0; i < kSteps; ++i) x = x > y ? x - y : x + y;
      break;
    case kShared:
      for (int i = 0; i < kSteps; ++i) x = s[x & 1023u];
      break;
    case kRoundFfs:
      for (int i = 0; i < kSteps; ++i) {
        const unsigned m = __reduce_max_sync(kFull, bk);
        const bool top = bk == m;
        const unsigned tie = __ballot_sync(kFull, top), tie_stay = __ballot_sync(kFull, top && (bk & 2u));
        const bool won = lane == __ffs(tie_stay ? tie_stay : tie) - 1;
        bk = won ? nxt : bk;
        nxt = won ? nxt >> 1 : nxt;  // off the chain: the head after the next
      }
      x = bk;
      break;
    case kRoundMask:
      for (int i = 0; i < kSteps; ++i) {
        const unsigned m = __reduce_max_sync(kFull, bk);
        const bool top = bk == m;
        const bool stay = top && (bk & 2u);
        const unsigned tie = __ballot_sync(kFull, top), tie_stay = __ballot_sync(kFull, stay);
        const bool won = tie_stay ? stay && !(tie_stay & lt_mask) : top && !(tie & lt_mask);
        bk = won ? nxt : bk;
        nxt = won ? nxt >> 1 : nxt;
      }
      x = bk;
      break;
    case kRoundRedux2:
      for (int i = 0; i < kSteps; ++i) {
        const unsigned m = __reduce_max_sync(kFull, bk);
        const unsigned code = bk == m ? ((bk & 2u) ? 64u : 0u) + 31u - lane : 0u;  // stays first, then lower lane
        const unsigned c = __reduce_max_sync(kFull, code);
        const bool won = bk == m && code == c;
        bk = won ? nxt : bk;
        nxt = won ? nxt >> 1 : nxt;
      }
      x = bk;
      break;
    case kButterfly64:
      for (int i = 0; i < kSteps; ++i) {
#pragma unroll
        for (int d = 16; d >= 1; d >>= 1) {
          const unsigned lo = __shfl_xor_sync(kFull, (unsigned)w, d), hi = __shfl_xor_sync(kFull, (unsigned)(w >> 32), d);
          const unsigned long long o = ((unsigned long long)hi << 32) | lo;
          w = o > w ? o : w;
        }
        w = w - (unsigned)lane;  // the next step depends on this one's result
      }
      x = (unsigned)w;
      break;
  }
  const long long t1 = clock64();
  out[lane] = x;
  if (lane == 0) *cycles = t1 - t0;
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  std::printf("device: %s, %d SMs, max SM clock %.0f MHz\n", prop.name, prop.multiProcessorCount, clock_khz / 1e3);
  std::printf("primitive\tconfiguration\tcycles_per_step\n");
  unsigned* out;
  long long* cyc;
  CHECK(cudaMalloc(&out, 32 * sizeof(unsigned)));
  CHECK(cudaMalloc(&cyc, sizeof(long long)));
  for (int p = 0; p < kNumProbes; ++p) {
    long long best = -1;
    for (int rep = 0; rep < 5; ++rep) {  // the first is a warm-up (instruction cache); the least of the rest
      probe_kernel<<<1, 32>>>(p, 12345u + rep, out, cyc);
      CHECK(cudaGetLastError());
      long long c = 0;
      CHECK(cudaMemcpy(&c, cyc, sizeof(c), cudaMemcpyDeviceToHost));
      if (rep > 0 && (best < 0 || c < best)) best = c;
    }
    std::printf("%s\t1 warp, %d dependent steps\t%.1f\n", kNames[p], kSteps, best * 1.0 / kSteps);
  }
  CHECK(cudaFree(out));
  CHECK(cudaFree(cyc));
  return 0;
}
