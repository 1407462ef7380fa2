// Torch-facing CUDA ops of the CTC prefix beam search: validate, allocate (caching allocator, no sync),
// take the current stream, call the torch-free launchers (ctc_launch.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/types.h>

#include <cstdlib>
#include <limits>
#include <vector>

#include "ctc_common.cuh"
#include "ctc_launch.h"
#include "ctc_ops.h"

namespace beamdec {

namespace {

void check_cuda(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "CTC beam search CUDA launch failed in ", what, ": ", cudaGetErrorString(err));
}

void check_on_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.is_cuda(), name, " must be a CUDA tensor for the CUDA op, got device ", t.device());
}

ctc::DecodeLaunch make_launch(const at::Tensor& lp, int64_t beam, int64_t blank, int64_t max_len) {
  ctc::DecodeLaunch d{};
  d.log_probs = lp.data_ptr();
  d.half = lp.scalar_type() == at::kHalf;
  d.b_stride = lp.stride(0);
  d.t_stride = lp.stride(1);
  d.rows = (int)lp.size(0);
  d.T = (int)lp.size(1);
  d.V = (int)lp.size(2);
  d.blank = (int)blank;
  d.beam = (int)beam;
  d.max_len = (int)max_len;
  d.blank_skip_threshold = 1.0f;
  // BEAMDEC_CTC_WARP_SELECT=1 opts beams <= 16 into the one-warp merge selection. Off by default: on the
  // H200 it measured ~10% slower per frame than the general path (6.1 vs 5.5 us at beam 10), and it breaks
  // exact ties by lane rather than by candidate slot, so under exact ties it can keep a different
  // (equal-scoring) set of prefixes than the CPU reference and the general path.
  const char* env = std::getenv("BEAMDEC_CTC_WARP_SELECT");
  d.warp_select = (env && env[0] == '1') ? 1 : 0;
  return d;
}

at::Tensor workspace(const at::Tensor& like, int rows, int64_t beam, int64_t V) {
  const size_t bytes = ctc::ctc_prepass_workspace_bytes(rows, (int)beam, (int)V);
  return at::empty({(int64_t)bytes}, like.options().dtype(at::kByte));
}

CtcOutputs finalize_rows(const at::Tensor& state, int64_t beam, int64_t nbest, int64_t max_len) {
  const int64_t B = state.size(0);
  auto i32 = state.options().dtype(at::kInt);
  at::Tensor tokens = at::full({B, nbest, max_len}, -1, i32);
  at::Tensor lens = at::empty({B, nbest}, i32);
  at::Tensor scores = at::empty({B, nbest}, state.options().dtype(at::kFloat));
  at::Tensor status = at::empty({B}, i32);
  check_cuda(ctc::ctc_finalize_rows(state.data_ptr<int32_t>(), state.size(1), (int)B, (int)beam, (int)max_len,
                                    (int)nbest, tokens.data_ptr<int32_t>(), lens.data_ptr<int32_t>(),
                                    scores.data_ptr<float>(), status.data_ptr<int32_t>(),
                                    at::cuda::getCurrentCUDAStream()),
             "finalize");
  return {tokens, lens, scores, status};
}

void check_mask(const std::optional<at::Tensor>& m, const at::Tensor& lp) {
  if (!m) return;
  check_on_cuda(*m, "speech_mask");
  TORCH_CHECK_VALUE(m->dim() == 2 && m->size(0) == lp.size(0) && m->size(1) == lp.size(1),
                    "speech_mask must have shape (", lp.size(0), ", ", lp.size(1), "), got ", m->sizes());
  TORCH_CHECK_VALUE(m->scalar_type() == at::kBool, "speech_mask must be a bool tensor, got ", m->scalar_type());
}

}  // namespace

CtcOutputs ctc_decode_offline_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                   int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                   int64_t max_seq_len) {
  ctc_check_log_probs(log_probs, "log_probs");
  check_on_cuda(log_probs, "log_probs");
  check_on_cuda(lengths, "lengths");
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
  ctc_check_config(beam_size, blank_id, V, nbest, max_seq_len);
  TORCH_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) == B, "lengths must have shape (B=", B, ",), got ",
                    lengths.sizes());
  TORCH_CHECK_VALUE(lengths.scalar_type() == at::kInt, "lengths must be int32 for the CUDA op, got ",
                    lengths.scalar_type());
  TORCH_CHECK_VALUE(!(blank_skip_threshold != blank_skip_threshold), "blank_skip_threshold must not be NaN");
  TORCH_CHECK_VALUE(B >= 1 && B <= 65535, "log_probs: batch must be in [1, 65535], got ", B);
  // lengths outside [0, T] cannot be checked without a device->host sync; the kernels clamp them to T
  // (a frame t is decoded iff t < lengths[b] and t < T) and the Python layer checks them when it can.
  c10::cuda::CUDAGuard guard(log_probs.device());
  at::Tensor lp = log_probs.stride(2) == 1 ? log_probs : log_probs.contiguous();
  const int64_t words = ctc::state_words((int)beam_size, (int)max_seq_len);
  at::Tensor state = at::zeros({B, words}, lp.options().dtype(at::kInt));
  at::Tensor ws = workspace(lp, (int)B, beam_size, V);
  at::Tensor lens = lengths.contiguous();
  ctc::DecodeLaunch d = make_launch(lp, beam_size, blank_id, max_seq_len);
  d.lengths = lens.data_ptr<int32_t>();
  d.blank_skip_threshold = (float)blank_skip_threshold;
  d.state = state.data_ptr<int32_t>();
  d.state_row_words = words;
  d.workspace = ws.data_ptr();
  (void)T;
  check_cuda(ctc::ctc_decode_frames(d, at::cuda::getCurrentCUDAStream()), "decode");
  return finalize_rows(state, beam_size, nbest, max_seq_len);
}

