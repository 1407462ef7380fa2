// Torch-free definitions shared by the WFST decoder's CPU reference (wfst_cpu.cpp) and its CUDA
// kernels (wfst_kernels.cuh): result layout, overflow bits and the k2 dynamic-beam rule.
//
// Semantics are k2's `intersect_dense_pruned` (k2/csrc/intersect_dense_pruned.cu,
// MultiGraphDenseIntersectPruned::GetPruningCutoffs / GetArcs), restated in decoders/wfst.py.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define WFST_HD __host__ __device__ __forceinline__
#else
#define WFST_HD inline
#endif

namespace wfst {

// Graph label conventions (decoders/graph.py).
constexpr int32_t kFinalLabel = -1;
constexpr int32_t kEpsilonLabel = -2;

// Per-utterance overflow bits (result column kColOverflow). Bits 1..16 are capacity hits the Python
// wrapper rescues by re-decoding with larger capacities; 32 is reported only.
constexpr int32_t kOverflowCandidates = 1;  // candidate buffer full: admitted arcs were dropped
constexpr int32_t kOverflowHash = 2;        // hash probe bound exceeded: a destination state was dropped
constexpr int32_t kOverflowArena = 4;       // back-pointer arena full: the best path may be broken
constexpr int32_t kOverflowFrontier = 8;    // more surviving states than frontier_capacity
constexpr int32_t kOverflowEpsilon = 16;    // epsilon closure not converged within eps_iterations
constexpr int32_t kOverflowWords = 32;      // more words than words_capacity: the tail was cut
constexpr int32_t kRescuableOverflow = 1 | 2 | 4 | 8 | 16 | 32;

// Result row layout: int32 (B, kResultHeader + words_capacity).
constexpr int kColNumWords = 0;  // true number of words (may exceed words_capacity: bit 32 set)
constexpr int kColOverflow = 1;
constexpr int kColFlags = 2;     // kFlag* below
constexpr int kColScore = 3;     // float32 bits of the best path's total score (-inf: no path)
constexpr int kResultHeader = 4;
constexpr int32_t kFlagReachedFinal = 1;  // best path ends with a real FINAL arc
// Lattice arena arcs (wfst_lattice_launch.h LatticeArc {src, dst, arc, ll bits}, int32 x 4): graph arc ids stay below
// this bit; epsilon arcs carry it in `arc` while they are in the arena (the host clears it).
constexpr int32_t kLatticeEpsArcBit = 0x40000000;
constexpr int32_t kFlagHasPath = 2;       // some path was found (final or allow_partial redirect)

// `final_t` of an emitting step under k2's online semantics (the stream's length is unknown until it ends):
// every clause of k2_dynamic_beam that looks at the end of the utterance stays inert.
constexpr int32_t kUnknownFrames = 0x7fffffff - 8;

// The lattice forward pass runs as one cooperative kernel below this many lanes, as launches from it on
// (decoders/csrc/wfst_lattice_launch.cu persistent_selected; decoders/lattice.py lattice_knobs records it).
constexpr int32_t kLatticePersistentBatch = 32;

// One step of k2's dynamic beam (GetPruningCutoffs). `active` is the number of frontier states on
// this step (k2: RowSplits(1) of its [fsa][state][arc] arc tensor), `t` the step index and `final_t` =
// length + 1 (k2's frame count including the final frame). The arithmetic mixes float and double exactly
// as k2 does (0.8/0.2/1.25 are double literals there).
WFST_HD float k2_dynamic_beam(float dynamic_beam, float search_beam, float min_active, float max_active,
                              int64_t active, int32_t t, int32_t final_t) {
  float current_min_active = min_active;
  // Less pruning on the last few frames so that final states survive.
  if (t + 5 >= final_t) current_min_active = (min_active > max_active / 2) ? min_active : max_active / 2;
  if (static_cast<float>(active) <= max_active) {
    if (static_cast<float>(active) >= current_min_active || active == 0) {
      dynamic_beam = static_cast<float>(0.8 * dynamic_beam + 0.2 * search_beam);
    } else {
      if (dynamic_beam < search_beam) dynamic_beam = search_beam;
      dynamic_beam = static_cast<float>(dynamic_beam * 1.25);
    }
  } else if (t + 5 < final_t) {
    if (dynamic_beam > search_beam) dynamic_beam = search_beam;
    dynamic_beam = static_cast<float>(dynamic_beam * 0.8);
  }
  if (t == final_t - 1) dynamic_beam = 1.0e10f;  // final step: keep every final arc
  return dynamic_beam;
}

// Monotone float <-> uint32 mapping so that unsigned max equals float max (used for atomics on the
// GPU and kept here so both backends agree on the encoding).
WFST_HD uint32_t float_to_ordered(float f) {
  union {
    float f;
    uint32_t u;
  } v;
  v.f = f;
  return (v.u & 0x80000000u) ? ~v.u : (v.u | 0x80000000u);
}
WFST_HD float ordered_to_float(uint32_t u) {
  union {
    float f;
    uint32_t u;
  } v;
  v.u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  return v.f;
}

// The arcs state s expands on a step, the rule of every CPU reference (wfst_cpu.cpp, wfst_lattice_cpu.cpp,
// wfst_stream_cpu.cpp): on a frame its emitting arcs [row_splits[s], eps_begin[s]); on the final step its FINAL arcs
// [final_begin[s], row_splits[s + 1]), or all its arcs [row_splits[s], row_splits[s + 1]) when redirecting
// (allow_partial, no FINAL arc anywhere in the frontier).
WFST_HD void step_arc_range(const int32_t* row_splits, const int32_t* eps_begin, const int32_t* final_begin, int32_t s,
                            bool final_step, bool redirect, int32_t& begin, int32_t& end) {
  if (!final_step) {
    begin = row_splits[s];
    end = eps_begin[s];
  } else if (redirect) {
    begin = row_splits[s];
    end = row_splits[s + 1];
  } else {
    begin = final_begin[s];
    end = row_splits[s + 1];
  }
}

// Per-utterance boost table: open addressing over int32 keys (-1 = empty), linear probing,
// capacity a power of two (shared by CPU and GPU; built by decoders/wfst.py).
WFST_HD uint32_t hash_u32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
WFST_HD float boost_lookup(const int32_t* keys, const float* values, int32_t capacity, int32_t word) {
  if (capacity == 0 || word == 0) return 0.0f;
  uint32_t mask = static_cast<uint32_t>(capacity - 1);
  uint32_t h = hash_u32(static_cast<uint32_t>(word)) & mask;
  for (int32_t probe = 0; probe < capacity; ++probe) {
    int32_t k = keys[h];
    if (k == word) return values[h];
    if (k == -1) return 0.0f;
    h = (h + 1) & mask;
  }
  return 0.0f;
}

}  // namespace wfst
