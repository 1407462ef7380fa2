// Declarations of the WFST beam search ops (CPU reference and CUDA). Owned by the WFST decoder.
//
// Both backends implement one schema (registered in bindings.cpp):
//   wfst_decode(log_probs (B,T,V) f32|f16, lengths (B,) i64,
//               row_splits (N+1) i32, eps_begin (N) i32, final_begin (N) i32,
//               dest (A) i32, ilabel (A) i32, aux_splits (A+1) i32, aux_words (X) i32, weight (A) f32,
//               start_state, final_state,
//               boost_keys (B,C) i32, boost_values (B,C) f32,
//               search_beam, min_active, max_active, allow_partial, acoustic_scale,
//               eps_iterations, frontier_capacity, candidate_capacity, hash_capacity,
//               arena_capacity, words_capacity, online=False)
//     -> result (B, 4 + words_capacity) i32 on the input's device (layout: include/wfst_defs.h).
// Capacities are ignored by the CPU reference (it never runs out), except eps_iterations, whose bound
// is part of the semantics shared by both backends. online: k2's online beam semantics (decoders/wfst.py,
// WfstDecoderConfig.online): the offline-only clauses of the dynamic beam stay inert on emitting steps.
#pragma once
#include <torch/types.h>

#include <tuple>

#include "common_check.h"

namespace beamdec {

at::Tensor wfst_decode_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                           const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                           const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words, const at::Tensor& weight,
                           int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                           const at::Tensor& boost_values, double search_beam, int64_t min_active,
                           int64_t max_active, bool allow_partial, double acoustic_scale, int64_t eps_iterations,
                           int64_t frontier_capacity, int64_t candidate_capacity, int64_t hash_capacity,
                           int64_t arena_capacity, int64_t words_capacity, bool online,
                           double max_emit_weight, int64_t max_degree);

at::Tensor wfst_decode_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                            const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                            const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words, const at::Tensor& weight,
                            int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                            const at::Tensor& boost_values, double search_beam, int64_t min_active,
                            int64_t max_active, bool allow_partial, double acoustic_scale, int64_t eps_iterations,
                            int64_t frontier_capacity, int64_t candidate_capacity, int64_t hash_capacity,
                            int64_t arena_capacity, int64_t words_capacity, bool online,
                            double max_emit_weight, int64_t max_degree);

// CPU only: wfst_decode_cpu's result rows plus, per utterance, (B, 8) int64: peak and summed frontier (distinct
// states of a step after its closure), peak and summed admitted candidates per step, word links (back-pointers
// on word arcs) and steps -- what the GPU capacities have to hold -- the most word links the CPU reference
// held at once (its memory; bounded by compaction, see wfst_cpu.cpp) and the epsilon-closure passes that
// generated candidates.
std::tuple<at::Tensor, at::Tensor> wfst_search_stats_cpu(
    const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits, const at::Tensor& eps_begin,
    const at::Tensor& final_begin, const at::Tensor& dest, const at::Tensor& ilabel, const at::Tensor& aux_splits,
    const at::Tensor& aux_words, const at::Tensor& weight, int64_t start_state, int64_t final_state,
    const at::Tensor& boost_keys, const at::Tensor& boost_values, double search_beam, int64_t min_active,
    int64_t max_active, bool allow_partial, double acoustic_scale, int64_t eps_iterations, int64_t words_capacity,
    bool online);

// Shared argument checks (names the argument and what was expected); defined in wfst_cpu.cpp.
void wfst_check_inputs(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                       const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                       const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words, const at::Tensor& weight,
                       int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                       const at::Tensor& boost_values, double search_beam, int64_t min_active, int64_t max_active,
                       int64_t eps_iterations, int64_t words_capacity);

}  // namespace beamdec
