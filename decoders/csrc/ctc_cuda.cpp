// Torch-facing CUDA ops of the CTC prefix beam search: validate, allocate (caching allocator, no sync),
// take the current stream, call the torch-free launchers (ctc_launch.h). Argument errors go through the
// CTC_* check macros of ctc_ops.h: they throw from the op's own frame with string-only messages (see there).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/types.h>

#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "ctc_common.cuh"
#include "ctc_launch.h"
#include "ctc_ops.h"

namespace beamdec {

namespace {

// An A/B switch's value: unset or empty is "", anything outside `allowed` a one-line ValueError naming the switch (a
// mistyped value once ran the default silently; session 17's reverted =split would have too).
std::string env_switch(const char* name, std::initializer_list<const char*> allowed) {
  const char* env = std::getenv(name);
  const std::string v = env ? env : "";
  if (v.empty()) return v;  // unset: the caller's default (every chunk call reads several switches)
  for (const char* a : allowed)
    if (v == a) return v;
  std::string list;  // the error's list of values, built only on this path
  for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
  CTC_ARG_CHECK(false, std::string(name) + " must be one of " + list + " (or unset), got '" + v + "'");
  return v;
}

// BEAMDEC_CTC_KERNEL=block: the block-per-row kernel for every beam; =warp: the one-warp kernel for every
// beam <= 32 whatever the row count; unset/auto: ctc_launch.h's measured rule.
int kernel_choice() {
  const std::string v = env_switch("BEAMDEC_CTC_KERNEL", {"auto", "block", "warp"});
  return v == "block" ? 1 : v == "warp" ? 2 : 0;
}

// BEAMDEC_CTC_PDL: overlapped launches (programmatic dependent launch: the pre-pass, one-warp decode and seal may each
// start while the kernel before it runs, and wait on it in their first instruction; ctc_kernels.cuh
// wait_prior_grid_then_release_next). Unset or =stream (the default since session 29): the streaming ops' launches
// overlapped, the offline ops' plain; =1: every launch overlapped; =0: every launch plain. The same reads and writes in
// the same order. Measured on the H100 (session 29, one call, in-process against =0, reports/measurements/README.md
// "Session 29"): one stream 3.82-3.92 us per frame instead of 4.06-4.19 (-5 to -7 %), 256 stream rows -4 to -5 %; the
// offline ops at B = 16 with V <= 1,000 +9 to +13 % slower overlapped (B = 1 and 4 -1 to -3 %, B = 16 / 64 at V 5,000
// equal), hence plain there.
bool overlapped_launches(bool streaming) {
  const std::string v = env_switch("BEAMDEC_CTC_PDL", {"stream", "0", "1"});
  return v == "1" || (v != "0" && streaming);
}

// streaming: a decode_chunk op's launch (the streaming default of BEAMDEC_CTC_PDL), else an offline op's
ctc::DecodeLaunch make_launch(const at::Tensor& lp, int64_t beam, int64_t blank, int64_t max_len, int64_t page_size,
                              int64_t num_pages, bool streaming) {
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
  d.page_size = (int)page_size;
  d.num_pages = (int)num_pages;
  d.kernel = kernel_choice();
  d.paged_smem = env_switch("BEAMDEC_CTC_PAGED_SMEM", {"0", "1"}) == "1" ? 1 : 0;
  d.pdl = overlapped_launches(streaming) ? 1 : 0;
  // the multi-winner rounds are the default since 2026-12-07 (H100, one call, in-process A/B against the select form:
  // kernel time -15 to -44 % at OASR's 12 offline shapes, one stream -18 to -20 %); =select / =branch give the earlier
  // forms (the select form and the warp-threshold pre-pass were the defaults from 2026-12-06); =rank the earlier
  // pre-pass
  {
    const std::string r = env_switch("BEAMDEC_CTC_ROUNDS", {"multi", "select", "branch"});
    d.rounds_select = r == "branch" ? 0 : r == "select" ? 1 : 2;
  }
  d.prepass_warp_tau = env_switch("BEAMDEC_CTC_PREPASS", {"warp", "rank"}) == "rank" ? 0 : 1;
  return d;
}

// The three launch savers below are the defaults since 2026-12-07 (H100, session 28: the CTC gpu tests, memcheck /
// racecheck / synccheck over the smoke, and an in-process A/B with one arm per switch,
// reports/measurements/README.md "Session 28"); each earlier form stays selectable.
// BEAMDEC_CTC_CHECK unset or =fused: the streaming ops' state check travels in the first tile's pre-pass launch and
// its verdict is formed by the decode kernel (ctc_kernels.cuh "Fused state check"; the one-warp multi-winner kernel
// only, the launcher falls back to the separate check elsewhere); =separate: its own launch before the pre-pass.
// The same verdicts, refusals and states either way.
bool fused_state_check() { return env_switch("BEAMDEC_CTC_CHECK", {"fused", "separate"}) != "separate"; }

// BEAMDEC_CTC_FILL unset or =finalize: the finalize kernel writes the -1 padding of the token block itself (one launch
// fewer per offline call and per finalize); =torch: a fill (at::full / a memset of the packed buffer) before it.
// The same outputs.
bool finalize_pads() { return env_switch("BEAMDEC_CTC_FILL", {"finalize", "torch"}) != "torch"; }

// BEAMDEC_CTC_ZERO unset or =prepass: the offline ops' state rows come from the allocator unzeroed and the first
// tile's pre-pass launch zeroes them (one launch fewer per call; the one-warp multi-winner kernel only, a memset
// elsewhere); =memset: zeroed by a fill / memset before the decode. The same outputs.
bool zero_in_prepass() { return env_switch("BEAMDEC_CTC_ZERO", {"prepass", "memset"}) != "memset"; }

// BEAMDEC_CTC_SEAL unset or =cluster: the streaming ops seal up to 16 rows on sm_90 and newer with a cluster of 8 blocks
// per row (ctc_kernels.cuh ctc_state_seal_cluster_kernel; the default since session 30: one stream -5 to -7 % per
// frame on the H100, in-process against =block); =block: one 1,024-thread block per row, the form before. The same
// checksum words.
bool cluster_seal() { return env_switch("BEAMDEC_CTC_SEAL", {"cluster", "block"}) != "block"; }

at::Tensor workspace(const at::Tensor& like, int rows, int64_t beam, int64_t V) {
  const size_t bytes = ctc::ctc_prepass_workspace_bytes(rows, (int)beam, (int)V);
  return at::empty({(int64_t)bytes}, like.options().dtype(at::kByte));
}

}  // namespace

// Launch errors are rare (bad configuration, sticky device errors); they raise RuntimeError from the op frame.
#define CTC_CUDA_OK(expr, what)                                                                            \
  do {                                                                                                     \
    const cudaError_t ctc_err_ = (expr);                                                                   \
    if (ctc_err_ != cudaSuccess) {                                                                         \
      const std::string ctc_msg_ = std::string("CTC beam search CUDA launch failed in ") + (what) + ": " + \
                                   cudaGetErrorString(ctc_err_);                                           \
      TORCH_CHECK(false, ctc_msg_);                                                                        \
    }                                                                                                      \
  } while (0)

#define CTC_CHECK_ON_CUDA(t, name) \
  CTC_ARG_CHECK((t).is_cuda(), std::string(name) + " must be a CUDA tensor for the CUDA op, got device " + (t).device().str())

#define CTC_CHECK_MASK(m, lp)                                                                                   \
  do {                                                                                                          \
    using beamdec::ctcmsg::s;                                                                                   \
    if (m) {                                                                                                    \
      CTC_CHECK_ON_CUDA(*(m), "speech_mask");                                                                   \
      CTC_ARG_CHECK((m)->dim() == 2 && (m)->size(0) == (lp).size(0) && (m)->size(1) == (lp).size(1),           \
                    "speech_mask must have shape (" + s((lp).size(0)) + ", " + s((lp).size(1)) + "), got " +    \
                        s((m)->sizes()));                                                                       \
      CTC_ARG_CHECK((m)->scalar_type() == at::kBool, "speech_mask must be a bool tensor, got " +                \
                                                         s((m)->scalar_type()));                                \
    }                                                                                                           \
  } while (0)

// Streaming state validation on the GPU. Each op runs ctc_state_check_kernel over its rows first (stamp, header
// fields, per-beam words, checksum: ctc_common.cuh) into a small (rows, 5) int32 device tensor; no state word
// is copied to the host for it. Why not validate on the host as the CPU ops do: that needs the rows' headers
// and beam words on the host before every chunk, i.e. a device->host sync per decode_chunk, which the
// streaming API promises not to do. So:
//  * decode_chunk / decode_chunk_batch: every kernel of the call skips (neither reads nor writes) a row whose
//    check failed, and the seal kernel re-seals only the rows that passed. A refused row therefore stays
//    exactly as it was, and stays refused;
//  * finalize (which synchronises anyway to return its lists) copies the (rows, 5) codes back and raises the
//    one-line ValueError of the first refused row (describe_state_error, the same text as the CPU ops).
// So a bad CUDA state is reported at finalize, not at the decode_chunk call that met it; the CPU ops raise at
// once. A caller who wants the error earlier calls finalize (the state stays usable).
namespace {
ctc::StateStamp cuda_stamp(int64_t beam_size, int64_t blank_id, int64_t vocab_size, int64_t max_seq_len,
                           int64_t page_size, int64_t num_pages) {
  return ctc::StateStamp{ctc::kBackendCuda, (int)beam_size,  (int)max_seq_len, (int)page_size,
                         page_size > 0 ? (int)num_pages : 0, (int)vocab_size, (int)blank_id};
}
at::Tensor state_errors(const at::Tensor& like, int64_t rows) {
  return at::empty({rows, (int64_t)ctc::kStateErrorWords}, like.options().dtype(at::kInt));
}
// A streaming op's device scratch in one allocation (one caching-allocator call per chunk instead of two): the
// pre-pass workspace, then at a 256-byte boundary the rows' (rows, kStateErrorWords) check codes.
struct StreamScratch {
  at::Tensor buf;
  void* workspace;
  int32_t* err;
};
StreamScratch stream_scratch(const at::Tensor& like, int rows, int64_t beam, int64_t V) {
  const size_t ws = (ctc::ctc_prepass_workspace_bytes(rows, (int)beam, (int)V) + 255) & ~(size_t)255;
  const size_t bytes = ws + (size_t)rows * ctc::kStateErrorWords * sizeof(int32_t);
  StreamScratch out{at::empty({(int64_t)bytes}, like.options().dtype(at::kByte)), nullptr, nullptr};
  out.workspace = out.buf.data_ptr();
  out.err = reinterpret_cast<int32_t*>(out.buf.data_ptr<uint8_t>() + ws);
  return out;
}
}  // namespace

// Decodes every frame of `lp` into `state`'s rows (zeroed, or with zero_rows zeroed by the launcher: offline),
// lengths (rows,) int32 on the device.
static void decode_fresh_rows(const at::Tensor& lp, const int32_t* lengths, at::Tensor& state, int64_t beam_size,
                              int64_t blank_id, double blank_skip_threshold, int64_t max_seq_len, int64_t page_size,
                              int64_t num_pages, cudaStream_t stream, bool zero_rows) {
  at::Tensor ws = workspace(lp, (int)lp.size(0), beam_size, lp.size(2));
  ctc::DecodeLaunch d = make_launch(lp, beam_size, blank_id, max_seq_len, page_size, num_pages, false);
  d.lengths = lengths;
  d.blank_skip_threshold = (float)blank_skip_threshold;
  d.state = state.data_ptr<int32_t>();
  d.state_row_words = state.size(1);
  d.workspace = ws.data_ptr();
  d.zero_rows = zero_rows ? 1 : 0;
  CTC_CUDA_OK(ctc::ctc_decode_frames(d, stream), "decode");
}

static CtcOutputs finalize_rows(const at::Tensor& state, int64_t beam, int64_t nbest, int64_t max_len,
                                int64_t page_size, int64_t num_pages) {
  const int64_t B = state.size(0);
  auto i32 = state.options().dtype(at::kInt);
  const bool pad = finalize_pads();
  at::Tensor tokens = pad ? at::empty({B, nbest, max_len}, i32) : at::full({B, nbest, max_len}, -1, i32);
  at::Tensor lens = at::empty({B, nbest}, i32);
  at::Tensor scores = at::empty({B, nbest}, state.options().dtype(at::kFloat));
  at::Tensor status = at::empty({B}, i32);
  CTC_CUDA_OK(ctc::ctc_finalize_rows(state.data_ptr<int32_t>(), state.size(1), (int)B, (int)beam, (int)max_len,
                                     (int)page_size, (int)num_pages, (int)nbest, tokens.data_ptr<int32_t>(),
                                     lens.data_ptr<int32_t>(), scores.data_ptr<float>(), status.data_ptr<int32_t>(),
                                     at::cuda::getCurrentCUDAStream(), pad),
              "finalize");
  return {tokens, lens, scores, status};
}

CtcOutputs ctc_decode_offline_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                   int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                   int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  using ctcmsg::s;
  CTC_CHECK_LOG_PROBS(log_probs, "log_probs");
  CTC_CHECK_ON_CUDA(log_probs, "log_probs");
  CTC_CHECK_ON_CUDA(lengths, "lengths");
  const int64_t B = log_probs.size(0), V = log_probs.size(2);
  CTC_CHECK_CONFIG(beam_size, blank_id, V, nbest, max_seq_len, page_size, num_pages);
  CTC_ARG_CHECK(lengths.dim() == 1 && lengths.size(0) == B,
                "lengths must have shape (B=" + s(B) + ",), got " + s(lengths.sizes()));
  CTC_ARG_CHECK(lengths.scalar_type() == at::kInt,
                "lengths must be int32 for the CUDA op, got " + s(lengths.scalar_type()));
  CTC_ARG_CHECK(!(blank_skip_threshold != blank_skip_threshold), "blank_skip_threshold must not be NaN");
  CTC_ARG_CHECK(B >= 1 && B <= 65535, "log_probs: batch must be in [1, 65535], got " + s(B));
  // lengths outside [0, T] cannot be checked without a device->host sync; the kernels clamp them to T
  // (a frame t is decoded iff t < lengths[b] and t < T) and the Python layer checks them when it can.
  c10::cuda::CUDAGuard guard(log_probs.device());
  at::Tensor lp = log_probs.stride(2) == 1 ? log_probs : log_probs.contiguous();
  const int64_t words = ctc::state_words((int)beam_size, (int)max_seq_len, (int)page_size, (int)num_pages);
  const bool zero = zero_in_prepass();
  at::Tensor state = zero ? at::empty({B, words}, lp.options().dtype(at::kInt))
                          : at::zeros({B, words}, lp.options().dtype(at::kInt));
  at::Tensor lens = lengths.contiguous();
  decode_fresh_rows(lp, lens.data_ptr<int32_t>(), state, beam_size, blank_id, blank_skip_threshold, max_seq_len,
                    page_size, num_pages, at::cuda::getCurrentCUDAStream(), zero);
  return finalize_rows(state, beam_size, nbest, max_seq_len, page_size, num_pages);
}

