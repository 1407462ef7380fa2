// Bit helpers shared by the CTC and WFST kernels: the device intrinsic in device code, the compiler builtin on the
// host (CPU twins of kernel code: tests/cpp/warp_rounds_host.cpp, the WFST host launchers). Plain C++ without CUDA.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BITOPS_HD __host__ __device__ __forceinline__
#else
#define BITOPS_HD inline
#endif

namespace bitops {

BITOPS_HD int32_t popcount32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __popc(x);
#else
  return __builtin_popcount(x);
#endif
}

}  // namespace bitops
