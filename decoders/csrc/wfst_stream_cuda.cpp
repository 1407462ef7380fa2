// Torch-facing CUDA streaming WFST decoder (decoders/wfst_stream.py): a torch custom class that owns the persistent
// workspace of `max_streams` slots (allocated once from torch's caching allocator), the per-slot boost rows and the
// drained transcript prefixes, and calls the torch-free launcher (decoders/csrc/wfst_stream_launch.cu). Same methods
// and result layout as the CPU reference class WfstStreamCpu (wfst_stream_cpu.cpp), whose semantics it implements.
//
// Memory: everything on the device is allocated in the constructor (workspace, GC scratch, drain buffer) except the
// per-call staging of log-probs into slot rows, which the caching allocator reuses, so device memory is flat after
// the first call. The word-link arena is garbage-collected before a chunk whenever it is more than half full
// (wfst_stream_kernels.cuh): converged prefixes are drained to the host, the rest compacted.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/custom_class.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "common_check.h"
#include "wfst_defs.h"
#include "wfst_device_graph.h"
#include "wfst_launch.h"
#include "wfst_stream_launch.h"

namespace beamdec {

class WfstStreamCuda : public torch::CustomClassHolder {
 public:
  WfstStreamCuda(at::Tensor row_splits, at::Tensor eps_begin, at::Tensor final_begin, at::Tensor dest, at::Tensor ilabel,
                 at::Tensor aux_splits, at::Tensor aux_words, at::Tensor weight, int64_t start_state,
                 int64_t final_state, double search_beam, int64_t min_active, int64_t max_active, bool allow_partial,
                 double acoustic_scale, int64_t eps_iterations, int64_t max_streams, int64_t /*compact_min_links*/,
                 int64_t frontier_capacity, int64_t candidate_capacity, int64_t hash_capacity, int64_t arena_capacity,
                 int64_t max_chunk_frames, int64_t drain_capacity)
      : graph_{row_splits.contiguous(), eps_begin.contiguous(), final_begin.contiguous(), dest.contiguous(),
               ilabel.contiguous(), aux_splits.contiguous(), aux_words.contiguous(), weight.contiguous()} {
    const auto dev = graph_[0].device();
    BEAMDEC_CHECK_VALUE(dev.is_cuda(), "WfstStreamCuda: the graph tensors must be on a CUDA device");
    for (int i = 0; i < 7; ++i)  // the device layout (decoders/wfst.py graph_on_device): ilabel int16
      BEAMDEC_CHECK_VALUE(graph_[i].scalar_type() == (i == 4 ? at::kShort : at::kInt) && graph_[i].device() == dev,
                          "WfstStreamCuda: graph index tensors must be int32 (ilabel int16) on ", dev,
                          " (decoders.wfst.graph_on_device)");
    BEAMDEC_CHECK_VALUE(graph_[7].scalar_type() == at::kFloat && graph_[7].device() == dev,
                        "WfstStreamCuda: weight must be float32 on ", dev);
    const int64_t N = graph_[0].numel() - 1, A = graph_[3].numel();
    BEAMDEC_CHECK_VALUE(N >= 1 && graph_[1].numel() == N && graph_[2].numel() == N && graph_[4].numel() == A &&
                            graph_[7].numel() == A && graph_[5].numel() >= 2 * ((A + 31) / 32) + 1,
                        "WfstStreamCuda: graph tensor sizes disagree");
    BEAMDEC_CHECK_VALUE(start_state >= 0 && start_state < N && final_state >= 0 && final_state < N,
                        "WfstStreamCuda: start_state/final_state outside [0, ", N, ")");
    BEAMDEC_CHECK_VALUE(search_beam > 0 && min_active >= 0 && max_active > min_active,
                        "WfstStreamCuda: need search_beam > 0 and 0 <= min_active < max_active");
    BEAMDEC_CHECK_VALUE(max_streams >= 1 && max_streams <= (1 << 16), "WfstStreamCuda: max_streams must be in [1, 65536]");
    BEAMDEC_CHECK_VALUE(frontier_capacity >= 1 && frontier_capacity < (1 << 28) && candidate_capacity >= 1 &&
                            candidate_capacity < (1LL << 31) && hash_capacity >= 2 &&
                            (hash_capacity & (hash_capacity - 1)) == 0 && arena_capacity >= 16 &&
                            arena_capacity < (1LL << 31) && max_chunk_frames >= 1 && drain_capacity >= 1,
                        "WfstStreamCuda: capacities out of range");
    device_ = dev;
    word_index_host_ = graph_[5].cpu();
    words_host_ = graph_[6].cpu();
    il_max_ = A ? graph_[4].max().item<int32_t>() : -1;
    const bool has_eps = (graph_[1] < graph_[2]).any().item<bool>();
    eps_passes_ = has_eps ? static_cast<int32_t>(eps_iterations) : 0;
    BEAMDEC_CHECK_VALUE(!has_eps || eps_passes_ >= 1, "WfstStreamCuda: the graph has epsilon arcs, eps_iterations must be >= 1");
    g_ = device_graph(graph_[0], graph_[1], graph_[2], graph_[3], graph_[4], graph_[5], graph_[6], graph_[7],
                      start_state, final_state, has_eps);
    host_words_ = device_graph(graph_[0], graph_[1], graph_[2], graph_[3], graph_[4], word_index_host_, words_host_,
                               graph_[7], start_state, final_state, has_eps);  // only its word index is read, on the host
    opt_ = wfst::SearchOptions{static_cast<float>(search_beam), static_cast<float>(min_active),
                               static_cast<float>(max_active), allow_partial, static_cast<float>(acoustic_scale),
                               static_cast<int32_t>(eps_iterations), /*online=*/true, /*stream_chunk=*/true};
    caps_ = wfst::Capacities{static_cast<int32_t>(frontier_capacity), static_cast<int32_t>(candidate_capacity),
                             static_cast<int32_t>(hash_capacity), arena_capacity, 1};
    S_ = static_cast<int32_t>(max_streams);
    max_chunk_ = static_cast<int32_t>(max_chunk_frames);
    D_ = static_cast<int32_t>(drain_capacity);
    c10::cuda::CUDAGuard guard(device_);
    auto u8 = at::TensorOptions().dtype(at::kByte).device(device_);
    auto i32 = at::TensorOptions().dtype(at::kInt).device(device_);
    workspace_ = at::empty({static_cast<int64_t>(wfst::stream::workspace_bytes(S_, caps_))}, u8);
    gc_ = at::empty({static_cast<int64_t>(wfst::stream::gc_bytes(S_, caps_.arena))}, u8);
    drain_ = at::zeros({S_, D_}, i32);
    drain_count_ = at::zeros({S_}, i32);
    open_dev_ = at::zeros({S_}, i32);
    boost_keys_ = at::empty({S_, 0}, i32);
    boost_values_ = at::empty({S_, 0}, at::TensorOptions().dtype(at::kFloat).device(device_));
    cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_.index());
    check(wfst::stream::reset(workspace_.data_ptr(), gc_.data_ptr(), S_, caps_, stream()), "reset");
    slots_.resize(static_cast<size_t>(S_));
  }

