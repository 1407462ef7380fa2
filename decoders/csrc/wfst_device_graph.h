// The CUDA ops' view of the graph tensors decoders/wfst.py graph_on_device uploads (layout: wfst::DeviceGraph in
// decoders/include/wfst_launch.h): int16 ilabel, and in the aux_splits / aux_words argument slots the word-arc index
// (2 int32 per block of 32 arcs, then the word arcs' splits) and the words. Sizes and dtypes are checked by
// wfst_check_inputs (wfst_cpu.cpp) or the caller; this only adds the alignment the kernels' 8-byte block loads need.
#pragma once
#include <torch/types.h>

#include <cstdint>

#include "common_check.h"
#include "wfst_launch.h"

namespace beamdec {

inline wfst::DeviceGraph device_graph(const at::Tensor& row_splits, const at::Tensor& eps_begin,
                                      const at::Tensor& final_begin, const at::Tensor& dest, const at::Tensor& ilabel,
                                      const at::Tensor& word_index, const at::Tensor& words, const at::Tensor& weight,
                                      int64_t start_state, int64_t final_state, bool has_eps) {
  const int64_t N = row_splits.numel() - 1, A = dest.numel(), blocks = (A + 31) / 32;
  const int32_t* index = word_index.data_ptr<int32_t>();
  BEAMDEC_CHECK(reinterpret_cast<uintptr_t>(index) % 8 == 0,
                "wfst: the device graph's word-arc index must be 8-byte aligned (decoders.wfst.graph_on_device)");
  return wfst::DeviceGraph{row_splits.data_ptr<int32_t>(),
                           eps_begin.data_ptr<int32_t>(),
                           final_begin.data_ptr<int32_t>(),
                           dest.data_ptr<int32_t>(),
                           reinterpret_cast<const int16_t*>(ilabel.data_ptr<int16_t>()),
                           reinterpret_cast<const int2*>(index),
                           index + 2 * blocks,
                           words.data_ptr<int32_t>(),
                           weight.data_ptr<float>(),
                           static_cast<int32_t>(N),
                           static_cast<int32_t>(start_state),
                           static_cast<int32_t>(final_state),
                           has_eps};
}

}  // namespace beamdec
