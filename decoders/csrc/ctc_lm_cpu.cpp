// CPU implementation of ctc_lm_decode: the kernel's decode_row (ctc_lm_kernels.cuh) run with a sequential block
// policy, rows one after another; plus the argument checks both backends share.
#include <torch/types.h>

#include <string>
#include <vector>

#include "ctc_lm_ops.h"

namespace beamdec {

namespace {

using msg::s;

struct CpuBlock {
  bool reverse = false;
  template <class F>
  void for_each(int n, F&& f) {
    if (reverse) {
      for (int i = n - 1; i >= 0; --i) f(i);
    } else {
      for (int i = 0; i < n; ++i) f(i);
    }
  }
  template <class F>
  void single(F&& f) {
    f();
  }
  void sync() {}
  int atomic_add(int32_t* p, int v) {
    const int old = *p;
    *p += v;
    return old;
  }
};

void check_table(const at::Tensor& t, const char* name, at::ScalarType dtype, const at::Tensor& like, int64_t n) {
  BEAMDEC_CHECK_VALUE(t.scalar_type() == dtype, name, " must be ", s(dtype), ", got ", s(t.scalar_type()));
  BEAMDEC_CHECK_VALUE(t.dim() == 1 && t.is_contiguous(), name, " must be a contiguous 1-D tensor");
  BEAMDEC_CHECK_VALUE(t.device() == like.device(), name, " must be on ", s(like.device()), ", got ",
                      s(t.device()));
  if (n >= 0) BEAMDEC_CHECK_VALUE(t.numel() == n, name, " must have ", s(n), " entries, got ", s(t.numel()));
}

ctclm::ChainCsr chain(const at::Tensor& row_ptr, const at::Tensor& label, const at::Tensor* weight,
                      const at::Tensor& dest, const at::Tensor& fallback, const at::Tensor* fallback_w,
                      const at::Tensor& like, const char* what) {
  const std::string w(what);
  check_table(row_ptr, (w + "_row_ptr").c_str(), at::kInt, like, -1);
  BEAMDEC_CHECK_VALUE(row_ptr.numel() >= 2, w, "_row_ptr must have num_states + 1 >= 2 entries");
  const int64_t S = row_ptr.numel() - 1, A = label.numel();
  check_table(label, (w + "_label").c_str(), at::kInt, like, -1);
  check_table(dest, (w + "_dest").c_str(), at::kInt, like, A);
  check_table(fallback, (w + "_fallback").c_str(), at::kInt, like, S);
  ctclm::ChainCsr c;
  c.row_ptr = row_ptr.data_ptr<int32_t>();
  c.label = label.data_ptr<int32_t>();
  c.dest = dest.data_ptr<int32_t>();
  c.fallback = fallback.data_ptr<int32_t>();
  if (weight) {
    check_table(*weight, (w + "_weight").c_str(), at::kFloat, like, A);
    c.weight = weight->data_ptr<float>();
  }
  if (fallback_w) {
    check_table(*fallback_w, (w + "_fallback_w").c_str(), at::kFloat, like, S);
    c.fallback_w = fallback_w->data_ptr<float>();
  }
  return c;
}

}  // namespace

ctclm::Params ctc_lm_make_params(CTC_LM_DECODE_ARGS) {
  BEAMDEC_CHECK_VALUE(log_probs.dim() == 3, "log_probs must be (B, T, V), got ", s(log_probs.sizes()));
  BEAMDEC_CHECK_VALUE(log_probs.scalar_type() == at::kFloat && log_probs.is_contiguous(),
                      "log_probs must be contiguous float32, got ", s(log_probs.scalar_type()));
  const int64_t B = log_probs.size(0), T = log_probs.size(1), V = log_probs.size(2);
  BEAMDEC_CHECK_VALUE(V >= 1 && V < ctclm::kMaxVocab, "V must be in [1, ", s(ctclm::kMaxVocab), "), got ", s(V));
  BEAMDEC_CHECK_VALUE(T < (int64_t(1) << 31) && B < (int64_t(1) << 31), "log_probs too large");
  BEAMDEC_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) == B && lengths.scalar_type() == at::kLong &&
                          lengths.is_contiguous() && lengths.device() == log_probs.device(),
                      "lengths must be a contiguous int64 (B,) tensor on the log_probs' device");
  BEAMDEC_CHECK_VALUE(beam >= 1 && beam <= ctclm::kMaxBeam, "beam must be in [1, ", s(ctclm::kMaxBeam), "], got ",
                      s(beam));
  BEAMDEC_CHECK_VALUE(beam * V + beam < (int64_t(1) << 31), "beam x V too large");
  BEAMDEC_CHECK_VALUE(blank >= 0 && blank < V, "blank must be in [0, V), got ", s(blank));
  BEAMDEC_CHECK_VALUE(nbest >= 1 && nbest <= beam, "nbest must be in [1, beam], got ", s(nbest));
  BEAMDEC_CHECK_VALUE(skip_mode >= 0 && skip_mode <= 2, "skip_mode must be 0, 1 or 2, got ", s(skip_mode));
  BEAMDEC_CHECK_VALUE(block_threads >= 0 && block_threads <= 1024 && block_threads % 32 == 0,
                      "block_threads must be 0 or a multiple of 32 up to 1024, got ", s(block_threads));
  ctclm::Params p;
  p.log_probs = log_probs.data_ptr<float>();
  p.lengths = lengths.data_ptr<int64_t>();
  p.B = (int)B;
  p.T = (int)T;
  p.V = (int)V;
  p.blank = (int)blank;
  p.beam = (int)beam;
  p.nbest = (int)nbest;
  p.skip_mode = (int)skip_mode;
  p.log_thr = (float)log_thr;
  p.bonus = (float)bonus;
  p.use_lm = lm_row_ptr.numel() > 0 ? 1 : 0;
  p.lm_eos = lm_eos ? 1 : 0;
  p.lm_weight = (float)lm_weight_value;
  if (p.use_lm) {
    p.lm = chain(lm_row_ptr, lm_label, &lm_weight, lm_dest, lm_fallback, &lm_fallback_w, log_probs, "lm");
    check_table(col_label, "col_label", at::kInt, log_probs, V);
    p.col_label = col_label.data_ptr<int32_t>();
    const int64_t S = lm_row_ptr.numel() - 1;
    BEAMDEC_CHECK_VALUE(bos_state >= 0 && bos_state < S, "bos_state must be an LM state, got ", s(bos_state));
    BEAMDEC_CHECK_VALUE(eos_label >= 0, "eos_label must be >= 0, got ", s(eos_label));
    p.bos_state = (int)bos_state;
    p.eos_label = (int)eos_label;
  }
  p.use_boost = boost_row_ptr.numel() > 0 ? 1 : 0;
  if (p.use_boost) {
    p.boost = chain(boost_row_ptr, boost_label, nullptr, boost_dest, boost_fallback, nullptr, log_probs, "boost");
    const int64_t S = boost_row_ptr.numel() - 1;
    check_table(boost_credit, "boost_credit", at::kFloat, log_probs, S);
    check_table(boost_out, "boost_out", at::kFloat, log_probs, S);
    check_table(boost_roots, "boost_roots", at::kInt, log_probs, B);
    p.credit = boost_credit.data_ptr<float>();
    p.out = boost_out.data_ptr<float>();
    p.roots = boost_roots.data_ptr<int32_t>();
  }
  return p;
}

