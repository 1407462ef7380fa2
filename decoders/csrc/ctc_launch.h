// Torch-free launchers of the CTC prefix beam search kernels (ctc_launch.cu). Raw pointers, sizes,
// strides and a cudaStream_t; no allocation, no synchronisation. The caller provides the pre-pass
// workspace (ctc_prepass_workspace_bytes) and the state rows (layout: decoders/include/ctc_common.cuh).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ctc_common.cuh"

namespace beamdec {
namespace ctc {

struct DecodeLaunch {
  const void* log_probs;  // (rows, T, V), V contiguous
  bool half;              // float16 (else float32)
  int64_t b_stride, t_stride;
  int rows, T, V, blank, beam, max_len;
  const int32_t* lengths;  // (rows,) or null: all T frames (streaming)
  const bool* mask;        // (rows, T) or null
  int64_t mask_b_stride;
  float blank_skip_threshold;  // >= 1: no skipping (streaming passes 1)
  // state rows: either `state` with `state_row_words` per row, or `stream_states[rows]` (<= 256 rows)
  int32_t* state;
  int64_t state_row_words;
  int32_t* const* stream_states;
  void* workspace;  // ctc_prepass_workspace_bytes(rows, beam, V)
  int page_size = 0;  // paged token storage (0: flat); layout in ctc_common.cuh
  int num_pages = 0;
  // 0 (auto): one warp per row for beam <= 32 and rows <= kWarpKernelMaxRows, else the block kernel;
  // 1: the block kernel for every beam; 2: the one-warp kernel whenever beam <= 32
  int kernel = 0;
  // 1: the one-warp kernel keeps a paged row's page metadata (3 x num_pages words) in shared memory when it
  // fits kPagedSmemMaxPages (opt-in, untested on a GPU at commit time; BEAMDEC_CTC_PAGED_SMEM=1)
  int paged_smem = 0;
  // 2: the one-warp kernel's top-`beam` rounds in their multi-winner form (ctc_kernels.cuh, kMulti: several
  // winners per round, the same winners in the same order; the default); 1: the select form (kSelect); 0: the
  // branch form. BEAMDEC_CTC_ROUNDS=multi|select|branch
  int rounds_select = 2;
  // 1: the pre-pass threshold from the warps' r-th largest maxima and a packed-word rank (ctc_kernels.cuh,
  // kWarpTau; the same lists; the default); 0: rank counting over the block's maxima. BEAMDEC_CTC_PREPASS=warp|rank
  int prepass_warp_tau = 1;
  // Streaming: (rows, kStateErrorWords), or null (offline: the op made the rows itself). The launcher checks every
  // row against `want` into `err` before the first tile (ctc_check_states), and every kernel skips a row with a
  // nonzero code: none reads or writes it.
  int32_t* err = nullptr;
  StateStamp want{};
  // 1 (with err): the fused state check (the default since session 28; BEAMDEC_CTC_CHECK=separate for the check kernel;
  // ctc_kernels.cuh "Fused state check"): the check's parts ride in the first tile's pre-pass launch and the decode
  // kernel forms each row's verdict into `err`. Only with the one-warp kernel's multi-winner form (not with
  // paged_smem); any other kernel gets the separate check, so the result is the same either way.
  int fused_check = 0;
  // 1: `state`'s rows are not zeroed yet (offline; the default since session 28, BEAMDEC_CTC_ZERO=memset for a memset
  // by the op): the launcher zeroes them, in the first tile's pre-pass launch where the one-warp kernel's multi-winner
  // form runs (ctc_kernels.cuh "Fused state check"), else with a memset before it. Not with stream_states or err.
  int zero_rows = 0;
  // 1: the pre-pass and one-warp decode launches are overlapped launches (programmatic dependent launch: each may
  // start while the kernel before it runs and waits on it in its first instruction; ctc_kernels.cuh
  // wait_prior_grid_then_release_next). Read by the op from BEAMDEC_CTC_PDL (ctc_cuda.cpp overlapped_launches: the
  // streaming ops' launches by default since session 29, the offline ops' plain). The block kernel launches plainly.
  int pdl = 0;
};

constexpr int kPagedSmemMaxPages = 4096;  // 48 KiB of shared memory

// Measured on the H200 (2026-11-29, beam 10, V 5000): the one-warp kernel is faster than the block kernel
// per decoded frame at 1..64 rows (4.9 vs 6.6 us/frame at 1 row, 1.32 vs 1.63 ms at B=64 x 200 frames) but
// twice as slow with 128 rows (128 streams: 30 vs 16 us per frame of all streams); 64 is the largest
// measured row count where it won.
constexpr int kWarpKernelMaxRows = 64;

size_t ctc_prepass_workspace_bytes(int rows, int beam, int vocab);

// Decodes T frames of every row (tiles of kTile frames: pre-pass + decode launch each) and advances the
// rows' frame counters by T. Returns cudaSuccess or the first launch error.
cudaError_t ctc_decode_frames(const DecodeLaunch& args, cudaStream_t stream);

// N-best of every row into out_tokens (rows, nbest, max_len) (untouched past each length, or with `pad` -1 there:
// the kernel fills the block itself), out_len (rows, nbest), out_scores (rows, nbest), out_status (rows,).
cudaError_t ctc_finalize_rows(int32_t* state, int64_t state_row_words, int rows, int beam, int max_len, int page_size,
                              int num_pages, int nbest, int32_t* out_tokens, int32_t* out_len, float* out_scores,
                              int32_t* out_status, cudaStream_t stream, bool pad = false);

// The offline call's input checks (ctc_kernels.cuh ctc_input_check_kernel): lengths (int32, or int64 when
// lengths64) to int32 clamped to [0, T] in lengths_out, and into checks[0..5) (zeroed by the caller): lengths
// outside [0, T], then the value counts of decoders/ctc.py log_prob_value_stats over the first sample_frames
// frames of each row.
cudaError_t ctc_input_check(const void* log_probs, bool half, int64_t b_stride, int64_t t_stride, int rows, int T, int V,
                            const void* lengths, bool lengths64, int32_t* lengths_out, int sample_frames,
                            int32_t* checks, cudaStream_t stream);

// Streaming state integrity (ctc_common.cuh). Rows: `state` with `state_row_words` per row, or
// `stream_states[rows]` (<= kMaxStreamsPerLaunch). ctc_check_states writes err (rows, kStateErrorWords):
// code 0 or the first refused field per row. ctc_seal_states recomputes each row's checksum (skipping rows
// refused in `err` when given); with `stamp` it first writes the stamp of freshly zeroed rows.
cudaError_t ctc_check_states(int32_t* state, int64_t state_row_words, int32_t* const* stream_states, int rows,
                             const StateStamp& want, int32_t* err, cudaStream_t stream);
// pdl: the seal as an overlapped launch (DecodeLaunch::pdl). cluster: up to kClusterSealMaxRows rows without a stamp
// on sm_90 and newer, each row's checksum summed by a cluster of kSealParts blocks (ctc_state_seal_cluster_kernel);
// elsewhere, and with false, one block per row. The same checksum words either way.
cudaError_t ctc_seal_states(int32_t* state, int64_t state_row_words, int32_t* const* stream_states, int rows,
                            const int32_t* err, const StateStamp* stamp, cudaStream_t stream, bool pdl = false,
                            bool cluster = false);

}  // namespace ctc
}  // namespace beamdec
