// Declarations of the CTC prefix beam search ops (CPU reference and CUDA). Owned by the CTC decoder.
//
// Ops (schemas in bindings.cpp):
//   ctc_decode_offline(log_probs (B,T,V), lengths (B,), beam, blank, threshold, nbest, max_len)
//       -> tokens (B,nbest,max_len) int32, token_lengths (B,nbest) int32, scores (B,nbest) f32, status (B,) int32
//   ctc_decode_chunk(state! (B,W) int32, log_probs (B,T,V), speech_mask? (B,T) bool, beam, blank, max_len)
//   ctc_decode_chunk_batched(states! [N x (1,W)], log_probs (N,T,V), speech_mask? (N,T), beam, blank, max_len)
//   ctc_finalize(state (B,W), beam, nbest, max_len) -> same four tensors as ctc_decode_offline
// status bit 0: the log-probs held NaN or +inf (the Python layer raises; kernels cannot).
#pragma once
#include <torch/types.h>

#include <tuple>
#include <vector>

namespace beamdec {

using CtcOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// CPU reference (ctc_cpu.cpp)
CtcOutputs ctc_decode_offline_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                  int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                  int64_t max_seq_len);
void ctc_decode_chunk_cpu(at::Tensor& state, const at::Tensor& log_probs,
                          const std::optional<at::Tensor>& speech_mask, int64_t beam_size, int64_t blank_id,
                          int64_t max_seq_len);
void ctc_decode_chunk_batched_cpu(at::TensorList states, const at::Tensor& log_probs,
                                  const std::optional<at::Tensor>& speech_mask, int64_t beam_size,
                                  int64_t blank_id, int64_t max_seq_len);
CtcOutputs ctc_finalize_cpu(const at::Tensor& state, int64_t beam_size, int64_t nbest, int64_t max_seq_len);

// CUDA (ctc_cuda.cpp)
CtcOutputs ctc_decode_offline_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                   int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                   int64_t max_seq_len);
void ctc_decode_chunk_cuda(at::Tensor& state, const at::Tensor& log_probs,
                           const std::optional<at::Tensor>& speech_mask, int64_t beam_size, int64_t blank_id,
                           int64_t max_seq_len);
void ctc_decode_chunk_batched_cuda(at::TensorList states, const at::Tensor& log_probs,
                                   const std::optional<at::Tensor>& speech_mask, int64_t beam_size,
                                   int64_t blank_id, int64_t max_seq_len);
CtcOutputs ctc_finalize_cuda(const at::Tensor& state, int64_t beam_size, int64_t nbest, int64_t max_seq_len);

// Argument checks shared by both backends (ctc_cpu.cpp); each error names the argument.
void ctc_check_config(int64_t beam_size, int64_t blank_id, int64_t vocab_size, int64_t nbest, int64_t max_seq_len);
void ctc_check_log_probs(const at::Tensor& log_probs, const char* name);
void ctc_check_state(const at::Tensor& state, int64_t beam_size, int64_t max_seq_len, const char* name);

}  // namespace beamdec
