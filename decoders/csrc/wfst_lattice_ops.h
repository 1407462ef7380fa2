// Declarations of the WFST lattice ops (CPU reference). Owned by the WFST lattice mode (decoders/lattice.py).
//
//   wfst_lattice(<the wfst_decode search arguments up to eps_iterations>, eps_level (N) i32 (CPU), output_beam,
//                frontier_capacity, candidate_capacity, token_capacity, arc_capacity)   (capacities: CUDA only)
//     -> (scores (B,) f32             best path score (-inf: empty lattice),
//         header (B, 4) i64           [overflow bits, flags (wfst_defs.h kFlag*), arcs before the output-beam
//                                       prune, tokens before it],
//         state_splits (B+1) i64      utterance b's states are [state_splits[b], state_splits[b+1]),
//         states (S, 2) i32           [frame, graph state], topologically sorted per utterance
//                                       (start first, final last),
//         state_scores (S, 2) f32     [forward (Viterbi), backward (k2's: best completion - best path)],
//         arc_splits (B+1) i64,
//         arcs (A, 3) i32             [src, dst (utterance-local state ids), graph arc id], sorted by src,
//         arc_scores (A,) f32)        acoustic_scale * log-prob + graph weight + boosts
//
//   wfst_lattice_mbr(state_splits, states, arc_splits, arcs, arc_scores, arc_words (A,) i32)
//     -> (word_splits (B+1) i64, words (W,) i32, times (W, 2) f32 [begin, end frame], confidences (W,) f32,
//         arc_posteriors (A,) f32 (log semiring, natural log), total_logprob (B,) f64)
//
//   wfst_lattice_best(state_splits, states, state_scores, arc_splits, arcs, arc_scores, ilabel (A_g,) i32,
//                     aux_splits (A_g + 1,) i32, aux_words i32, blank_id (-1: none))     the graph's arrays
//     -> (status (B,) i64 [1 traced, 0 empty lattice, -1 no tight path: use the exact search],
//         token_splits (B+1) i64, tokens (N, 2) i32 [column, frame],
//         word_splits (B+1) i64, words (W, 3) i32 [word id, start frame, end frame])
//     the best path of every lattice and its hypothesis (decoders/lattice.py WfstLattices.best), on the CPU.
//
// Both backends return CPU tensors (the CUDA op prunes on the host, wfst_lattice_cuda.cpp).
// Semantics: decoders/csrc/wfst_lattice_cpu.cpp.
#pragma once
#include <torch/types.h>

#include <cstdlib>
#include <cstring>
#include <tuple>

#include "common_check.h"
#include "wfst_defs.h"

