// One cooperative launch of a persistent kernel, shared by the 1-best step loop (decoders/csrc/wfst_launch.cu) and
// the lattice forward pass (decoders/csrc/wfst_lattice_launch.cu): checks that the device supports cooperative
// launches, asks the occupancy of `kernel` at `threads` per block (once per kernel, cached), lets the caller size
// the grid from it (`grid_of(blocks_per_sm, sms)`: every block must be resident at once for the grid barriers),
// launches. Returns false with nothing enqueued and the CUDA error state cleared when the device, the occupancy
// query or the launch refuses: the caller then falls back to its per-kernel launches.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "launch_ex.cuh"

namespace wfst {

template <typename Kernel>
int cooperative_blocks_per_sm(Kernel kernel, int threads) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0) != cudaSuccess) cudaGetLastError(), n = 0;
  return n;
}

template <auto kKernel, typename GridFn>
bool cooperative_launch(int threads, GridFn grid_of, void** args, cudaStream_t stream) {
  int device = 0, coop = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device) != cudaSuccess || !coop ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return cudaGetLastError(), false;
  static const int blocks_per_sm = cooperative_blocks_per_sm(kKernel, threads);  // per kernel (template argument)
  if (blocks_per_sm <= 0) return false;
  const int64_t blocks = grid_of(blocks_per_sm, sms);
  if (blocks < 1 || blocks > INT32_MAX) return false;
  if (cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kKernel), dim3(static_cast<unsigned>(blocks)),
                                  dim3(threads), args, 0, stream) != cudaSuccess)
    return cudaGetLastError(), false;
  return true;
}

// One thread-block cluster of `blocks` blocks as the whole grid (sm_90+; 9-16 blocks need the non-portable cluster
// size, which this allows per kernel): the hardware co-schedules a cluster's blocks, so its barrier is a grid barrier
// for this launch. Returns false with nothing enqueued and the CUDA error state cleared when the device is older than
// sm_90, the size is out of 2..16, no such cluster fits (cudaOccupancyMaxActiveClusters) or the launch refuses.
template <auto kKernel>
bool single_cluster_launch(int threads, int blocks, void** args, cudaStream_t stream) {
  bool has_clusters = false;
  if (blocks < 2 || blocks > 16 || beamdec::current_device_has_clusters(has_clusters) != cudaSuccess ||
      !has_clusters)
    return cudaGetLastError(), false;
  static const bool non_portable =
      cudaFuncSetAttribute(reinterpret_cast<const void*>(kKernel), cudaFuncAttributeNonPortableClusterSizeAllowed,
                           1) == cudaSuccess || (cudaGetLastError(), false);
  if (blocks > 8 && !non_portable) return false;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(blocks);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(kKernel), &cfg) != cudaSuccess ||
      clusters < 1)
    return cudaGetLastError(), false;
  if (cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(kKernel), args) != cudaSuccess)
    return cudaGetLastError(), false;
  return true;
}

}  // namespace wfst
