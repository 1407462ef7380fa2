// Torch-free launchers for the CTC prefix beam search kernels (decoders/include/ctc_kernels.cuh).
#include <cmath>
#include <cstdlib>
#include <utility>

#include "ctc_kernels.cuh"
#include "ctc_launch.h"
#include "launch_ex.cuh"

namespace beamdec {
namespace ctc {

namespace {
size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

// One launch, plain or overlapped (include/launch_ex.cuh).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(bool pdl, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, void (*kernel)(Params...),
                          Args&&... args) {
  return launch_kernel_ex(pdl, 0, grid, block, smem, stream, kernel, std::forward<Args>(args)...);
}

template <int NT, typename T>
cudaError_t launch_decode(const FrameArgs<T>& fa, int t0, int tile_len, int advance, cudaStream_t stream) {
  const size_t smem = (size_t)fa.beam * (fa.C + 1) * sizeof(uint32_t);
  auto kernel = ctc_decode_tile_kernel<NT, T>;
  // once per instantiation (and device): allow the largest candidate table any beam of this width needs
  static int configured_device = -1;
  int device = 0;
  cudaGetDevice(&device);
  if (configured_device != device) {
    const int most = (NT == 512 ? kMaxBeam : NT == 256 ? 32 : 16);
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           most * (2 * most + 2) * (int)sizeof(uint32_t));
    if (err != cudaSuccess) return err;
    configured_device = device;
  }
  kernel<<<fa.rows, NT, smem, stream>>>(fa, t0, tile_len, advance);
  return cudaGetLastError();
}

template <typename T>
cudaError_t decode_frames(const DecodeLaunch& d, cudaStream_t stream) {
  FrameArgs<T> fa;
  fa.log_probs = static_cast<const T*>(d.log_probs);
  fa.b_stride = d.b_stride;
  fa.t_stride = d.t_stride;
  fa.rows = d.rows;
  fa.n_frames = d.T;
  fa.V = d.V;
  fa.blank = d.blank;
  fa.beam = d.beam;
  fa.C = candidate_count(d.beam, d.V);
  fa.max_len = d.max_len;
  fa.page_size = d.page_size;
  fa.paged_smem = d.paged_smem && d.page_size > 0 && d.num_pages <= kPagedSmemMaxPages ? 1 : 0;
  fa.num_pages = d.num_pages;
  fa.lengths = d.lengths;
  fa.mask = d.mask;
  fa.mask_b_stride = d.mask_b_stride;
  fa.log_threshold = d.blank_skip_threshold >= 1.0f ? INFINITY : logf(d.blank_skip_threshold);
  char* ws = static_cast<char*>(d.workspace);
  const size_t cap = (size_t)kTile * d.rows * fa.C;
  fa.pre_ids = reinterpret_cast<int32_t*>(ws);
  fa.pre_lp = reinterpret_cast<float*>(ws + align_up(cap * 4));
  fa.pre_cnt = reinterpret_cast<int32_t*>(ws + 2 * align_up(cap * 4));
  {
    char* check = ws + 2 * align_up(cap * 4) + align_up((size_t)kTile * d.rows * 4);
    fa.check_sums = reinterpret_cast<unsigned long long*>(check);
    fa.check_fields = reinterpret_cast<int32_t*>(check + align_up((size_t)d.rows * kCheckParts * 8));
  }
  fa.row_err = d.err;
  fa.fused_check = 0;
  fa.zero_rows = 0;
  fa.pdl = d.pdl ? 1 : 0;  // the kernels' wait runs only in overlapped launches
  fa.err_out = nullptr;
  fa.want = d.want;
  fa.states.base = d.state;
  fa.states.row_words = d.state_row_words;
  fa.states.n_ptrs = 0;
  if (d.stream_states) {
    if (d.rows > kMaxStreamsPerLaunch) return cudaErrorInvalidValue;
    fa.states.n_ptrs = d.rows;
    for (int i = 0; i < d.rows; ++i) fa.states.ptrs[i] = d.stream_states[i];
  }
  const bool cached = d.V <= kPrepassCacheMaxV;
  const size_t prepass_smem = cached ? (size_t)d.V * sizeof(uint32_t) : 0;
  cudaError_t err = cudaSuccess;
  static int configured_device = -1;
  int device = 0;
  cudaGetDevice(&device);
  if (configured_device != device) {
    err = cudaFuncSetAttribute(ctc_prepass_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kPrepassCacheMaxV * (int)sizeof(uint32_t));
    if (err != cudaSuccess) return err;
    err = cudaFuncSetAttribute(ctc_prepass_kernel<T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kPrepassCacheMaxV * (int)sizeof(uint32_t));
    if (err != cudaSuccess) return err;
    err = cudaFuncSetAttribute(ctc_prepass_kernel<T, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kPrepassCacheMaxV * (int)sizeof(uint32_t));
    if (err != cudaSuccess) return err;
    err = cudaFuncSetAttribute(ctc_prepass_kernel<T, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kPrepassCacheMaxV * (int)sizeof(uint32_t));
    if (err != cudaSuccess) return err;
    configured_device = device;
  }
  const bool warp = d.beam <= 32 && (d.kernel == 2 || (d.kernel == 0 && d.rows <= kWarpKernelMaxRows));
  // the state-free pre-pass (the fused check, the zeroing pre-pass) rides on the one-warp kernel's multi-winner form;
  // any other kernel gets the separate check / a memset
  const bool state_free = warp && !fa.paged_smem && d.rounds_select == 2;
  if (d.zero_rows && (d.stream_states || d.err)) return cudaErrorInvalidValue;  // offline rows only
  const bool zero = d.zero_rows && state_free && d.T > 0;
  if (d.zero_rows && !zero &&
      (err = cudaMemsetAsync(d.state, 0, (size_t)d.rows * d.state_row_words * sizeof(int32_t), stream)) != cudaSuccess)
    return err;
  // streaming rows are checked first: in the first tile's launches when fused, else by the check kernel (so `err`
  // holds every row's verdict after the call, T == 0 included)
  const bool fused = d.err && d.fused_check && state_free && d.T > 0;
  if (fused) {
    fa.err_out = d.err;  // the first tile's decode writes the verdicts
  } else if (d.err && (err = ctc_check_states(d.state, d.state_row_words, d.stream_states, d.rows, d.want, d.err,
                                              stream)) != cudaSuccess) {
    return err;
  }
  const bool pdl = fa.pdl != 0;
  if (d.T == 0) {  // nothing to decode; frame counters stay (T == 0 advances nothing)
    return cudaSuccess;
  }
  for (int t0 = 0; t0 < d.T; t0 += kTile) {
    const int tile_len = d.T - t0 < kTile ? d.T - t0 : kTile;
    const int advance = t0 + tile_len >= d.T ? d.T : 0;
    fa.fused_check = fused && t0 == 0 ? 1 : 0;  // the first tile carries the check; later ones read its verdict
    fa.zero_rows = zero && t0 == 0 ? 1 : 0;
    if (fused || zero) {
      const dim3 grid(tile_len + (fa.fused_check ? kCheckParts : 0) + fa.zero_rows, d.rows);
      err = d.prepass_warp_tau ? launch_kernel(pdl, grid, kPrepassThreads, prepass_smem, stream,
                                               ctc_prepass_kernel<T, true, true>, fa, t0)
                               : launch_kernel(pdl, grid, kPrepassThreads, prepass_smem, stream,
                                               ctc_prepass_kernel<T, false, true>, fa, t0);
    } else if (d.prepass_warp_tau) {
      err = launch_kernel(pdl, dim3(tile_len, d.rows), kPrepassThreads, prepass_smem, stream,
                          ctc_prepass_kernel<T, true>, fa, t0);
    } else {
      err = launch_kernel(pdl, dim3(tile_len, d.rows), kPrepassThreads, prepass_smem, stream, ctc_prepass_kernel<T>,
                          fa, t0);
    }
    if (err != cudaSuccess) return err;
    cudaError_t err2;
    if (fused || zero) {
      err2 = launch_kernel(pdl, d.rows, 32, 0, stream, ctc_decode_warp_kernel<T, false, true, true, true>, fa, t0,
                           tile_len, advance);
    } else if (warp) {  // one warp per row
      const size_t meta = fa.paged_smem ? (size_t)3 * d.num_pages * sizeof(int32_t) : 0;
      if (fa.paged_smem) {  // opt-in experiment: its own instantiation
        // meta can reach 48 KiB; with the kernel's static shared memory that exceeds the default dynamic
        // limit ("invalid argument" at launch, seen on the H200), so opt in to the larger carve-out.
        if (meta > 0 && (err2 = cudaFuncSetAttribute(ctc_decode_warp_kernel<T, true>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)meta)) !=
                            cudaSuccess)
          return err2;
        err2 = launch_kernel(pdl, d.rows, 32, meta, stream, ctc_decode_warp_kernel<T, true>, fa, t0, tile_len, advance);
      } else if (d.rounds_select == 2) {
        err2 = launch_kernel(pdl, d.rows, 32, 0, stream, ctc_decode_warp_kernel<T, false, true, true>, fa, t0,
                             tile_len, advance);
      } else if (d.rounds_select) {
        err2 = launch_kernel(pdl, d.rows, 32, 0, stream, ctc_decode_warp_kernel<T, false, true>, fa, t0, tile_len,
                             advance);
      } else {
        err2 = launch_kernel(pdl, d.rows, 32, 0, stream, ctc_decode_warp_kernel<T, false>, fa, t0, tile_len, advance);
      }
    } else {  // block width: the candidate list (C <= 2*beam+1) must fit one element per thread
      err2 = d.beam <= 16   ? launch_decode<128, T>(fa, t0, tile_len, advance, stream)
             : d.beam <= 32 ? launch_decode<256, T>(fa, t0, tile_len, advance, stream)
                            : launch_decode<512, T>(fa, t0, tile_len, advance, stream);
    }
    if (err2 != cudaSuccess) return err2;
  }
  return cudaSuccess;
}
}  // namespace