CtcLmOutputs ctc_lm_decode_cpu(CTC_LM_DECODE_ARGS) {
  ctclm::Params p = ctc_lm_make_params(CTC_LM_DECODE_CALL);
  const int64_t B = p.B, Tcap = p.T > 0 ? p.T : 1;
  auto i32 = log_probs.options().dtype(at::kInt);
  at::Tensor tokens = at::zeros({B, nbest, Tcap}, i32);
  at::Tensor lens = at::zeros({B, nbest}, i32);
  at::Tensor scores = at::empty({B, nbest}, log_probs.options());
  at::Tensor backptr = at::empty({B, Tcap, beam}, i32);
  p.backptr = backptr.data_ptr<int32_t>();
  p.out_tokens = tokens.data_ptr<int32_t>();
  p.out_len = lens.data_ptr<int32_t>();
  p.out_scores = scores.data_ptr<float>();
  const int64_t N = ctclm::candidate_count(p.beam, p.V);
  ctclm::Shared sh;
  std::vector<char> smem(ctclm::carve_shared(nullptr, p.beam, N, sh) + 16);
  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem.data()) + 15) & ~uintptr_t(15));
  ctclm::carve_shared(base, p.beam, N, sh);
  CpuBlock blk;
  blk.reverse = reverse_items;
  for (int row = 0; row < p.B; ++row) ctclm::decode_row(p, row, blk, sh);
  return {tokens, lens, scores};
}

}  // namespace beamdec
