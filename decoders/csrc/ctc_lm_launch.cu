// The fused CTC + LM / boosting beam search kernel: one block per row runs decode_row (ctc_lm_kernels.cuh) with
// the GPU block policy (strided thread loops, __syncthreads, shared atomics).
#include "ctc_lm_launch.cuh"

namespace beamdec {
namespace ctclm {

namespace {

struct GpuBlock {
  template <class F>
  __device__ __forceinline__ void for_each(int n, F&& f) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) f(i);
  }
  template <class F>
  __device__ __forceinline__ void single(F&& f) {
    if (threadIdx.x == 0) f();
  }
  __device__ __forceinline__ void sync() { __syncthreads(); }
  __device__ __forceinline__ int atomic_add(int32_t* p, int v) { return atomicAdd(p, v); }
};

__global__ void __launch_bounds__(1024) ctc_lm_decode_kernel(Params p, int64_t cand_in_smem) {
  extern __shared__ __align__(16) char smem[];
  Shared S;
  carve_shared(smem, p.beam, cand_in_smem, S);
  GpuBlock blk;
  decode_row(p, (int)blockIdx.x, blk, S);
}

}  // namespace

bool candidates_in_shared(int beam, int V) {
  Shared s;
  return carve_shared(nullptr, beam, candidate_count(beam, V), s) <= kSharedBudgetBytes;
}

cudaError_t launch_decode(const Params& p, int block_threads, cudaStream_t stream) {
  if (p.B == 0) return cudaSuccess;
  Shared s;
  const bool in_smem = candidates_in_shared(p.beam, p.V);
  const int64_t cand = in_smem ? candidate_count(p.beam, p.V) : 0;
  const size_t smem = carve_shared(nullptr, p.beam, cand, s);
  const int threads = block_threads > 0 ? block_threads : kDefaultThreads;
  ctc_lm_decode_kernel<<<p.B, threads, smem, stream>>>(p, cand);
  return cudaGetLastError();
}

}  // namespace ctclm
}  // namespace beamdec