namespace beamdec {

// The lattice pass's state map (wfst::LatticeCapacities::map_slots; 0 = dense): BEAMDEC_LATTICE_MAP=hash a per-lane
// hash table of the smallest power of two >= 2 x frontier entries (64 at least; 12 B an entry + 4 B a frontier
// token), =dense the (B, num_states) maps (8 B a state), unset: dense while the dense maps of the batch stay within
// kDenseMapBudget, else the hash tables where they are smaller. On the H200 (session 7, tiny BPE compact TLG, 211k
// states) the hashed map cost ~20 % more lattice kernel time (batch 200: 123.3 vs 99.2 ms, adaptive walk), so the
// dense maps stay where they are affordable; on the bench TLG (4.2 M states) at batch 200 they are 6.8 GB of an
// 18.6 GiB workspace, the hash tables ~90 MB. decoders/lattice.py rejects other values. BEAMDEC_LATTICE_DENSE_MAP_BYTES
// overrides the budget (tests check the choice with it). The op wfst_lattice_map_slots returns the choice:
// decoders/lattice.py records it with each batch's lattices, the benchmarks count it per batch.
inline constexpr int64_t kDenseMapBudget = int64_t{1} << 30;  // bytes of dense maps per call
inline int32_t lattice_map_slots(int64_t batch, int64_t frontier, int64_t num_states) {
  const char* budget_env = std::getenv("BEAMDEC_LATTICE_DENSE_MAP_BYTES");
  const int64_t budget = budget_env != nullptr ? std::atoll(budget_env) : kDenseMapBudget;
  const char* v = std::getenv("BEAMDEC_LATTICE_MAP");
  if (v != nullptr && std::strcmp(v, "dense") == 0) return 0;
  int64_t h = 64;
  while (h < 2 * frontier && h < (1LL << 30)) h <<= 1;
  if (!(v != nullptr && std::strcmp(v, "hash") == 0)) {  // unset: the size rule
    const int64_t dense = 8 * num_states, hashed = 12 * h + 4 * frontier;  // bytes per lane
    if (batch * dense <= budget || hashed >= dense) return 0;
  }
  return static_cast<int32_t>(h);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
wfst_lattice_cpu(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                 const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                 const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words,
                 const at::Tensor& weight, int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                 const at::Tensor& boost_values, double search_beam, int64_t min_active, int64_t max_active,
                 bool allow_partial, double acoustic_scale, int64_t eps_iterations, const at::Tensor& eps_level,
                 double output_beam, int64_t frontier_capacity, int64_t candidate_capacity, int64_t token_capacity,
                 int64_t arc_capacity);

// The CUDA op in two halves, so decoders/lattice.py can run a batch's host half beside the next GPU pass:
//   wfst_lattice_gather(<the wfst_lattice arguments>) (CUDA) -> LatticeGathered: the forward pass, the device prune
//     and the kept tokens / arcs copied to the host: (tokens (K, 7) i32 [arena id, lane, frame, graph state, eps
//     level, forward bits, ordered backward], arcs (M, 4) i32 [src, dst arena ids, arc | eps bit, ll bits], arc ends
//     (M, 2) i32 [positions among the kept tokens], lanes (B, 4) i32 [best token or -1, tokens before the prune, arcs
//     before, best score bits], lane flags (B, 2) i32 [overflow bits, partial], and the device grouping's five int64
//     tensors (tok_order, tok_begin, local, arc_order, arc_begin) or five empty ones (BEAMDEC_LATTICE_GROUP unset)).
//   wfst_lattice_assemble(<LatticeGathered>) (CPU) -> the wfst_lattice result: grouping by utterance (unless done on
//     the device), canonical numbering and packing, on the host; every index is checked (one-line errors).
// wfst_lattice_cuda = assemble(gather(...)).
using LatticeGathered = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                                   at::Tensor, at::Tensor, at::Tensor>;

LatticeGathered wfst_lattice_gather_cuda(
    const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits, const at::Tensor& eps_begin,
    const at::Tensor& final_begin, const at::Tensor& dest, const at::Tensor& ilabel, const at::Tensor& aux_splits,
    const at::Tensor& aux_words, const at::Tensor& weight, int64_t start_state, int64_t final_state,
    const at::Tensor& boost_keys, const at::Tensor& boost_values, double search_beam, int64_t min_active,
    int64_t max_active, bool allow_partial, double acoustic_scale, int64_t eps_iterations, const at::Tensor& eps_level,
    double output_beam, int64_t frontier_capacity, int64_t candidate_capacity, int64_t token_capacity,
    int64_t arc_capacity);

namespace lattice {
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
assemble_lattices(const at::Tensor& h_tok, const at::Tensor& h_arc, const at::Tensor& h_pos, const at::Tensor& h_lane,
                  const at::Tensor& h_res, const at::Tensor& g_tok_order, const at::Tensor& g_tok_begin,
                  const at::Tensor& g_local, const at::Tensor& g_arc_order, const at::Tensor& g_arc_begin);
}  // namespace lattice

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
wfst_lattice_cuda(const at::Tensor& log_probs, const at::Tensor& lengths, const at::Tensor& row_splits,
                  const at::Tensor& eps_begin, const at::Tensor& final_begin, const at::Tensor& dest,
                  const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words,
                  const at::Tensor& weight, int64_t start_state, int64_t final_state, const at::Tensor& boost_keys,
                  const at::Tensor& boost_values, double search_beam, int64_t min_active, int64_t max_active,
                  bool allow_partial, double acoustic_scale, int64_t eps_iterations, const at::Tensor& eps_level,
                  double output_beam, int64_t frontier_capacity, int64_t candidate_capacity, int64_t token_capacity,
                  int64_t arc_capacity);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_best_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& state_scores,
    const at::Tensor& arc_splits, const at::Tensor& arcs, const at::Tensor& arc_scores, const at::Tensor& ilabel,
    const at::Tensor& aux_splits, const at::Tensor& aux_words, int64_t blank_id);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_mbr_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& arc_splits, const at::Tensor& arcs,
    const at::Tensor& arc_scores, const at::Tensor& arc_words);