// The public call's op (decoders/ctc.py ctc_beam_search on CUDA): the decode of ctc_decode_offline_cuda plus its
// input checks on the device, everything in one int32 buffer (layout: ctc_ops.h) so the caller makes one
// device->host copy. Launches: the input-check kernel (lengths to int32, the value counts), the decode tiles, the
// finalize; the zeroing / -1 fill are memsets. The checks run before the decode (it reads their int32 lengths).
at::Tensor ctc_decode_offline_packed_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                          int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                          int64_t max_seq_len, int64_t page_size, int64_t num_pages,
                                          int64_t sample_frames) {
  using ctcmsg::s;
  CTC_CHECK_LOG_PROBS(log_probs, "log_probs");
  CTC_CHECK_ON_CUDA(log_probs, "log_probs");
  CTC_CHECK_ON_CUDA(lengths, "lengths");
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
  CTC_CHECK_CONFIG(beam_size, blank_id, V, nbest, max_seq_len, page_size, num_pages);
  CTC_ARG_CHECK(lengths.dim() == 1 && lengths.size(0) == B,
                "lengths must have shape (B=" + s(B) + ",), got " + s(lengths.sizes()));
  CTC_ARG_CHECK(lengths.scalar_type() == at::kInt || lengths.scalar_type() == at::kLong,
                "lengths must be int32 or int64 for the CUDA op, got " + s(lengths.scalar_type()));
  CTC_ARG_CHECK(lengths.device() == log_probs.device(),
                "lengths are on " + lengths.device().str() + " but log_probs are on " + log_probs.device().str());
  CTC_ARG_CHECK(!(blank_skip_threshold != blank_skip_threshold), "blank_skip_threshold must not be NaN");
  CTC_ARG_CHECK(B >= 1 && B <= 65535, "log_probs: batch must be in [1, 65535], got " + s(B));
  CTC_ARG_CHECK(sample_frames >= 0, "sample_frames must be >= 0, got " + s(sample_frames));
  c10::cuda::CUDAGuard guard(log_probs.device());
  at::Tensor lp = log_probs.stride(2) == 1 ? log_probs : log_probs.contiguous();
  at::Tensor lens = lengths.contiguous();
  auto stream = at::cuda::getCurrentCUDAStream();
  auto i32 = lp.options().dtype(at::kInt);
  const int64_t n_tok = B * nbest * max_seq_len, n_lb = B * nbest;
  at::Tensor packed = at::empty({packed_words(B, nbest, max_seq_len)}, i32);
  const int64_t words = ctc::state_words((int)beam_size, (int)max_seq_len, (int)page_size, (int)num_pages);
  at::Tensor state = at::empty({B, words}, i32);
  at::Tensor lens32 = at::empty({B}, i32);
  int32_t* out = packed.data_ptr<int32_t>();
  CTC_CUDA_OK(cudaMemsetAsync(out, 0, kPackedHeaderWords * sizeof(int32_t), stream), "packed (checks)");
  const bool pad = finalize_pads();
  if (!pad)
    CTC_CUDA_OK(cudaMemsetAsync(out + kPackedHeaderWords, 0xFF, n_tok * sizeof(int32_t), stream), "packed (tokens)");
  const bool zero = zero_in_prepass();
  if (!zero) CTC_CUDA_OK(cudaMemsetAsync(state.data_ptr<int32_t>(), 0, B * words * sizeof(int32_t), stream), "state");
  CTC_CUDA_OK(ctc::ctc_input_check(lp.data_ptr(), lp.scalar_type() == at::kHalf, lp.stride(0), lp.stride(1), (int)B,
                                   (int)T, (int)V, lens.data_ptr(), lens.scalar_type() == at::kLong,
                                   lens32.data_ptr<int32_t>(), (int)std::min<int64_t>(sample_frames, 1 << 30), out,
                                   stream),
              "input checks");
  decode_fresh_rows(lp, lens32.data_ptr<int32_t>(), state, beam_size, blank_id, blank_skip_threshold, max_seq_len,
                    page_size, num_pages, stream, zero);
  int32_t* tok = out + kPackedHeaderWords;
  CTC_CUDA_OK(ctc::ctc_finalize_rows(state.data_ptr<int32_t>(), words, (int)B, (int)beam_size, (int)max_seq_len,
                                     (int)page_size, (int)num_pages, (int)nbest, tok, tok + n_tok,
                                     reinterpret_cast<float*>(tok + n_tok + n_lb), tok + n_tok + 2 * n_lb, stream,
                                     pad),
              "finalize");
  return packed;
}

