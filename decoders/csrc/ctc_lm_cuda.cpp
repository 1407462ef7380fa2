// CUDA implementation of ctc_lm_decode: checks (ctc_lm_make_params), allocation on the caching allocator, the
// current stream, one launch (ctc_lm_launch.cu). No synchronisation.
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/types.h>

#include <string>

#include "ctc_lm_launch.cuh"
#include "ctc_lm_ops.h"

namespace beamdec {

CtcLmOutputs ctc_lm_decode_cuda(CTC_LM_DECODE_ARGS) {
  BEAMDEC_CHECK_VALUE(log_probs.is_cuda(), "log_probs must be a CUDA tensor for the CUDA op");
  c10::cuda::CUDAGuard guard(log_probs.device());
  ctclm::Params p = ctc_lm_make_params(CTC_LM_DECODE_CALL);
  const int64_t B = p.B, Tcap = p.T > 0 ? p.T : 1;
  auto i32 = log_probs.options().dtype(at::kInt);
  at::Tensor tokens = at::empty({B, nbest, Tcap}, i32);
  at::Tensor lens = at::empty({B, nbest}, i32);
  at::Tensor scores = at::empty({B, nbest}, log_probs.options());
  at::Tensor backptr = at::empty({B, Tcap, beam}, i32);
  at::Tensor cand;
  if (!ctclm::candidates_in_shared(p.beam, p.V)) {
    cand = at::empty({B, ctclm::candidate_count(p.beam, p.V)}, log_probs.options());
    p.cand_global = cand.data_ptr<float>();
  }
  p.backptr = backptr.data_ptr<int32_t>();
  p.out_tokens = tokens.data_ptr<int32_t>();
  p.out_len = lens.data_ptr<int32_t>();
  p.out_scores = scores.data_ptr<float>();
  const cudaError_t err = ctclm::launch_decode(p, (int)block_threads, c10::cuda::getCurrentCUDAStream());
  if (err != cudaSuccess) {
    const std::string m = std::string("ctc_lm_decode: CUDA launch failed: ") + cudaGetErrorString(err);
    TORCH_CHECK(false, m);
  }
  return {tokens, lens, scores};
}

}  // namespace beamdec
