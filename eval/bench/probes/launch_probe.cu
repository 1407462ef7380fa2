// Hardware probe for issue 16's one-stream row (not a decoder benchmark; it decodes nothing and writes no result rows):
// what a CUDA stream chunk call's launches cost by themselves. A chunk call launches three kernels in a chain (pre-pass,
// one-warp decode, seal); the pre-pass and the decode take the FrameArgs struct by value and the seal a StateRefs,
// both ~2.1 KB because StateRefs carries kMaxStreamsPerLaunch (256) row pointers for batched streams, unused by one
// stream. Does the parameter size cost host time per launch or GPU time per chain, and what do overlapped launches
// (programmatic dependent launch, as the streaming ops use) and thread-block clusters (as the session 30 seal) add?
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/launch_probe eval/bench/probes/launch_probe.cu && /tmp/launch_probe
//   (bash eval/bench/probes/probe_gpu_run.sh launch on the GPU host; tab-separated rows)
//
// Rows (each the median of 7 measurements of 2,000 launches or 500 chains):
//   host_us_per_launch   params (64 B or 2,112 B) x (plain, PDL): host time of one launch call, back to back
//   chain_us             3 dependent kernels of one block (as a chunk call: grid 16, 1, 8), the host's first launch
//                        call to the end of the third kernel, over a synchronised stream: what a lone call costs
//   chain_cluster_us     the same with the third kernel as a cluster of 8 blocks
#include <cuda_runtime.h>

#include "probe_check.h"
#include "../../../decoders/include/launch_ex.cuh"  // the ops' own launch helper

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

struct Small {
  int* out;
  int64_t a[7];
};
struct Big {
  int* out;
  int64_t a[7];
  int* ptrs[256];  // as StateRefs::ptrs
};
static_assert(sizeof(Small) == 64, "");

template <typename P>
__global__ void k_work(P p, int pdl) {
  if (pdl) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  if (threadIdx.x == 0) atomicAdd(p.out, (int)p.a[blockIdx.x % 7]);
}

template <typename P>
cudaError_t launch(const P& p, int grid, int cluster, bool pdl, cudaStream_t s) {
  return beamdec::launch_kernel_ex(pdl, (unsigned)cluster, grid, 256, 0, s, k_work<P>, p, pdl ? 1 : 0);
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename P>
void run(const char* name, int* out, cudaStream_t s) {
  P p{};
  p.out = out;
  for (int i = 0; i < 7; ++i) p.a[i] = i;
  using clk = std::chrono::steady_clock;
  for (int pdl = 0; pdl < 2; ++pdl) {
    std::vector<double> host, chain, chain_cl;
    for (int rep = 0; rep < 8; ++rep) {
      CHECK(cudaStreamSynchronize(s));
      auto t0 = clk::now();
      for (int i = 0; i < 2000; ++i) CHECK(launch(p, 16, 0, pdl, s));
      auto t1 = clk::now();
      CHECK(cudaStreamSynchronize(s));
      if (rep) host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2000);
      for (int cl = 0; cl < 2; ++cl) {
        double sum = 0;
        for (int i = 0; i < 500; ++i) {
          auto c0 = clk::now();
          CHECK(launch(p, 16, 0, pdl, s));
          CHECK(launch(p, 1, 0, pdl, s));
          CHECK(launch(p, 8, cl ? 8 : 0, pdl, s));
          CHECK(cudaStreamSynchronize(s));
          sum += std::chrono::duration<double, std::micro>(clk::now() - c0).count();
        }
        if (rep) (cl ? chain_cl : chain).push_back(sum / 500);
      }
    }
    std::printf("host_us_per_launch\t%s\t%zu B\t%s\t%.2f\n", name, sizeof(P), pdl ? "pdl" : "plain", median(host));
    std::printf("chain_us\t%s\t%zu B\t%s\t%.2f\n", name, sizeof(P), pdl ? "pdl" : "plain", median(chain));
    std::printf("chain_cluster_us\t%s\t%zu B\t%s\t%.2f\n", name, sizeof(P), pdl ? "pdl" : "plain", median(chain_cl));
  }
}

int main() {
  int* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int round = 0; round < 2; ++round) {  // the order once each way
    if (round == 0) {
      run<Small>("small", out, s);
      run<Big>("big", out, s);
    } else {
      run<Big>("big", out, s);
      run<Small>("small", out, s);
    }
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