size_t ctc_prepass_workspace_bytes(int rows, int beam, int vocab) {
  const size_t cap = (size_t)kTile * rows * candidate_count(beam, vocab);
  // the pre-pass lists and counts, then the fused state check's parts and field verdicts
  return 2 * align_up(cap * 4) + align_up((size_t)kTile * rows * 4) + align_up((size_t)rows * kCheckParts * 8) +
         align_up((size_t)rows * kStateErrorWords * 4);
}

cudaError_t ctc_decode_frames(const DecodeLaunch& args, cudaStream_t stream) {
  if (args.beam < 1 || args.beam > kMaxBeam || args.V < 2 || args.rows < 1) return cudaErrorInvalidValue;
  return args.half ? decode_frames<__half>(args, stream) : decode_frames<float>(args, stream);
}

cudaError_t ctc_finalize_rows(int32_t* state, int64_t state_row_words, int rows, int beam, int max_len, int page_size,
                              int num_pages, int nbest, int32_t* out_tokens, int32_t* out_len, float* out_scores,
                              int32_t* out_status, cudaStream_t stream, bool pad) {
  if (rows < 1) return cudaSuccess;
  StateRefs refs;
  refs.base = state;
  refs.row_words = state_row_words;
  refs.n_ptrs = 0;
  ctc_finalize_kernel<<<rows, kFinalizeThreads, 0, stream>>>(refs, beam, max_len, page_size, num_pages, nbest,
                                                              out_tokens, out_len, out_scores, out_status, pad ? 1 : 0);
  return cudaGetLastError();
}