void ctc_decode_chunk_cuda(at::Tensor& state, const at::Tensor& log_probs,
                           const std::optional<at::Tensor>& speech_mask, int64_t beam_size, int64_t blank_id,
                           int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  using ctcmsg::s;
  CTC_CHECK_LOG_PROBS(log_probs, "log_probs");
  CTC_CHECK_ON_CUDA(log_probs, "log_probs");
  CTC_CHECK_ON_CUDA(state, "state");
  CTC_CHECK_CONFIG(beam_size, blank_id, log_probs.size(2), 1, max_seq_len, page_size, num_pages);
  CTC_CHECK_STATE(state, beam_size, max_seq_len, page_size, num_pages, "state");
  CTC_ARG_CHECK(state.size(0) == log_probs.size(0),
                "state has " + s(state.size(0)) + " rows but log_probs has batch " + s(log_probs.size(0)));
  CTC_CHECK_MASK(speech_mask, log_probs);
  if (log_probs.size(1) == 0) return;
  c10::cuda::CUDAGuard guard(log_probs.device());
  at::Tensor lp = log_probs.stride(2) == 1 ? log_probs : log_probs.contiguous();
  at::Tensor mask;
  ctc::DecodeLaunch d = make_launch(lp, beam_size, blank_id, max_seq_len, page_size, num_pages, true);
  if (speech_mask) {
    mask = speech_mask->contiguous();
    d.mask = mask.data_ptr<bool>();
    d.mask_b_stride = mask.stride(0);
  }
  const StreamScratch scratch = stream_scratch(lp, d.rows, beam_size, lp.size(2));
  auto stream = at::cuda::getCurrentCUDAStream();
  d.err = scratch.err;  // the launcher checks the rows first (ctc_launch.h)
  d.want = cuda_stamp(beam_size, blank_id, lp.size(2), max_seq_len, page_size, num_pages);
  d.fused_check = fused_state_check() ? 1 : 0;
  d.state = state.data_ptr<int32_t>();
  d.state_row_words = state.size(1);
  d.workspace = scratch.workspace;
  CTC_CUDA_OK(ctc::ctc_decode_frames(d, stream), "decode_chunk");
  CTC_CUDA_OK(ctc::ctc_seal_states(state.data_ptr<int32_t>(), state.size(1), nullptr, (int)state.size(0),
                                   scratch.err, nullptr, stream, d.pdl != 0, cluster_seal()),
              "decode_chunk (state seal)");
}

