// One kernel launch, plain or with the sm_90 launch attributes the CTC streaming ops use: `pdl` (programmatic stream
// serialization: the kernel may start while the one before it in the stream runs, and must wait on it itself,
// ctc_kernels.cuh wait_prior_grid_then_release_next) and `cluster` > 0 (thread-block clusters of that many blocks
// along x). Shared by decoders/csrc/ctc_launch.cu and the launch probe (eval/bench/probes/launch_probe.cu), so the
// probe times the launches the ops make. Returns the launch's error. Also `current_device_has_clusters`, the sm_90
// check both decoders' cluster launches make.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <utility>

namespace beamdec {

template <typename... Params, typename... Args>
cudaError_t launch_kernel_ex(bool pdl, unsigned cluster, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             void (*kernel)(Params...), Args&&... args) {
  if (!pdl && cluster == 0) {
    kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Whether the current device has thread-block clusters (compute capability 9.0 or newer), into `has`. The capability
// is read once per device per process (a launcher's hot path calls this; only cudaGetDevice runs per call). Returns the
// CUDA error of the query (the error state left as the query left it).
inline cudaError_t current_device_has_clusters(bool& has) {
  constexpr int kDevices = 64;
  static std::atomic<int> cached[kDevices] = {};  // 0 = not read yet, 1 = no clusters, 2 = clusters (any thread)
  int device = 0, major = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const int known = device >= 0 && device < kDevices ? cached[device].load(std::memory_order_relaxed) : 0;
  if (known != 0) {
    has = known == 2;
    return cudaSuccess;
  }
  e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (e != cudaSuccess) return e;
  has = major >= 9;
  if (device >= 0 && device < kDevices) cached[device].store(has ? 2 : 1, std::memory_order_relaxed);
  return cudaSuccess;
}

}  // namespace beamdec