namespace {
template <typename T, typename L>
void launch_input_check(dim3 grid, const void* log_probs, int64_t b_stride, int64_t t_stride, int T_, int V,
                        const void* lengths, int32_t* lengths_out, int sample_frames, int32_t* checks,
                        cudaStream_t stream) {
  ctc_input_check_kernel<T, L><<<grid, kInputCheckThreads, 0, stream>>>(
      static_cast<const T*>(log_probs), b_stride, t_stride, T_, V, static_cast<const L*>(lengths), lengths_out,
      sample_frames, checks);
}
}  // namespace

cudaError_t ctc_input_check(const void* log_probs, bool half, int64_t b_stride, int64_t t_stride, int rows, int T, int V,
                            const void* lengths, bool lengths64, int32_t* lengths_out, int sample_frames,
                            int32_t* checks, cudaStream_t stream) {
  if (rows < 1) return cudaSuccess;
  const int t = T < sample_frames ? T : sample_frames;
  const dim3 grid(rows, t > 0 ? (t + kInputCheckFramesPerBlock - 1) / kInputCheckFramesPerBlock : 1);
  auto launch = half ? (lengths64 ? launch_input_check<__half, int64_t> : launch_input_check<__half, int32_t>)
                     : (lengths64 ? launch_input_check<float, int64_t> : launch_input_check<float, int32_t>);
  launch(grid, log_probs, b_stride, t_stride, T, V, lengths, lengths_out, sample_frames, checks, stream);
  return cudaGetLastError();
}