void ctc_decode_chunk_batched_cuda(at::TensorList states, const at::Tensor& log_probs,
                                   const std::optional<at::Tensor>& speech_mask, int64_t beam_size,
                                   int64_t blank_id, int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  using ctcmsg::s;
  CTC_CHECK_LOG_PROBS(log_probs, "log_probs");
  CTC_CHECK_ON_CUDA(log_probs, "log_probs");
  CTC_CHECK_CONFIG(beam_size, blank_id, log_probs.size(2), 1, max_seq_len, page_size, num_pages);
  const int64_t N = log_probs.size(0);
  CTC_ARG_CHECK((int64_t)states.size() == N, "states: got " + s((int64_t)states.size()) + " states for " + s(N) +
                                                 " log_probs rows (one row per stream)");
  for (size_t i = 0; i < states.size(); ++i) {
    CTC_CHECK_ON_CUDA(states[i], "states[i]");
    CTC_CHECK_STATE(states[i], beam_size, max_seq_len, page_size, num_pages, "states[i]");
    CTC_ARG_CHECK(states[i].size(0) == 1,
                  "states[" + s((int64_t)i) + "] must hold one row (batch 1), got " + s(states[i].size(0)));
    CTC_ARG_CHECK(states[i].device() == log_probs.device(), "states[" + s((int64_t)i) + "] is on " +
                                                                states[i].device().str() + " but log_probs is on " +
                                                                log_probs.device().str());
  }
  CTC_CHECK_MASK(speech_mask, log_probs);
  check_distinct_states(states);
  if (N == 0 || log_probs.size(1) == 0) return;
  c10::cuda::CUDAGuard guard(log_probs.device());
  at::Tensor lp = log_probs.stride(2) == 1 ? log_probs : log_probs.contiguous();
  at::Tensor mask;
  if (speech_mask) mask = speech_mask->contiguous();
  const int group = ctc::kMaxStreamsPerLaunch;
  // one workspace and one error buffer for every group: each group's kernels are ordered on the stream after its
  // own check
  const StreamScratch scratch = stream_scratch(lp, (int)std::min<int64_t>(N, group), beam_size, lp.size(2));
  std::vector<int32_t*> ptrs(group);
  auto stream = at::cuda::getCurrentCUDAStream();
  const ctc::StateStamp want = cuda_stamp(beam_size, blank_id, lp.size(2), max_seq_len, page_size, num_pages);
  const int fused = fused_state_check() ? 1 : 0;
  const bool seal = cluster_seal();
  for (int64_t g0 = 0; g0 < N; g0 += group) {  // one launch pair per tile per group of streams
    const int n = (int)std::min<int64_t>(group, N - g0);
    at::Tensor part = lp.narrow(0, g0, n);
    ctc::DecodeLaunch d = make_launch(part, beam_size, blank_id, max_seq_len, page_size, num_pages, true);
    if (speech_mask) {
      d.mask = mask.data_ptr<bool>() + g0 * mask.stride(0);
      d.mask_b_stride = mask.stride(0);
    }
    for (int i = 0; i < n; ++i) ptrs[i] = states[g0 + i].data_ptr<int32_t>();
    const int64_t words = states[g0].size(1);
    d.err = scratch.err;  // the launcher checks the rows first (ctc_launch.h)
    d.want = want;
    d.fused_check = fused;
    d.state_row_words = words;  // the row width the checks sum over (the rows themselves come from ptrs)
    d.stream_states = ptrs.data();
    d.workspace = scratch.workspace;
    CTC_CUDA_OK(ctc::ctc_decode_frames(d, stream), "decode_chunk_batched");
    CTC_CUDA_OK(ctc::ctc_seal_states(nullptr, words, ptrs.data(), n, scratch.err, nullptr, stream, d.pdl != 0, seal),
                "decode_chunk_batched (state seal)");
  }
}

