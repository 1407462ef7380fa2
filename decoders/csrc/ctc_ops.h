// Declarations of the CTC prefix beam search ops (CPU reference and CUDA). Owned by the CTC decoder.
//
// Ops (schemas in bindings.cpp):
//   ctc_decode_offline(log_probs (B,T,V), lengths (B,), beam, blank, threshold, nbest, max_len)
//       -> tokens (B,nbest,max_len) int32, token_lengths (B,nbest) int32, scores (B,nbest) f32, status (B,) int32
//   ctc_decode_chunk(state! (B,W) int32, log_probs (B,T,V), speech_mask? (B,T) bool, beam, blank, max_len)
//   ctc_decode_chunk_batched(states! [N x (1,W)], log_probs (N,T,V), speech_mask? (N,T), beam, blank, max_len)
//   ctc_finalize(state (B,W), beam, nbest, max_len) -> same four tensors as ctc_decode_offline
// status bit 0: the log-probs held NaN or +inf (the Python layer raises; kernels cannot);
// status bit 1: some hypothesis reached max_seq_len.
#pragma once
#include <torch/types.h>

#include <tuple>
#include <vector>

#include "ctc_common.cuh"

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

// Argument checks shared by both backends; each error names the argument. Inline, so that every op
// throws from its own translation unit (on the H200 host, torch 2.11, a ValueError thrown from a helper
// defined in ctc_cpu.cpp and called by the CUDA op was seen to crash the process, while the CUDA op's own
// checks raised cleanly).
inline void ctc_check_config(int64_t beam_size, int64_t blank_id, int64_t vocab_size, int64_t nbest, int64_t max_seq_len) {
  TORCH_CHECK_VALUE(beam_size >= 1 && beam_size <= ctc::kMaxBeam, "beam_size must be in [1, ", ctc::kMaxBeam,
                    "], got ", beam_size);
  TORCH_CHECK_VALUE(vocab_size >= 2, "log_probs: vocabulary size V (last dim) must be >= 2 (blank + one token), got ",
                    vocab_size);
  TORCH_CHECK_VALUE(blank_id >= 0 && blank_id < vocab_size, "blank_id must be in [0, V=", vocab_size, "), got ",
                    blank_id);
  TORCH_CHECK_VALUE(nbest >= 1 && nbest <= beam_size, "nbest must be in [1, beam_size=", beam_size, "], got ", nbest);
  TORCH_CHECK_VALUE(max_seq_len >= 1 && max_seq_len <= (1 << 24), "max_seq_len must be in [1, 2^24], got ",
                    max_seq_len);
}

inline void ctc_check_log_probs(const at::Tensor& log_probs, const char* name) {
  TORCH_CHECK_VALUE(log_probs.dim() == 3, name, " must be 3-D (B, T, V), got shape ", log_probs.sizes());
  TORCH_CHECK_VALUE(log_probs.scalar_type() == at::kFloat || log_probs.scalar_type() == at::kHalf, name,
                    " must be float32 or float16, got ", log_probs.scalar_type());
}

inline void ctc_check_state(const at::Tensor& state, int64_t beam_size, int64_t max_seq_len, const char* name) {
  TORCH_CHECK_VALUE(state.dim() == 2 && state.scalar_type() == at::kInt, name,
                    " must be a 2-D int32 tensor (rows, words) made by CtcStreamingDecoder.create_state, got ",
                    state.scalar_type(), " ", state.sizes());
  TORCH_CHECK_VALUE(state.is_contiguous(), name, " must be contiguous");
  const int64_t words = ctc::state_words((int)beam_size, (int)max_seq_len);
  TORCH_CHECK_VALUE(state.size(1) == words, name, " has ", state.size(1), " words per row but beam_size=",
                    beam_size, ", max_seq_len=", max_seq_len, " need ", words,
                    " (was it created with another config?)");
}


}  // namespace beamdec