// wfst_lattice_word_determinize(state_splits, states, arc_splits, arcs, arc_scores, labels (A,) i32 (0: no word),
//                               beam) -> the same packed layout: each lattice as a word acceptor, epsilon-free and
//     determinized in the tropical semiring (one path per word sequence at its best score), pruned with `beam`,
//     states topologically numbered (start first, one final state last; frame: where the best path of the state's
//     word prefix emitted its last word, Kaldi's compact-lattice time), arcs [src, dst, 0] with their
//     labels; what WfstLattices.mbr(determinize=True) runs MBR on (wfst_lattice_cpu.cpp word_determinize_one).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_word_determinize_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& arc_splits, const at::Tensor& arcs,
    const at::Tensor& arc_scores, const at::Tensor& labels, double beam);

// wfst_lattice_nbest(state_splits, states, arc_splits, arcs, arc_scores, aux_splits, aux_words (the graph's word CSR), k)
//     -> (counts (B,) i64, path_splits (P + 1,) i64, path_arcs (L,) i32: arc indices local to the utterance,
//     path_scores (P,) f64): per utterance the paths of its k best distinct word sequences (each by its best path,
//     best first; fewer when the lattice holds fewer), a lattice arc's words those of its graph arc (arcs[:, 2]);
//     what WfstLattices.nbest runs (wfst_lattice_cpu.cpp nbest_one; spec: WfstLattices._nbest_paths_reference).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_nbest_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& arc_splits, const at::Tensor& arcs,
    const at::Tensor& arc_scores, const at::Tensor& aux_splits, const at::Tensor& aux_words, int64_t k);

// wfst_lattice_path_hypotheses(state_splits, states, arc_splits, arcs, arc_scores, path_utt (P,) i64, path_splits
//     (P + 1,) i64, path_arcs (L,) i32 (arc indices local to the path's utterance), ilabel, aux_splits, aux_words,
//     blank_id) -> (tok_splits (P + 1,) i64, toks (T, 2) i32 [token, frame], word_splits (P + 1,) i64, words (W, 3)
//     i32 [word, start, end]): each path's hypothesis by the rules of wfst_lattice_best (WfstLattices._path_hypothesis).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> wfst_lattice_path_hypotheses_cpu(
    const at::Tensor& state_splits, const at::Tensor& states, const at::Tensor& arc_splits, const at::Tensor& arcs,
    const at::Tensor& arc_scores, const at::Tensor& path_utt, const at::Tensor& path_splits,
    const at::Tensor& path_arcs, const at::Tensor& ilabel, const at::Tensor& aux_splits, const at::Tensor& aux_words,
    int64_t blank_id);

// wfst_lattice_map_slots(batch, frontier_capacity, num_states) -> int: the rule above, for the record (no tensors).
inline int64_t wfst_lattice_map_slots_op(int64_t batch, int64_t frontier_capacity, int64_t num_states) {
  return lattice_map_slots(batch, frontier_capacity, num_states);
}

// wfst_lattice_persistent_batch() -> int: below this many lanes the forward pass is one cooperative kernel.
inline int64_t wfst_lattice_persistent_batch_op() { return wfst::kLatticePersistentBatch; }

}  // namespace beamdec
