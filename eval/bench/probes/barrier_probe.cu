// Hardware probe for issue 16's batch-1 question (not a decoder benchmark; it decodes nothing and writes no result
// rows): what one barrier and one dependent round trip cost on this GPU, for the primitives a WFST step could be
// built from. The persistent 1-best kernel (decoders/include/wfst_kernels.cuh) pays per step three grid barriers
// and three arrive-and-prepare tails (threadfence + atomicAdd + one block's bookkeeping); session 21's code reading put
// a batch-1 HLG step at ~23 dependent global round trips. A thread-block cluster (sm_90) has a hardware barrier and
// distributed shared memory; if cluster.sync() and DSMEM round trips are much cheaper than grid.sync() and L2 round
// trips, lanes split over clusters (each cluster running its lanes' step loop with cluster barriers) would cut the
// fixed latency of a small-batch step. This probe measures those costs; it is the first step of that design.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/barrier_probe eval/bench/probes/barrier_probe.cu && /tmp/barrier_probe
//   (bash eval/bench/probes/probe_gpu_run.sh barrier on the GPU host; prints tab-separated rows, ns per operation)
//
// Rows:
//   grid.sync, cooperative launch of G blocks x 256 threads (G = SMs x k and small grids)
//   arrive+prepare+grid.sync: the persistent kernel's walk tail (threadfence, atomicAdd on one counter, the last
//     block to arrive writes a small scan-sized record, then grid.sync)
//   cluster.sync, one cluster of C blocks (C = 2..16; 16 needs the non-portable attribute), and with as many clusters
//     as fit running at once
//   dependent round trips by one thread: global load chain in L2 (pointer chase over 4 MiB), atomicAdd chain on one
//     global word, local shared-memory load chain, DSMEM load chain into another block of the cluster, DSMEM atomicAdd
//     chain
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "probe_check.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

constexpr int kThreads = 256;

// Nanoseconds from the global timer (no assumption about the SM clock under load).
__device__ __forceinline__ long long now_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void grid_sync_kernel(int iters) {
  cg::grid_group grid = cg::this_grid();
  for (int i = 0; i < iters; ++i) grid.sync();
}

// The persistent kernel's walk tail: every block arrives on one counter; the last one runs a small `prepare`
// (a block-wide write of a 256-entry record, standing in for the lanes' scan) and re-arms the counter; then grid.sync.
__global__ void arrive_prepare_kernel(int iters, unsigned* counter, int* record) {
  cg::grid_group grid = cg::this_grid();
  __shared__ bool last;
  for (int i = 0; i < iters; ++i) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last) {
      record[threadIdx.x] = record[threadIdx.x] + i;
      __syncthreads();
      if (threadIdx.x == 0) *counter = 0u;
      __threadfence();
    }
    grid.sync();
  }
}

__global__ void cluster_sync_kernel(int iters) {
  cg::cluster_group cluster = cg::this_cluster();
  for (int i = 0; i < iters; ++i) cluster.sync();
}

// One thread chases `hops` dependent loads through a random cycle of `next` (global, L2-resident footprint).
__global__ void global_chase_kernel(const int* next, int hops, long long* ns, int* sink) {
  int p = 0;
  const long long t0 = now_ns();
  for (int i = 0; i < hops; ++i) p = __ldcg(next + p);
  ns[0] = now_ns() - t0;
  sink[0] = p;
}

__global__ void global_atomic_chain_kernel(int* word, int hops, long long* ns, int* sink) {
  int v = 0;
  const long long t0 = now_ns();
  for (int i = 0; i < hops; ++i) v = atomicAdd(word, (v & 1) + 1);  // each add depends on the previous result
  ns[0] = now_ns() - t0;
  sink[0] = v;
}

constexpr int kSmemInts = 8192;  // 32 KiB per block

