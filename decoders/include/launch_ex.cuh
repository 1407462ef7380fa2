// One kernel launch, plain or with the sm_90 launch attributes the CTC streaming ops use: `pdl` (programmatic stream
// serialization: the kernel may start while the one before it in the stream runs, and must wait on it itself,
// ctc_kernels.cuh wait_prior_grid_then_release_next) and `cluster` > 0 (thread-block clusters of that many blocks
// along x). Shared by decoders/csrc/ctc_launch.cu and the launch probe (eval/bench/probes/launch_probe.cu), so the
// probe times the launches the ops make. Returns the launch's error.
#pragma once

#include <cuda_runtime.h>

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

}  // namespace beamdec