  void open(int64_t slot, at::Tensor boost_keys, at::Tensor boost_values) {
    check_slot(slot, "open");
    BEAMDEC_CHECK_VALUE(!slots_[slot].open, "WfstStreamCuda.open: slot ", slot, " is already open");
    BEAMDEC_CHECK_VALUE(boost_keys.dim() == 1 && boost_keys.scalar_type() == at::kInt && boost_values.dim() == 1 &&
                            boost_values.scalar_type() == at::kFloat && boost_values.numel() == boost_keys.numel(),
                        "WfstStreamCuda.open: boost_keys (C,) int32 and boost_values (C,) float32 expected");
    c10::cuda::CUDAGuard guard(device_);
    Slot& s = slots_[slot];
    s = Slot();
    s.open = true;
    auto k = boost_keys.cpu().contiguous(), v = boost_values.cpu().contiguous();
    for (int64_t i = 0; i < k.numel(); ++i)
      if (k.data_ptr<int32_t>()[i] != -1) s.boosts.emplace_back(k.data_ptr<int32_t>()[i], v.data_ptr<float>()[i]);
    const int64_t need = s.boosts.empty() ? 0 : next_pow2(2 * static_cast<int64_t>(s.boosts.size()));
    if (need > boost_keys_.size(1)) rebuild_boosts(need);  // every row rehashed at the new capacity
    else if (boost_keys_.size(1) > 0) upload_boost_row(slot);
    set_open(slot, 1);
    check(wfst::stream::open_lane(g_, opt_, caps_, workspace_.data_ptr(), S_, static_cast<int32_t>(slot), eps_passes_,
                                  bk(), bv(), bcap(), num_sms_, stream()),
          "open");
  }