namespace {
// BEAMDEC_CTC_CHECK_THREADS=256: the state check / seal kernels 256 threads wide, one checksum term at a time;
// unset or 1024: 1024 threads (kStateCheckThreads; ctc_kernels.cuh says why that is the default). Same checksums.
bool narrow_state_check() {
  const char* e = std::getenv("BEAMDEC_CTC_CHECK_THREADS");
  return e && e[0] == '2' && e[1] == '5' && e[2] == '6' && e[3] == '\0';
}

bool make_refs(StateRefs& refs, int32_t* state, int64_t row_words, int32_t* const* stream_states, int rows) {
  refs.base = state;
  refs.row_words = row_words;
  refs.n_ptrs = 0;
  if (stream_states) {
    if (rows > kMaxStreamsPerLaunch) return false;
    refs.n_ptrs = rows;
    for (int i = 0; i < rows; ++i) refs.ptrs[i] = stream_states[i];
  }
  return true;
}
}  // namespace

cudaError_t ctc_check_states(int32_t* state, int64_t state_row_words, int32_t* const* stream_states, int rows,
                             const StateStamp& want, int32_t* err, cudaStream_t stream) {
  if (rows < 1) return cudaSuccess;
  StateRefs refs;
  if (!make_refs(refs, state, state_row_words, stream_states, rows)) return cudaErrorInvalidValue;
  if (narrow_state_check())
    ctc_state_check_kernel<256><<<rows, 256, 0, stream>>>(refs, state_row_words, want, err);
  else
    ctc_state_check_kernel<kStateCheckThreads><<<rows, kStateCheckThreads, 0, stream>>>(refs, state_row_words, want, err);
  return cudaGetLastError();
}

cudaError_t ctc_seal_states(int32_t* state, int64_t state_row_words, int32_t* const* stream_states, int rows,
                            const int32_t* err, const StateStamp* stamp, cudaStream_t stream, bool pdl, bool cluster) {
  if (rows < 1) return cudaSuccess;
  StateRefs refs;
  if (!make_refs(refs, state, state_row_words, stream_states, rows)) return cudaErrorInvalidValue;
  const int do_stamp = stamp ? 1 : 0;
  const StateStamp st = stamp ? *stamp : StateStamp{};
  if (narrow_state_check())
    return launch_kernel(pdl, rows, 256, 0, stream, ctc_state_seal_kernel<256>, refs, state_row_words, err, do_stamp,
                         st, pdl ? 1 : 0);
  if (cluster && !do_stamp && rows <= kClusterSealMaxRows) {
    bool clusters = false;
    if (const cudaError_t e = current_device_has_clusters(clusters); e != cudaSuccess) return e;
    if (clusters)
      return launch_kernel_ex(pdl, kSealParts, rows * kSealParts, kSealClusterThreads, 0, stream,
                              ctc_state_seal_cluster_kernel, refs, state_row_words, err, pdl ? 1 : 0);
  }
  return launch_kernel(pdl, rows, kStateCheckThreads, 0, stream, ctc_state_seal_kernel<kStateCheckThreads>, refs,
                       state_row_words, err, do_stamp, st, pdl ? 1 : 0);
}

}  // namespace ctc
}  // namespace beamdec
