// Declarations of the CTC prefix beam search ops (CPU reference and CUDA). Owned by the CTC decoder.
//
// Ops (schemas in bindings.cpp):
//   ctc_decode_offline(log_probs (B,T,V), lengths (B,), beam, blank, threshold, nbest, max_len, page_size, num_pages)
//       -> tokens (B,nbest,max_len) int32, token_lengths (B,nbest) int32, scores (B,nbest) f32, status (B,) int32
//   ctc_decode_chunk(state! (B,W) int32, log_probs (B,T,V), speech_mask? (B,T) bool, beam, blank, max_len, page_size,
//                    num_pages)
//   ctc_decode_chunk_batched(states! [N x (1,W)], log_probs (N,T,V), speech_mask? (N,T), beam, blank, max_len, ...)
//   ctc_finalize(state (B,W), beam, blank, vocab, nbest, max_len, page_size, num_pages) -> the four tensors of
//                ctc_decode_offline
//   ctc_init_state(state! (B,W), beam, blank, vocab, max_len, page_size, num_pages): zero, stamp and seal rows
// Every op that takes a state checks each row's stamp, header fields, per-beam words and checksum
// (ctc_common.cuh: validate_state_fields) before reading it, and re-seals the rows it wrote.
//   ctc_decode_offline_packed(the arguments of ctc_decode_offline, sample_frames) -> one int32 tensor on the input's
//       device: [checks (kPackedHeaderWords) | tokens | token_lengths | scores (float bits) | status], the four
//       outputs of ctc_decode_offline flattened. checks = [lengths outside [0, T], then the value counts of
//       decoders/ctc.py log_prob_value_stats over the first sample_frames frames: sampled, probability-like, argmax
//       V-1, argmax 0, 0, 0, 0]. Never refuses a length or a value (lengths are clamped to [0, T] and flagged;
//       the caller judges the checks): the public call's one device->host copy (decoders/ctc.py).
//   ctc_debug_raise(x, mode): raises a ValueError from the backend of x (error-path diagnostics, tests only)
// page_size 0: flat token storage; > 0: paged (num_pages physical pages per row; layout in ctc_common.cuh).
// status bit 0: the log-probs held NaN or +inf (the Python layer raises; kernels cannot);
// status bit 1: some hypothesis reached max_seq_len; bit 2: the page pool ran out (paged).
//
// Argument errors. Every check is a macro that throws from the op's own frame, with the message built from
// strings only: integers are pre-formatted by std::to_string, never streamed. Why: on the H200 host
// (torch 2.11+cu130, extension built there by its g++) any TORCH_CHECK whose message streamed an integer
// through c10::str (an std::ostringstream in extension code) killed the process with SIGSEGV and no Python
// traceback -- on CPU and CUDA dispatch alike, from the op frame or a helper in another translation unit,
// with or without a live CUDAGuard -- while every string-only message raised a clean ValueError. The op
// `ctc_debug_raise` runs those variants one per subprocess (tests/test_ctc_gpu.py::
// test_gpu_error_path_matrix). The lower-level cause (most likely the libstdc++ the image's Python process
// loads not matching the headers the extension's integer ostream/num_put code was compiled against) was not
// isolated further; string-only messages avoid it everywhere. Earlier "helper in ctc_cpu.cpp" theories were
// wrong: those helpers simply were the checks whose messages contained integers.
#pragma once
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common_check.h"
#include "ctc_common.cuh"

namespace beamdec {

using CtcOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
constexpr int64_t kPackedHeaderWords = 8;  // ctc_decode_offline_packed: the checks words before the outputs
inline int64_t packed_words(int64_t B, int64_t nbest, int64_t max_len) {
  return kPackedHeaderWords + B * nbest * max_len + 2 * B * nbest + B;
}

// CPU reference (ctc_cpu.cpp)
CtcOutputs ctc_decode_offline_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                  int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                  int64_t max_seq_len, int64_t page_size, int64_t num_pages);
void ctc_decode_chunk_cpu(at::Tensor& state, const at::Tensor& log_probs,
                          const std::optional<at::Tensor>& speech_mask, int64_t beam_size, int64_t blank_id,
                          int64_t max_seq_len, int64_t page_size, int64_t num_pages);
