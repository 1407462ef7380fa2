// Argument checks shared by every op of the extension.
//
// Messages are built from strings only: numbers are formatted with std::to_string and concatenated, never
// streamed through c10::str / std::ostringstream. On the H200 host (torch 2.11+cu130, extension built there)
// a TORCH_CHECK whose message streamed an integer killed the process with SIGSEGV, while string-only
// messages raised cleanly (diagnosed by ctc_debug_raise, see ctc_ops.h and
// tests/test_ctc_gpu.py::test_gpu_error_path_matrix). Use these macros instead of TORCH_CHECK with values.
#pragma once
#include <torch/types.h>

#include <string>
#include <type_traits>

namespace beamdec::msg {

inline std::string s(const std::string& v) { return v; }
inline std::string s(const char* v) { return v; }
inline std::string s(at::ScalarType t) { return std::string(c10::toString(t)); }
inline std::string s(const c10::Device& d) { return d.str(); }
inline std::string s(const at::IntArrayRef& v) {
  std::string out = "(";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + ")";
}
template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
inline std::string s(T v) {
  return std::to_string(v);
}

template <typename... Ts>
inline std::string concat(const Ts&... parts) {
  std::string out;
  ((out += s(parts)), ...);
  return out;
}

}  // namespace beamdec::msg

// Throws c10::Error (Python RuntimeError) / c10::ValueError (Python ValueError) from the calling frame; the
// message parts are only evaluated when the check fails.
#define BEAMDEC_CHECK(cond, ...)                                               \
  do {                                                                         \
    if (C10_UNLIKELY(!(cond))) {                                               \
      const std::string beamdec_check_msg_ = ::beamdec::msg::concat(__VA_ARGS__); \
      TORCH_CHECK(false, beamdec_check_msg_);                                  \
    }                                                                          \
  } while (0)

#define BEAMDEC_CHECK_VALUE(cond, ...)                                         \
  do {                                                                         \
    if (C10_UNLIKELY(!(cond))) {                                               \
      const std::string beamdec_check_msg_ = ::beamdec::msg::concat(__VA_ARGS__); \
      TORCH_CHECK_VALUE(false, beamdec_check_msg_);                            \
    }                                                                          \
  } while (0)
