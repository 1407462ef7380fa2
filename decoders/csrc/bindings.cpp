// The one registration file of the `beamdec` extension: op schemas first, then per-backend impls.
// Each decoder owns its section; sections are compiled only when the loader enables the component
// (BEAMDEC_WITH_CTC / BEAMDEC_WITH_WFST) so a component can be built and tested on its own.
#include <torch/library.h>

#ifdef BEAMDEC_WITH_CTC
#include "ctc_ops.h"
#include "ctc_lm_ops.h"
#endif
#ifdef BEAMDEC_WITH_WFST
#include "wfst_ops.h"
#include "wfst_lattice_host.h"
#include "wfst_lattice_ops.h"
#endif

TORCH_LIBRARY(beamdec, m) {
#ifdef BEAMDEC_WITH_CTC
  // ---- CTC prefix beam search: schemas ----
  // Layout of `state` and the status bits: decoders/include/ctc_common.cuh; semantics: ctc_cpu.cpp.
  // page_size 0: flat token storage; > 0: paged with num_pages pages per row.
  m.def(
      "ctc_decode_offline(Tensor log_probs, Tensor lengths, int beam_size, int blank_id, "
      "float blank_skip_threshold, int nbest, int max_seq_len, int page_size, int num_pages) "
      "-> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "ctc_decode_offline_packed(Tensor log_probs, Tensor lengths, int beam_size, int blank_id, "
      "float blank_skip_threshold, int nbest, int max_seq_len, int page_size, int num_pages, int sample_frames) "
      "-> Tensor");
  m.def(
      "ctc_decode_chunk(Tensor(a!) state, Tensor log_probs, Tensor? speech_mask, int beam_size, int blank_id, "
      "int max_seq_len, int page_size, int num_pages) -> ()");
  m.def(
      "ctc_decode_chunk_batched(Tensor(a!)[] states, Tensor log_probs, Tensor? speech_mask, int beam_size, "
      "int blank_id, int max_seq_len, int page_size, int num_pages) -> ()");
  m.def(
      "ctc_finalize(Tensor state, int beam_size, int blank_id, int vocab_size, int nbest, int max_seq_len, "
      "int page_size, int num_pages) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "ctc_init_state(Tensor(a!) state, int beam_size, int blank_id, int vocab_size, int max_seq_len, "
      "int page_size, int num_pages) -> ()");
  m.def("ctc_debug_raise(Tensor x, int mode) -> ()");  // error-path diagnostics (tests only)
  // ---- CTC prefix beam search + token n-gram LM + phrase boosting, fused (decoders/ctc_lm.py kernel="fused") ----
  // Arguments and outputs: decoders/csrc/ctc_lm_ops.h; semantics: decoders/include/ctc_lm_kernels.cuh.
  m.def(
      "ctc_lm_decode(Tensor log_probs, Tensor lengths, Tensor lm_row_ptr, Tensor lm_label, Tensor lm_weight, "
      "Tensor lm_dest, Tensor lm_fallback, Tensor lm_fallback_w, Tensor col_label, Tensor boost_row_ptr, "
      "Tensor boost_label, Tensor boost_dest, Tensor boost_fallback, Tensor boost_credit, Tensor boost_out, "
      "Tensor boost_roots, int beam, int blank, int skip_mode, float log_thr, float bonus, float lm_weight_value, "
      "bool lm_eos, int bos_state, int eos_label, int nbest, int block_threads, bool reverse_items) "
      "-> (Tensor, Tensor, Tensor)");
#endif
#ifdef BEAMDEC_WITH_WFST
  // ---- WFST beam search: schemas ----
  // Result layout and overflow bits: decoders/include/wfst_defs.h; semantics: decoders/wfst.py.
  m.def(
      "wfst_decode(Tensor log_probs, Tensor lengths, Tensor row_splits, Tensor eps_begin, Tensor final_begin, "
      "Tensor dest, Tensor ilabel, Tensor aux_splits, Tensor aux_words, Tensor weight, int start_state, int final_state, "
      "Tensor boost_keys, Tensor boost_values, float search_beam, int min_active, int max_active, "
      "bool allow_partial, float acoustic_scale, int eps_iterations, int frontier_capacity, "
      "int candidate_capacity, int hash_capacity, int arena_capacity, int words_capacity, bool online=False, "
      "float max_emit_weight=3.0e38, int max_degree=0) -> Tensor");
  // CPU only: what each utterance's search needed (sizes for the GPU capacities), (B, 8) int64
  m.def(
      "wfst_search_stats(Tensor log_probs, Tensor lengths, Tensor row_splits, Tensor eps_begin, Tensor final_begin, "
      "Tensor dest, Tensor ilabel, Tensor aux_splits, Tensor aux_words, Tensor weight, int start_state, "
      "int final_state, Tensor boost_keys, Tensor boost_values, float search_beam, int min_active, int max_active, "
      "bool allow_partial, float acoustic_scale, int eps_iterations, int words_capacity, bool online=False) "
      "-> (Tensor, Tensor)");
  // Lattice mode (CPU reference; layout: decoders/csrc/wfst_lattice_ops.h, API: decoders/lattice.py)
  m.def(
      "wfst_lattice(Tensor log_probs, Tensor lengths, Tensor row_splits, Tensor eps_begin, Tensor final_begin, "
      "Tensor dest, Tensor ilabel, Tensor aux_splits, Tensor aux_words, Tensor weight, int start_state, "
      "int final_state, Tensor boost_keys, Tensor boost_values, float search_beam, int min_active, int max_active, "
      "bool allow_partial, float acoustic_scale, int eps_iterations, Tensor eps_level, float output_beam, "
      "int frontier_capacity, int candidate_capacity, int token_capacity, int arc_capacity) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // MBR's word-determinized lattices (wfst_lattice_ops.h; CPU tensors)
  m.def(
      "wfst_lattice_word_determinize(Tensor state_splits, Tensor states, Tensor arc_splits, Tensor arcs, "
      "Tensor arc_scores, Tensor labels, float beam) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "wfst_lattice_nbest(Tensor state_splits, Tensor states, Tensor arc_splits, Tensor arcs, Tensor arc_scores, "
      "Tensor aux_splits, Tensor aux_words, int k) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "wfst_lattice_path_hypotheses(Tensor state_splits, Tensor states, Tensor arc_splits, Tensor arcs, "
      "Tensor arc_scores, Tensor path_utt, Tensor path_splits, Tensor path_arcs, Tensor ilabel, Tensor aux_splits, "
      "Tensor aux_words, int blank_id) -> (Tensor, Tensor, Tensor, Tensor)");
  // the CUDA lattice op in two halves (wfst_lattice_ops.h): the device half, and the host half (CPU tensors)
  m.def(
      "wfst_lattice_gather(Tensor log_probs, Tensor lengths, Tensor row_splits, Tensor eps_begin, Tensor final_begin, "
      "Tensor dest, Tensor ilabel, Tensor aux_splits, Tensor aux_words, Tensor weight, int start_state, "
      "int final_state, Tensor boost_keys, Tensor boost_values, float search_beam, int min_active, int max_active, "
      "bool allow_partial, float acoustic_scale, int eps_iterations, Tensor eps_level, float output_beam, "
      "int frontier_capacity, int candidate_capacity, int token_capacity, int arc_capacity) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "wfst_lattice_assemble(Tensor tokens, Tensor arcs, Tensor arc_ends, Tensor lanes, Tensor lane_flags, "
      "Tensor tok_order, Tensor tok_begin, Tensor local, Tensor arc_order, Tensor arc_begin) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // the CUDA lattice op's state-map choice (0: dense maps, else hash slots per lane); no tensors: one kernel for all
  m.def("wfst_lattice_map_slots(int batch, int frontier_capacity, int num_states) -> int",
        &beamdec::wfst_lattice_map_slots_op);
  m.def("wfst_lattice_persistent_batch() -> int", &beamdec::wfst_lattice_persistent_batch_op);
  // the CUDA lattice op's grouping of kept tokens / arcs by utterance (wfst_lattice_host.h), exposed for its tests
  m.def("wfst_lattice_group_by_lane(Tensor tok_lane, Tensor arc_src, int batch) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
        &beamdec::lattice::wfst_lattice_group_by_lane_op);
  m.def(
      "wfst_lattice_best(Tensor state_splits, Tensor states, Tensor state_scores, Tensor arc_splits, Tensor arcs, "
      "Tensor arc_scores, Tensor ilabel, Tensor aux_splits, Tensor aux_words, int blank_id) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "wfst_lattice_mbr(Tensor state_splits, Tensor states, Tensor arc_splits, Tensor arcs, Tensor arc_scores, "
      "Tensor arc_words) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
#endif
}

TORCH_LIBRARY_IMPL(beamdec, CPU, m) {
#ifdef BEAMDEC_WITH_CTC
  // ---- CTC prefix beam search: CPU reference ----
  m.impl("ctc_decode_offline", &beamdec::ctc_decode_offline_cpu);
  m.impl("ctc_decode_offline_packed", &beamdec::ctc_decode_offline_packed_cpu);
  m.impl("ctc_decode_chunk", &beamdec::ctc_decode_chunk_cpu);
  m.impl("ctc_decode_chunk_batched", &beamdec::ctc_decode_chunk_batched_cpu);
  m.impl("ctc_finalize", &beamdec::ctc_finalize_cpu);
  m.impl("ctc_init_state", &beamdec::ctc_init_state_cpu);
  m.impl("ctc_debug_raise", &beamdec::ctc_debug_raise_cpu);
  m.impl("ctc_lm_decode", &beamdec::ctc_lm_decode_cpu);
#endif
#ifdef BEAMDEC_WITH_WFST
  // ---- WFST beam search: CPU reference ----
  m.impl("wfst_decode", &beamdec::wfst_decode_cpu);
  m.impl("wfst_search_stats", &beamdec::wfst_search_stats_cpu);
  m.impl("wfst_lattice", &beamdec::wfst_lattice_cpu);
  m.impl("wfst_lattice_assemble", &beamdec::lattice::assemble_lattices);
  m.impl("wfst_lattice_word_determinize", &beamdec::wfst_lattice_word_determinize_cpu);
  m.impl("wfst_lattice_nbest", &beamdec::wfst_lattice_nbest_cpu);
  m.impl("wfst_lattice_path_hypotheses", &beamdec::wfst_lattice_path_hypotheses_cpu);
  m.impl("wfst_lattice_best", &beamdec::wfst_lattice_best_cpu);
  m.impl("wfst_lattice_mbr", &beamdec::wfst_lattice_mbr_cpu);
#endif
}

#ifdef BEAMDEC_WITH_CUDA
TORCH_LIBRARY_IMPL(beamdec, CUDA, m) {
#ifdef BEAMDEC_WITH_CTC
  // ---- CTC prefix beam search: CUDA ----
  m.impl("ctc_decode_offline", &beamdec::ctc_decode_offline_cuda);
  m.impl("ctc_decode_offline_packed", &beamdec::ctc_decode_offline_packed_cuda);
  m.impl("ctc_decode_chunk", &beamdec::ctc_decode_chunk_cuda);
  m.impl("ctc_decode_chunk_batched", &beamdec::ctc_decode_chunk_batched_cuda);
  m.impl("ctc_finalize", &beamdec::ctc_finalize_cuda);
  m.impl("ctc_init_state", &beamdec::ctc_init_state_cuda);
  m.impl("ctc_debug_raise", &beamdec::ctc_debug_raise_cuda);
  m.impl("ctc_lm_decode", &beamdec::ctc_lm_decode_cuda);
#endif
#ifdef BEAMDEC_WITH_WFST
  // ---- WFST beam search: CUDA ----
  m.impl("wfst_decode", &beamdec::wfst_decode_cuda);
  m.impl("wfst_lattice", &beamdec::wfst_lattice_cuda);
  m.impl("wfst_lattice_gather", &beamdec::wfst_lattice_gather_cuda);
#endif
}
#endif