CtcOutputs ctc_finalize_cuda(const at::Tensor& state, int64_t beam_size, int64_t blank_id, int64_t vocab_size,
                             int64_t nbest, int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  CTC_CHECK_ON_CUDA(state, "state");
  CTC_CHECK_CONFIG(beam_size, blank_id, vocab_size, nbest, max_seq_len, page_size, num_pages);
  CTC_CHECK_STATE(state, beam_size, max_seq_len, page_size, num_pages, "state");
  c10::cuda::CUDAGuard guard(state.device());
  const int64_t B = state.size(0);
  if (B > 0) {
    at::Tensor err = state_errors(state, B);
    CTC_CUDA_OK(ctc::ctc_check_states(state.data_ptr<int32_t>(), state.size(1), nullptr, (int)B,
                                      cuda_stamp(beam_size, blank_id, vocab_size, max_seq_len, page_size, num_pages),
                                      err.data_ptr<int32_t>(), at::cuda::getCurrentCUDAStream()),
                "finalize (state check)");
    // (B, 5) int32 back to the host: the one sync of this op before its results (see the comment at the top)
    const at::Tensor host = err.cpu();
    const int32_t* e = host.data_ptr<int32_t>();
    for (int64_t r = 0; r < B; ++r) {
      const int32_t* x = e + r * ctc::kStateErrorWords;
      CTC_ARG_CHECK(x[0] == ctc::kStateOk, describe_state_error(ctc::StateError{x[0], x[1], x[2], x[3], x[4]}, r,
                                                                "state"));
    }
  }
  return finalize_rows(state, beam_size, nbest, max_seq_len, page_size, num_pages);
}