void ctc_decode_chunk_cuda(at::Tensor& state, const at::Tensor& log_probs,
                           const std::optional<at::Tensor>& speech_mask, int64_t beam_size, int64_t blank_id,
                           int64_t max_seq_len) {
  ctc_check_log_probs(log_probs, "log_probs");
  check_on_cuda(log_probs, "log_probs");
  check_on_cuda(state, "state");
  ctc_check_config(beam_size, blank_id, log_probs.size(2), 1, max_seq_len);
  ctc_check_state(state, beam_size, max_seq_len, "state");
  TORCH_CHECK_VALUE(state.size(0) == log_probs.size(0), "state has ", state.size(0), " rows but log_probs has batch ",
                    log_probs.size(0));
  check_mask(speech_mask, log_probs);
  if (log_probs.size(1) == 0) return;
  c10::cuda::CUDAGuard guard(log_probs.device());
  at::Tensor lp = log_probs.stride(2) == 1 ? log_probs : log_probs.contiguous();
  at::Tensor mask;
  ctc::DecodeLaunch d = make_launch(lp, beam_size, blank_id, max_seq_len);
  if (speech_mask) {
    mask = speech_mask->contiguous();
    d.mask = mask.data_ptr<bool>();
    d.mask_b_stride = mask.stride(0);
  }
  at::Tensor ws = workspace(lp, d.rows, beam_size, lp.size(2));
  d.state = state.data_ptr<int32_t>();
  d.state_row_words = state.size(1);
  d.workspace = ws.data_ptr();
  check_cuda(ctc::ctc_decode_frames(d, at::cuda::getCurrentCUDAStream()), "decode_chunk");
}

void ctc_decode_chunk_batched_cuda(at::TensorList states, const at::Tensor& log_probs,
                                   const std::optional<at::Tensor>& speech_mask, int64_t beam_size,
                                   int64_t blank_id, int64_t max_seq_len) {
  ctc_check_log_probs(log_probs, "log_probs");
  check_on_cuda(log_probs, "log_probs");
  ctc_check_config(beam_size, blank_id, log_probs.size(2), 1, max_seq_len);
  const int64_t N = log_probs.size(0);
  TORCH_CHECK_VALUE((int64_t)states.size() == N, "states: got ", states.size(), " states for ", N,
                    " log_probs rows (one row per stream)");
  for (size_t i = 0; i < states.size(); ++i) {
    check_on_cuda(states[i], "states[i]");
    ctc_check_state(states[i], beam_size, max_seq_len, "states[i]");
    TORCH_CHECK_VALUE(states[i].size(0) == 1, "states[", i, "] must hold one row (batch 1), got ", states[i].size(0));
    TORCH_CHECK_VALUE(states[i].device() == log_probs.device(), "states[", i, "] is on ", states[i].device(),
                      " but log_probs is on ", log_probs.device());
  }
  check_mask(speech_mask, log_probs);
  if (N == 0 || log_probs.size(1) == 0) return;
  c10::cuda::CUDAGuard guard(log_probs.device());
  at::Tensor lp = log_probs.stride(2) == 1 ? log_probs : log_probs.contiguous();
  at::Tensor mask;
  if (speech_mask) mask = speech_mask->contiguous();
  const int group = ctc::kMaxStreamsPerLaunch;
  at::Tensor ws = workspace(lp, (int)std::min<int64_t>(N, group), beam_size, lp.size(2));
  std::vector<int32_t*> ptrs(group);
  auto stream = at::cuda::getCurrentCUDAStream();
  for (int64_t g0 = 0; g0 < N; g0 += group) {  // one launch pair per tile per group of 64 streams
    const int n = (int)std::min<int64_t>(group, N - g0);
    at::Tensor part = lp.narrow(0, g0, n);
    ctc::DecodeLaunch d = make_launch(part, beam_size, blank_id, max_seq_len);
    if (speech_mask) {
      d.mask = mask.data_ptr<bool>() + g0 * mask.stride(0);
      d.mask_b_stride = mask.stride(0);
    }
    for (int i = 0; i < n; ++i) ptrs[i] = states[g0 + i].data_ptr<int32_t>();
    d.stream_states = ptrs.data();
    d.workspace = ws.data_ptr();
    check_cuda(ctc::ctc_decode_frames(d, stream), "decode_chunk_batched");
  }
}

CtcOutputs ctc_finalize_cuda(const at::Tensor& state, int64_t beam_size, int64_t nbest, int64_t max_seq_len) {
  check_on_cuda(state, "state");
  ctc_check_config(beam_size, 0, 2, nbest, max_seq_len);
  ctc_check_state(state, beam_size, max_seq_len, "state");
  c10::cuda::CUDAGuard guard(state.device());
  return finalize_rows(state, beam_size, nbest, max_seq_len);
}

}  // namespace beamdec
