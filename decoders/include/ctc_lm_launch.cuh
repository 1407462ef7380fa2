// Launcher of the fused CTC + LM / boosting beam search (ctc_lm_kernels.cuh): torch-free, raw pointers and a
// stream; no allocation, no synchronisation. The caller allocates Params' workspace and outputs.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ctc_lm_kernels.cuh"

namespace beamdec {
namespace ctclm {

// Shared memory a block may use without opting in; the candidates (K + K * V floats) live there when they fit.
constexpr size_t kSharedBudgetBytes = 48 * 1024;

// Whether the candidates of (beam, V) fit in shared memory; else the caller passes cand_global (B, candidates).
bool candidates_in_shared(int beam, int V);

// One block per row; block_threads 0: kDefaultThreads.
cudaError_t launch_decode(const Params& p, int block_threads, cudaStream_t stream);

}  // namespace ctclm
}  // namespace beamdec