void ctc_init_state_cuda(at::Tensor& state, int64_t beam_size, int64_t blank_id, int64_t vocab_size,
                         int64_t max_seq_len, int64_t page_size, int64_t num_pages) {
  CTC_CHECK_ON_CUDA(state, "state");
  CTC_CHECK_CONFIG(beam_size, blank_id, vocab_size, 1, max_seq_len, page_size, num_pages);
  CTC_CHECK_STATE(state, beam_size, max_seq_len, page_size, num_pages, "state");
  c10::cuda::CUDAGuard guard(state.device());
  state.zero_();
  const ctc::StateStamp st = cuda_stamp(beam_size, blank_id, vocab_size, max_seq_len, page_size, num_pages);
  CTC_CUDA_OK(ctc::ctc_seal_states(state.data_ptr<int32_t>(), state.size(1), nullptr, (int)state.size(0), nullptr,
                                   &st, at::cuda::getCurrentCUDAStream()),
              "init_state");
}

// Error-path diagnostics: the same variants as ctc_debug_raise_cpu, plus one thrown while a CUDAGuard is alive.
void ctc_debug_raise_cuda(const at::Tensor& x, int64_t mode) {
  if (mode == 0) TORCH_CHECK_VALUE(false, "debug_raise: op frame, string message");
  if (mode == 1) TORCH_CHECK_VALUE(false, "debug_raise: op frame, integer message ", mode);
  if (mode == 4) CTC_ARG_CHECK(false, "debug_raise: op frame, preformatted message " + std::to_string(mode));
  if (mode == 6) {
    c10::cuda::CUDAGuard guard(x.device());
    TORCH_CHECK_VALUE(false, "debug_raise: op frame under a CUDAGuard, integer message ", mode);
  }
  ctc_debug_throw_from_helper(mode);
}

}  // namespace beamdec