  void close(int64_t slot) {
    check_slot(slot, "close");
    BEAMDEC_CHECK_VALUE(slots_[slot].open, "WfstStreamCuda.close: slot ", slot, " is not open");
    c10::cuda::CUDAGuard guard(device_);
    slots_[slot] = Slot();
    set_open(slot, 0);
  }

  void advance(at::Tensor slots, at::Tensor log_probs, at::Tensor lengths) {
    BEAMDEC_CHECK_VALUE(log_probs.dim() == 3 && (log_probs.scalar_type() == at::kFloat || log_probs.scalar_type() == at::kHalf) &&
                            log_probs.device() == device_,
                        "WfstStreamCuda.advance: log_probs must be a float32/float16 tensor (N, T, V) on ", device_);
    const int64_t N = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
    const std::vector<int64_t> sl = slot_list(slots, N, "advance");
    BEAMDEC_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) == N && lengths.scalar_type() == at::kLong && lengths.is_cpu(),
                        "WfstStreamCuda.advance: lengths must be a CPU int64 tensor of shape (", N, ",)");
    BEAMDEC_CHECK_VALUE(V > il_max_, "WfstStreamCuda.advance: log_probs has ", V, " columns, the graph reads label ", il_max_);
    const int64_t* len = lengths.data_ptr<int64_t>();
    for (int64_t i = 0; i < N; ++i)
      BEAMDEC_CHECK_VALUE(len[i] >= 0 && len[i] <= T, "WfstStreamCuda.advance: lengths[", i, "] = ", len[i],
                          " outside [0, ", T, "]");
    if (N == 0 || T == 0) return;
    c10::cuda::CUDAGuard guard(device_);
    at::Tensor lp = log_probs.contiguous();
    at::Tensor index = at::tensor(std::vector<int64_t>(sl.begin(), sl.end()), at::TensorOptions().dtype(at::kLong)).to(device_);
    for (int64_t start = 0; start < T; start += max_chunk_) {  // pieces of at most max_chunk_frames (arena sizing)
      const int64_t Tp = std::min<int64_t>(max_chunk_, T - start);
      std::vector<int32_t> lane_len(static_cast<size_t>(S_), -1);
      int32_t steps = 0;
      for (int64_t i = 0; i < N; ++i) {
        const int32_t n = static_cast<int32_t>(std::max<int64_t>(0, std::min<int64_t>(Tp, len[i] - start)));
        if (n > 0) lane_len[sl[i]] = n;
        steps = std::max(steps, n);
      }
      if (steps == 0) break;
      maybe_collect(false);
      at::Tensor staged = at::empty({S_, Tp, V}, lp.options());  // slot rows; rows of other lanes are never read
      staged.index_copy_(0, index, lp.narrow(1, start, Tp));
      at::Tensor lane_len_dev = upload(lane_len);
      check(wfst::stream::advance(g_, opt_, caps_, workspace_.data_ptr(), S_, staged.data_ptr(),
                                  lp.scalar_type() == at::kHalf, static_cast<int32_t>(Tp), static_cast<int32_t>(V),
                                  lane_len_dev.data_ptr<int32_t>(), steps, eps_passes_, bk(), bv(), bcap(), num_sms_,
                                  stream()),
            "advance");
      for (int64_t i = 0; i < N; ++i) slots_[sl[i]].frames += std::max<int64_t>(0, std::min<int64_t>(Tp, len[i] - start));
    }
  }

  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> partial(at::Tensor slots) {
    const std::vector<int64_t> sl = slot_list(slots, slots.numel(), "partial");
    c10::cuda::CUDAGuard guard(device_);
    return results(sl, /*final=*/false);
  }

  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> finalize(at::Tensor slots) {
    const std::vector<int64_t> sl = slot_list(slots, slots.numel(), "finalize");
    c10::cuda::CUDAGuard guard(device_);
    if (!sl.empty()) {
      std::vector<int32_t> lane_len(static_cast<size_t>(S_), -1);
      for (int64_t s : sl) lane_len[s] = 0;
      at::Tensor lane_len_dev = upload(lane_len);
      wfst::SearchOptions fin = opt_;
      fin.stream_chunk = false;  // the end of the stream: step 0 is the final step
      check(wfst::stream::finalize(g_, fin, caps_, workspace_.data_ptr(), S_, lane_len_dev.data_ptr<int32_t>(), bk(),
                                   bv(), bcap(), num_sms_, stream()),
            "finalize");
    }
    auto out = results(sl, /*final=*/true);
    for (int64_t s : sl) {
      slots_[s] = Slot();
      set_open(s, 0);
    }
    return out;
  }

  // (frames, live word links of the shared arena, their peak, garbage collections run, drained words, frontier).
  at::Tensor stats(int64_t slot) {
    check_slot(slot, "stats");
    c10::cuda::CUDAGuard guard(device_);
    const uint64_t cur = read_cursor();
    at::Tensor lanes = at::zeros({S_, 2}, at::TensorOptions().dtype(at::kInt).device(device_));
    check(wfst::stream::lane_stats(caps_, workspace_.data_ptr(), S_, lanes.data_ptr<int32_t>(), stream()), "stats");
    at::Tensor host = lanes.cpu();
    auto out = at::zeros({6}, at::TensorOptions().dtype(at::kLong));
    int64_t* o = out.data_ptr<int64_t>();
    o[0] = slots_[slot].frames;
    o[1] = static_cast<int64_t>(cur);
    o[2] = static_cast<int64_t>(std::max<uint64_t>(peak_cursor_, cur));
    o[3] = gc_runs_;
    o[4] = static_cast<int64_t>(slots_[slot].drained.size());
    o[5] = host.data_ptr<int32_t>()[2 * slot];
    return out;
  }

  int64_t max_streams() const { return S_; }
  // Device bytes held by the decoder (workspace, GC scratch, drain buffer, boost rows; staging excluded).
  int64_t device_bytes() const {
    return workspace_.numel() + gc_.numel() + 4 * (drain_.numel() + drain_count_.numel() + open_dev_.numel()) +
           8 * boost_keys_.numel();
  }
  // Runs a garbage collection now (tests and benchmarks; advance runs one when the arena is half full).
  void collect() {
    c10::cuda::CUDAGuard guard(device_);
    maybe_collect(true);
  }

 private:
  struct Slot {
    bool open = false;
    int64_t frames = 0;
    std::vector<std::pair<int32_t, float>> boosts;
    std::vector<int32_t> drained;  // word ids of the drained prefix, oldest first
  };

  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(device_.index()).stream(); }

  static void check(cudaError_t err, const char* what) {
    BEAMDEC_CHECK(err == cudaSuccess, "WfstStreamCuda.", what, ": CUDA error ", cudaGetErrorString(err));
  }

  static int64_t next_pow2(int64_t x) {
    int64_t p = 1;
    while (p < x) p <<= 1;
    return p;
  }

  void check_slot(int64_t slot, const char* what) const {
    BEAMDEC_CHECK_VALUE(slot >= 0 && slot < S_, "WfstStreamCuda.", what, ": slot ", slot, " outside [0, ", S_, ")");
  }

  std::vector<int64_t> slot_list(const at::Tensor& slots, int64_t n, const char* what) const {
    BEAMDEC_CHECK_VALUE(slots.dim() == 1 && slots.numel() == n && slots.scalar_type() == at::kLong,
                        "WfstStreamCuda.", what, ": slots must be an int64 tensor of shape (", n, ",)");
    at::Tensor h = slots.cpu().contiguous();
    std::vector<int64_t> out(h.data_ptr<int64_t>(), h.data_ptr<int64_t>() + n);
    std::vector<char> seen(static_cast<size_t>(S_), 0);
    for (int64_t s : out) {
      check_slot(s, what);
      BEAMDEC_CHECK_VALUE(slots_[s].open, "WfstStreamCuda.", what, ": slot ", s, " is not open");
      BEAMDEC_CHECK_VALUE(!seen[s], "WfstStreamCuda.", what, ": slot ", s, " appears twice");
      seen[s] = 1;
    }
    return out;
  }

  at::Tensor upload(const std::vector<int32_t>& v) const {
    return at::tensor(v, at::TensorOptions().dtype(at::kInt)).to(device_);
  }

  void set_open(int64_t slot, int32_t value) { open_dev_.narrow(0, slot, 1).fill_(value); }

  const int32_t* bk() const { return boost_keys_.size(1) ? boost_keys_.data_ptr<int32_t>() : nullptr; }
  const float* bv() const { return boost_values_.size(1) ? boost_values_.data_ptr<float>() : nullptr; }
  int32_t bcap() const { return static_cast<int32_t>(boost_keys_.size(1)); }

  // Host copy of one slot's open-addressing row at capacity `cap` (the probing of wfst::boost_lookup).
  void fill_row(const Slot& s, int64_t cap, int32_t* keys, float* values) const {
    std::fill(keys, keys + cap, -1);
    std::fill(values, values + cap, 0.0f);
    for (const auto& kv : s.boosts) {
      uint32_t h = wfst::hash_u32(static_cast<uint32_t>(kv.first)) & static_cast<uint32_t>(cap - 1);
      while (keys[h] != -1) h = (h + 1) & static_cast<uint32_t>(cap - 1);
      keys[h] = kv.first;
      values[h] = kv.second;
    }
  }

  void rebuild_boosts(int64_t cap) {
    at::Tensor keys = at::empty({S_, cap}, at::TensorOptions().dtype(at::kInt));
    at::Tensor values = at::empty({S_, cap}, at::TensorOptions().dtype(at::kFloat));
    for (int32_t s = 0; s < S_; ++s)
      fill_row(slots_[s], cap, keys.data_ptr<int32_t>() + s * cap, values.data_ptr<float>() + s * cap);
    boost_keys_ = keys.to(device_);
    boost_values_ = values.to(device_);
  }

  void upload_boost_row(int64_t slot) {
    const int64_t cap = boost_keys_.size(1);
    at::Tensor keys = at::empty({cap}, at::TensorOptions().dtype(at::kInt));
    at::Tensor values = at::empty({cap}, at::TensorOptions().dtype(at::kFloat));
    fill_row(slots_[slot], cap, keys.data_ptr<int32_t>(), values.data_ptr<float>());
    boost_keys_[slot].copy_(keys);
    boost_values_[slot].copy_(values);
  }

  uint64_t read_cursor() const {
    unsigned long long cur = 0;
    check(cudaMemcpyAsync(&cur, wfst::stream::arena_cursor(workspace_.data_ptr(), S_, caps_), sizeof(cur),
                          cudaMemcpyDeviceToHost, stream()),
          "cursor");
    check(cudaStreamSynchronize(stream()), "cursor");
    return cur;
  }

  void maybe_collect(bool force) {
    const uint64_t cur = read_cursor();
    peak_cursor_ = std::max(peak_cursor_, cur);
    if (!force && cur * 2 <= static_cast<uint64_t>(caps_.arena)) return;
    check(wfst::stream::collect(caps_, workspace_.data_ptr(), gc_.data_ptr(), S_, open_dev_.data_ptr<int32_t>(), D_,
                                drain_.data_ptr<int32_t>(), drain_count_.data_ptr<int32_t>(), stream()),
          "collect");
    ++gc_runs_;
    at::Tensor counts = drain_count_.cpu();
    const int32_t* cnt = counts.data_ptr<int32_t>();
    bool any = false;
    for (int32_t s = 0; s < S_; ++s) any = any || cnt[s] > 0;
    if (!any) return;
    at::Tensor arcs = drain_.cpu();
    for (int32_t s = 0; s < S_; ++s) {
      if (!slots_[s].open) continue;
      const int32_t* row = arcs.data_ptr<int32_t>() + static_cast<int64_t>(s) * D_;
      for (int32_t k = 0; k < cnt[s]; ++k) {
        int32_t wb, we;
        wfst::arc_word_range(host_words_, row[k], wb, we);
        for (int32_t j = wb; j < we; ++j) slots_[s].drained.push_back(host_words_.words[j]);
      }
    }
  }

  // Results of the slots `sl` in the CPU class's packed layout: heads, then the words of exactly the right row
  // width; words = drained prefix + the chain's words (a final result without a path has no words at all). No
  // frames on the GPU: -1 each.
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> results(const std::vector<int64_t>& sl,
                                                                                bool final) const {
    const int64_t N = static_cast<int64_t>(sl.size());
    auto i32 = at::TensorOptions().dtype(at::kInt).device(device_);
    at::Tensor head = at::zeros({std::max<int64_t>(N, 1), 5}, i32);
    at::Tensor which_dev = upload(std::vector<int32_t>(sl.begin(), sl.end()));
    check(wfst::stream::heads(g_, caps_, workspace_.data_ptr(), S_, N ? which_dev.data_ptr<int32_t>() : nullptr,
                              static_cast<int32_t>(N), final, head.data_ptr<int32_t>(), stream()),
          "heads");
    at::Tensor head_host = head.cpu();
    const int32_t* hh = head_host.data_ptr<int32_t>();
    int32_t W = 0;
    for (int64_t i = 0; i < N; ++i) W = std::max(W, hh[5 * i + 4]);
    at::Tensor rows_host = at::zeros({N, W}, at::TensorOptions().dtype(at::kInt));
    if (N && W) {
      at::Tensor rows = at::zeros({N, W}, i32);
      check(wfst::stream::words(g_, caps_, workspace_.data_ptr(), S_, static_cast<int32_t>(N), head.data_ptr<int32_t>(), W,
                                rows.data_ptr<int32_t>(), stream()),
            "words");
      rows_host = rows.cpu();
    }
    std::vector<std::vector<int32_t>> words(N);
    auto scores = at::zeros({N}, at::TensorOptions().dtype(at::kDouble));
    auto info = at::zeros({N, 3}, at::TensorOptions().dtype(at::kLong));
    for (int64_t i = 0; i < N; ++i) {
      const int32_t* h = hh + 5 * i;
      const bool has_path = h[2] & wfst::kFlagHasPath;
      float score;
      std::memcpy(&score, &h[1], sizeof(float));
      scores.data_ptr<double>()[i] = has_path ? static_cast<double>(score) : -std::numeric_limits<double>::infinity();
      if (has_path || !final) {
        words[i] = slots_[sl[i]].drained;
        if (has_path) {
          const int32_t* row = rows_host.data_ptr<int32_t>() + i * W;
          words[i].insert(words[i].end(), row, row + h[4]);
        }
      }
      info.data_ptr<int64_t>()[3 * i] = h[3];
      info.data_ptr<int64_t>()[3 * i + 1] = final ? h[2] : (has_path ? wfst::kFlagHasPath : 0);
      info.data_ptr<int64_t>()[3 * i + 2] = slots_[sl[i]].frames;
    }
    auto offsets = at::zeros({N + 1}, at::TensorOptions().dtype(at::kLong));
    int64_t* off = offsets.data_ptr<int64_t>();
    for (int64_t i = 0; i < N; ++i) off[i + 1] = off[i] + static_cast<int64_t>(words[i].size());
    auto w = at::zeros({off[N]}, at::TensorOptions().dtype(at::kInt));
    auto f = at::full({off[N]}, -1, at::TensorOptions().dtype(at::kInt));
    for (int64_t i = 0; i < N; ++i)
      if (!words[i].empty())
        std::memcpy(w.data_ptr<int32_t>() + off[i], words[i].data(), sizeof(int32_t) * words[i].size());
    return {w, f, offsets, scores, info};
  }

  at::Tensor graph_[8];
  at::Tensor word_index_host_, words_host_;
  c10::Device device_{c10::kCUDA, 0};
  wfst::DeviceGraph g_{};
  wfst::DeviceGraph host_words_{};  // g_ with the host copies of the word index and words
  wfst::SearchOptions opt_{};
  wfst::Capacities caps_{};
  int32_t S_ = 0, max_chunk_ = 0, D_ = 0, eps_passes_ = 0, il_max_ = -1, num_sms_ = 0;
  uint64_t peak_cursor_ = 0;
  int64_t gc_runs_ = 0;
  at::Tensor workspace_, gc_, drain_, drain_count_, open_dev_, boost_keys_, boost_values_;
  std::vector<Slot> slots_;
};

}  // namespace beamdec

#if defined(BEAMDEC_WITH_WFST) && defined(BEAMDEC_WITH_CUDA)
TORCH_LIBRARY_FRAGMENT(beamdec, m) {
  m.class_<beamdec::WfstStreamCuda>("WfstStreamCuda")
      .def(torch::init<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                       int64_t, int64_t, double, int64_t, int64_t, bool, double, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t>())
      .def("open", &beamdec::WfstStreamCuda::open)
      .def("close", &beamdec::WfstStreamCuda::close)
      .def("advance", &beamdec::WfstStreamCuda::advance)
      .def("partial", &beamdec::WfstStreamCuda::partial)
      .def("finalize", &beamdec::WfstStreamCuda::finalize)
      .def("stats", &beamdec::WfstStreamCuda::stats)
      .def("max_streams", &beamdec::WfstStreamCuda::max_streams)
      .def("device_bytes", &beamdec::WfstStreamCuda::device_bytes)
      .def("collect", &beamdec::WfstStreamCuda::collect);
}
#endif