// Block 0's thread 0 chases through (a) its own shared memory, (b) block 1's via DSMEM, then (c) atomicAdds on block
// 1's shared word; every block fills its array with the same random cycle first.
__global__ void dsmem_chase_kernel(const int* perm, int hops, long long* ns, int* sink) {
  __shared__ int table[kSmemInts];
  cg::cluster_group cluster = cg::this_cluster();
  for (int i = threadIdx.x; i < kSmemInts; i += blockDim.x) table[i] = perm[i];
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    int p = 0;
    long long t0 = now_ns();
    for (int i = 0; i < hops; ++i) p = *(volatile int*)&table[p];
    ns[0] = now_ns() - t0;
    int* remote = cluster.map_shared_rank(table, 1);
    int q = 0;
    t0 = now_ns();
    for (int i = 0; i < hops; ++i) q = *(volatile int*)&remote[q];
    ns[1] = now_ns() - t0;
    int v = 0;
    t0 = now_ns();
    for (int i = 0; i < hops; ++i) v = atomicAdd(&remote[kSmemInts - 1], (v & 1) + 1);
    ns[2] = now_ns() - t0;
    sink[0] = p + q + v;
  }
  cluster.sync();
}

// ns per iteration of a kernel looping `iters` times: `launch()` enqueues it; one warm-up launch, then one timed.
template <typename Launch>
static double ns_per_iter(Launch launch, int iters) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(launch());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaEventRecord(a));
  CHECK(launch());
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0.f;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return ms * 1e6 / iters;
}

static double coop_ns(void* fn, int blocks, void** args, int iters) {
  return ns_per_iter([&] { return cudaLaunchCooperativeKernel(fn, blocks, kThreads, args, 0, 0); }, iters);
}

// A launch of `clusters` clusters of `cluster` blocks x kThreads (attr: storage for the cluster-dimension attribute).
static cudaLaunchConfig_t cluster_config(int cluster, int clusters, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cluster * clusters);
  cfg.blockDim = dim3(kThreads);
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

static double cluster_ns(int cluster, int clusters, int iters) {
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = cluster_config(cluster, clusters, attr);
  return ns_per_iter([&] { return cudaLaunchKernelEx(&cfg, cluster_sync_kernel, iters); }, iters);
}