void ctc_decode_chunk_batched_cpu(at::TensorList states, const at::Tensor& log_probs,
                                  const std::optional<at::Tensor>& speech_mask, int64_t beam_size,
                                  int64_t blank_id, int64_t max_seq_len, int64_t page_size, int64_t num_pages);
CtcOutputs ctc_finalize_cpu(const at::Tensor& state, int64_t beam_size, int64_t blank_id, int64_t vocab_size,
                            int64_t nbest, int64_t max_seq_len, int64_t page_size, int64_t num_pages);
at::Tensor ctc_decode_offline_packed_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                         int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                         int64_t max_seq_len, int64_t page_size, int64_t num_pages,
                                         int64_t sample_frames);
void ctc_debug_raise_cpu(const at::Tensor& x, int64_t mode);
// defined in ctc_cpu.cpp, never inlined: the "helper in another translation unit" variant of ctc_debug_raise
void ctc_debug_throw_from_helper(int64_t mode);

// CUDA (ctc_cuda.cpp)
CtcOutputs ctc_decode_offline_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                   int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                   int64_t max_seq_len, int64_t page_size, int64_t num_pages);
void ctc_decode_chunk_cuda(at::Tensor& state, const at::Tensor& log_probs,
                           const std::optional<at::Tensor>& speech_mask, int64_t beam_size, int64_t blank_id,
                           int64_t max_seq_len, int64_t page_size, int64_t num_pages);
void ctc_decode_chunk_batched_cuda(at::TensorList states, const at::Tensor& log_probs,
                                   const std::optional<at::Tensor>& speech_mask, int64_t beam_size,
                                   int64_t blank_id, int64_t max_seq_len, int64_t page_size, int64_t num_pages);
CtcOutputs ctc_finalize_cuda(const at::Tensor& state, int64_t beam_size, int64_t blank_id, int64_t vocab_size,
                             int64_t nbest, int64_t max_seq_len, int64_t page_size, int64_t num_pages);
at::Tensor ctc_decode_offline_packed_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, int64_t beam_size,
                                          int64_t blank_id, double blank_skip_threshold, int64_t nbest,
                                          int64_t max_seq_len, int64_t page_size, int64_t num_pages,
                                          int64_t sample_frames);
void ctc_debug_raise_cuda(const at::Tensor& x, int64_t mode);

namespace ctcmsg = msg;  // string-only message formatting (common_check.h)

// ctc_init_state: stamps (config, vocabulary, backend) and seals fresh state rows (zeroing them first).
void ctc_init_state_cpu(at::Tensor& state, int64_t beam_size, int64_t blank_id, int64_t vocab_size,
                        int64_t max_seq_len, int64_t page_size, int64_t num_pages);
void ctc_init_state_cuda(at::Tensor& state, int64_t beam_size, int64_t blank_id, int64_t vocab_size,
                         int64_t max_seq_len, int64_t page_size, int64_t num_pages);

inline std::string ctc_hex(int32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, v = (int32_t)((uint32_t)v >> 4)) out[i] = digits[v & 15];
  return out;
}

