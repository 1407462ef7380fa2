// The fused CTC prefix beam search with token n-gram LM fusion and phrase boosting (decoders/ctc_lm.py,
// kernel="fused"): one op, a CPU implementation (the kernel's own code run item by item, ctc_lm_cpu.cpp) and
// the CUDA one (one block per row, ctc_lm_cuda.cpp + ctc_lm_launch.cu). Kernel: decoders/include/ctc_lm_kernels.cuh.
//
//   ctc_lm_decode(log_probs (B,T,V) f32, lengths (B,) i64,
//                 lm_row_ptr (S+1,) i32, lm_label (A,) i32, lm_weight (A,) f32, lm_dest (A,) i32,
//                 lm_fallback (S,) i32, lm_fallback_w (S,) f32, col_label (V,) i32,     [empty: no LM]
//                 boost_row_ptr, boost_label, boost_dest, boost_fallback (i32), boost_credit, boost_out (f32),
//                 boost_roots (B,) i32,                                                  [empty: no boosting]
//                 beam, blank, skip_mode, log_thr, bonus, lm_weight_value, lm_eos, bos_state, eos_label, nbest,
//                 block_threads, reverse_items)
//       -> tokens (B, nbest, max(T,1)) i32, token_lengths (B, nbest) i32, scores (B, nbest) f32
// block_threads: CUDA threads per block (0: default); reverse_items: the CPU op runs every phase's items last to
// first (a phase whose items depended on each other would then differ: tests run both orders).
#pragma once
#include <torch/types.h>

#include <tuple>

#include "common_check.h"
#include "ctc_lm_kernels.cuh"

namespace beamdec {

using CtcLmOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

#define CTC_LM_DECODE_ARGS                                                                                         \
  const at::Tensor &log_probs, const at::Tensor &lengths, const at::Tensor &lm_row_ptr, const at::Tensor &lm_label, \
      const at::Tensor &lm_weight, const at::Tensor &lm_dest, const at::Tensor &lm_fallback,                       \
      const at::Tensor &lm_fallback_w, const at::Tensor &col_label, const at::Tensor &boost_row_ptr,               \
      const at::Tensor &boost_label, const at::Tensor &boost_dest, const at::Tensor &boost_fallback,               \
      const at::Tensor &boost_credit, const at::Tensor &boost_out, const at::Tensor &boost_roots, int64_t beam,    \
      int64_t blank, int64_t skip_mode, double log_thr, double bonus, double lm_weight_value, bool lm_eos,         \
      int64_t bos_state, int64_t eos_label, int64_t nbest, int64_t block_threads, bool reverse_items

#define CTC_LM_DECODE_CALL                                                                                      \
  log_probs, lengths, lm_row_ptr, lm_label, lm_weight, lm_dest, lm_fallback, lm_fallback_w, col_label,          \
      boost_row_ptr, boost_label, boost_dest, boost_fallback, boost_credit, boost_out, boost_roots, beam, blank, \
      skip_mode, log_thr, bonus, lm_weight_value, lm_eos, bos_state, eos_label, nbest, block_threads, reverse_items

// Validates every argument (one-line ValueErrors naming it) and fills the kernel parameters' inputs.
ctclm::Params ctc_lm_make_params(CTC_LM_DECODE_ARGS);

CtcLmOutputs ctc_lm_decode_cpu(CTC_LM_DECODE_ARGS);
CtcLmOutputs ctc_lm_decode_cuda(CTC_LM_DECODE_ARGS);

}  // namespace beamdec