int main() {
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  sms = prop.multiProcessorCount;
  std::printf("device: %s, %d SMs\n", prop.name, sms);
  std::printf("primitive\tconfiguration\tns_per_operation\n");

  const int iters = 20000;
  int occ = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, grid_sync_kernel, kThreads, 0));
  {
    int it = iters;
    void* args[] = {&it};
    std::vector<int> grids = {1, 8, 16, 32, sms, 2 * sms, 4 * sms};
    for (int g : grids) {
      if (g > occ * sms) continue;
      std::printf("grid.sync\t%d blocks x %d threads (cooperative)\t%.0f\n", g, kThreads,
                  coop_ns(reinterpret_cast<void*>(grid_sync_kernel), g, args, iters));
    }
  }
  {
    unsigned* counter;
    int* record;
    CHECK(cudaMalloc(&counter, sizeof(unsigned)));
    CHECK(cudaMalloc(&record, sizeof(int) * kThreads));
    CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
    CHECK(cudaMemset(record, 0, sizeof(int) * kThreads));
    int occ2 = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ2, arrive_prepare_kernel, kThreads, 0));
    int it = iters;
    void* args[] = {&it, &counter, &record};
    for (int g : {16, sms, 4 * sms}) {
      if (g > occ2 * sms) continue;
      std::printf("arrive + prepare + grid.sync\t%d blocks x %d threads\t%.0f\n", g, kThreads,
                  coop_ns(reinterpret_cast<void*>(arrive_prepare_kernel), g, args, iters));
    }
    CHECK(cudaFree(counter));
    CHECK(cudaFree(record));
  }
  CHECK(cudaFuncSetAttribute(cluster_sync_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (int c : {2, 4, 8, 16}) {
    int max_clusters = 0;
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t cfg = cluster_config(c, 1, attr);
    if (cudaOccupancyMaxActiveClusters(&max_clusters, cluster_sync_kernel, &cfg) != cudaSuccess || max_clusters < 1) {
      cudaGetLastError();
      std::printf("cluster.sync\tcluster of %d: not launchable here\t-\n", c);
      continue;
    }
    std::printf("cluster.sync\t1 cluster of %d blocks\t%.0f\n", c, cluster_ns(c, 1, iters));
    std::printf("cluster.sync\t%d clusters of %d blocks at once\t%.0f\n", max_clusters, c,
                cluster_ns(c, max_clusters, iters));
  }

  // dependent round trips, one thread
  const int hops = 4096;
  long long* d_ns;
  int* sink;
  CHECK(cudaMalloc(&d_ns, 4 * sizeof(long long)));
  CHECK(cudaMalloc(&sink, sizeof(int)));
  auto random_cycle = [](int n, unsigned seed) {
    std::vector<int> order(n), next(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    for (int i = n - 1; i > 0; --i) {
      seed = seed * 1664525u + 1013904223u;
      std::swap(order[i], order[seed % (i + 1)]);
    }
    for (int i = 0; i < n; ++i) next[order[i]] = order[(i + 1) % n];
    return next;
  };
  {
    const int n = 1 << 20;  // 4 MiB: in L2, past L1
    std::vector<int> next = random_cycle(n, 7u);
    int* d_next;
    CHECK(cudaMalloc(&d_next, sizeof(int) * n));
    CHECK(cudaMemcpy(d_next, next.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
    global_chase_kernel<<<1, 1>>>(d_next, hops, d_ns, sink);  // warm the lines into L2
    global_chase_kernel<<<1, 1>>>(d_next, hops, d_ns, sink);
    long long c = 0;
    CHECK(cudaMemcpy(&c, d_ns, sizeof(c), cudaMemcpyDeviceToHost));
    std::printf("global load chain (L2)\t1 thread, %d hops over 4 MiB\t%.0f\n", hops, c * 1.0 / hops);
    CHECK(cudaFree(d_next));
  }
  {
    int* word;
    CHECK(cudaMalloc(&word, sizeof(int)));
    CHECK(cudaMemset(word, 0, sizeof(int)));
    global_atomic_chain_kernel<<<1, 1>>>(word, hops, d_ns, sink);
    global_atomic_chain_kernel<<<1, 1>>>(word, hops, d_ns, sink);
    long long c = 0;
    CHECK(cudaMemcpy(&c, d_ns, sizeof(c), cudaMemcpyDeviceToHost));
    std::printf("global atomicAdd chain\t1 thread, %d dependent adds\t%.0f\n", hops, c * 1.0 / hops);
    CHECK(cudaFree(word));
  }
  {
    std::vector<int> perm = random_cycle(kSmemInts - 1, 11u);
    perm.push_back(0);
    int* d_perm;
    CHECK(cudaMalloc(&d_perm, sizeof(int) * kSmemInts));
    CHECK(cudaMemcpy(d_perm, perm.data(), sizeof(int) * kSmemInts, cudaMemcpyHostToDevice));
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t cfg = cluster_config(2, 1, attr);
    CHECK(cudaLaunchKernelEx(&cfg, dsmem_chase_kernel, (const int*)d_perm, hops, d_ns, sink));
    CHECK(cudaDeviceSynchronize());
    long long c[3] = {0, 0, 0};
    CHECK(cudaMemcpy(c, d_ns, sizeof(c), cudaMemcpyDeviceToHost));
    std::printf("shared load chain (own block)\t1 thread, %d hops\t%.0f\n", hops, c[0] * 1.0 / hops);
    std::printf("DSMEM load chain (other block of the cluster)\t1 thread, %d hops\t%.0f\n", hops,
                c[1] * 1.0 / hops);
    std::printf("DSMEM atomicAdd chain\t1 thread, %d dependent adds\t%.0f\n", hops, c[2] * 1.0 / hops);
    CHECK(cudaFree(d_perm));
  }
  CHECK(cudaFree(d_ns));
  CHECK(cudaFree(sink));
  CHECK(cudaDeviceSynchronize());
  return 0;
}