// One line naming the refused row, the field, the value found and what was expected (ctc::StateError).
inline std::string describe_state_error(const ctc::StateError& e, int64_t row, const std::string& name) {
  using msg::s;
  const std::string where = name + " row " + s(row) + ": ";
  const std::string beam_idx = e.index >= 0 ? "[" + s(e.index) + "]" : "";
  auto stamp = [&](const std::string& field) {
    return where + "the state was made for " + field + "=" + s(e.found) + " but this decoder has " + s(e.lo) +
           " (a state from another decoder config or vocabulary; create it with this decoder's create_state)";
  };
  auto range = [&](const std::string& field) {
    return where + field + beam_idx + " is " + s(e.found) + ", expected in [" + s(e.lo) + ", " + s(e.hi) +
           "] (corrupted or modified state)";
  };
  switch (e.code) {
    case ctc::kErrMagic:
      return where + "magic word is 0x" + ctc_hex(e.found) + ", expected 0x" + ctc_hex(e.lo) +
             " (not a CTC streaming state made by CtcStreamingDecoder.create_state)";
    case ctc::kErrVersion:
      return where + "layout version " + s(e.found) + " is not this build's " + s(e.lo) + " (recreate the state)";
    case ctc::kErrBackend:
      return where + "the state was made by the " + (e.found == ctc::kBackendCuda ? "CUDA" : e.found == ctc::kBackendCpu ? "CPU" : "unknown (" + s(e.found) + ")") +
             " decoder but is read by the " + (e.lo == ctc::kBackendCuda ? "CUDA" : "CPU") +
             " one (states are not portable between devices)";
    case ctc::kErrBeam: return stamp("beam_size");
    case ctc::kErrMaxLen: return stamp("max_seq_len");
    case ctc::kErrPageSize: return stamp("page_size");
    case ctc::kErrNumPages: return stamp("num_pages");
    case ctc::kErrVocab:
      return e.lo == e.hi ? stamp("vocab_size (V)") : range("vocab_size (header word 12)");
    case ctc::kErrBlank: return stamp("blank_id");
    case ctc::kErrStep: return range("header word 0 (decoded frames)");
    case ctc::kErrLastSel: return range("header word 1 (last decoded frame)");
    case ctc::kErrFramesSeen: return range("header word 2 (frames seen)");
    case ctc::kErrActive: return range("header word 3 (active beams)");
    case ctc::kErrStatus: return range("header word 4 (status bits)");
    case ctc::kErrFreeTop: return range("header word 5 (free-page stack top)");
    case ctc::kErrNextFresh: return range("header word 6 (next fresh page)");
    case ctc::kErrLen: return range("prefix length len");
    case ctc::kErrLast: return range("last token last");
    case ctc::kErrSlot: return range("token slot / last page slot");
    case ctc::kErrChecksum:
      return where + "checksum mismatch (stored low word 0x" + ctc_hex(e.found) + ", content gives 0x" +
             ctc_hex(e.lo) + "): the state was modified outside the decoder";
    default:
      return where + "refused (error code " + s(e.code) + ")";
  }
}

}  // namespace beamdec

// One argument check: throws c10::ValueError (Python ValueError) from the calling frame; `msg` is only
// evaluated when the check fails and must be a std::string / const char* expression.
#define CTC_ARG_CHECK(cond, msg) BEAMDEC_CHECK_VALUE(cond, msg)

#define CTC_CHECK_CONFIG(beam_size, blank_id, vocab_size, nbest, max_seq_len, page_size, num_pages)                 \
  do {                                                                                                              \
    using beamdec::ctcmsg::s;                                                                                       \
    CTC_ARG_CHECK((beam_size) >= 1 && (beam_size) <= beamdec::ctc::kMaxBeam,                                        \
                  "beam_size must be in [1, " + s(beamdec::ctc::kMaxBeam) + "], got " + s(beam_size));              \
    CTC_ARG_CHECK((vocab_size) >= 2,                                                                                \
                  "log_probs: vocabulary size V (last dim) must be >= 2 (blank + one token), got " + s(vocab_size)); \
    CTC_ARG_CHECK((vocab_size) <= beamdec::ctc::kMaxVocab,                                                          \
                  "log_probs: vocabulary size V (last dim) must be <= " + s(beamdec::ctc::kMaxVocab) +              \
                      " (token ids are stored in 16 bits), got " + s(vocab_size));                                \
    CTC_ARG_CHECK((blank_id) >= 0 && (blank_id) < (vocab_size),                                                     \
                  "blank_id must be in [0, V=" + s(vocab_size) + "), got " + s(blank_id));                          \
    CTC_ARG_CHECK((nbest) >= 1 && (nbest) <= (beam_size),                                                           \
                  "nbest must be in [1, beam_size=" + s(beam_size) + "], got " + s(nbest));                         \
    CTC_ARG_CHECK((max_seq_len) >= 1 && (max_seq_len) <= (1 << 24),                                                 \
                  "max_seq_len must be in [1, 2^24], got " + s(max_seq_len));                                       \
    CTC_ARG_CHECK((page_size) >= 0 && (page_size) <= 4096, "page_size must be 0 (flat) or in [1, 4096], got " +    \
                                                              s(page_size));                                        \
    CTC_ARG_CHECK((page_size) == 0 || ((num_pages) >= 1 && (num_pages) <= (1 << 26)),                               \
                  "num_pages must be in [1, 2^26] with paged storage, got " + s(num_pages));                        \
    CTC_ARG_CHECK(beamdec::ctc::state_words((int)(beam_size), (int)(max_seq_len), (int)(page_size),                 \
                                            (int)(num_pages)) < (int64_t(1) << 31),                                  \
                  "state too large: beam_size * max_seq_len (or the page pool) must stay below 2^31 words");       \
  } while (0)

#define CTC_CHECK_LOG_PROBS(log_probs, name)                                                                        \
  do {                                                                                                              \
    using beamdec::ctcmsg::s;                                                                                       \
    CTC_ARG_CHECK((log_probs).dim() == 3,                                                                           \
                  std::string(name) + " must be 3-D (B, T, V), got shape " + s((log_probs).sizes()));               \
    CTC_ARG_CHECK((log_probs).scalar_type() == at::kFloat || (log_probs).scalar_type() == at::kHalf,                \
                  std::string(name) + " must be float32 or float16, got " + s((log_probs).scalar_type()));          \
  } while (0)

#define CTC_CHECK_STATE(state, beam_size, max_seq_len, page_size, num_pages, name)                                  \
  do {                                                                                                              \
    using beamdec::ctcmsg::s;                                                                                       \
    CTC_ARG_CHECK((state).dim() == 2 && (state).scalar_type() == at::kInt,                                          \
                  std::string(name) + " must be a 2-D int32 tensor (rows, words) made by "                          \
                                      "CtcStreamingDecoder.create_state, got " +                                    \
                      s((state).scalar_type()) + " " + s((state).sizes()));                                         \
    CTC_ARG_CHECK((state).is_contiguous(), std::string(name) + " must be contiguous");                              \
    const int64_t ctc_words_ = beamdec::ctc::state_words((int)(beam_size), (int)(max_seq_len), (int)(page_size),    \
                                                         (int)(num_pages));                                         \
    CTC_ARG_CHECK((state).size(1) == ctc_words_,                                                                    \
                  std::string(name) + " has " + s((state).size(1)) + " words per row but beam_size=" +              \
                      s(beam_size) + ", max_seq_len=" + s(max_seq_len) + ", page_size=" + s(page_size) +            \
                      ", num_pages=" + s(num_pages) + " need " + s(ctc_words_) +                                    \
                      " (was it created with another config?)");                                                   \
  } while (0)

namespace beamdec {

// The streams of one batched call must be distinct memory: two entries sharing words would be decoded as
// two streams into the same state (a lost or interleaved update). Tensors may be views; compare byte ranges.
inline void check_distinct_states(at::TensorList states) {
  std::vector<std::pair<uintptr_t, size_t>> spans;
  for (size_t i = 0; i < states.size(); ++i)
    spans.push_back({reinterpret_cast<uintptr_t>(states[i].data_ptr()), i});
  std::sort(spans.begin(), spans.end());
  for (size_t k = 1; k < spans.size(); ++k) {
    const at::Tensor& prev = states[spans[k - 1].second];
    const uintptr_t prev_end = spans[k - 1].first + (uintptr_t)prev.numel() * 4;
    CTC_ARG_CHECK(spans[k].first >= prev_end,
                  "states: entries " + std::to_string(std::min(spans[k - 1].second, spans[k].second)) + " and " +
                      std::to_string(std::max(spans[k - 1].second, spans[k].second)) +
                      " are the same state (or overlap); each stream needs its own state");
  }
}

}  // namespace beamdec
