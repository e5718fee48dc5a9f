// Division rounded up and rounding to whole multiples: GGUF data offsets,
// O_DIRECT read ranges, pinned pages, KV tiles and pages, and the tiles,
// chunks and splits work is cut into. C++17: CUDA sources include it.
#pragma once

#include <type_traits>

namespace nt {

// Integer T, taken from the first argument; the second converts to it.
template <typename T>
using Integer = std::enable_if_t<std::is_integral_v<T>, T>;

// PRECOND: x >= 0, d > 0 (and x + d - 1 representable).
template <typename T>
constexpr T ceil_div(T x, Integer<T> d) {
  return (x + d - 1) / d;
}
template <typename T>
constexpr T align_up(T x, Integer<T> a) {
  return ceil_div(x, a) * a;
}
template <typename T>
constexpr T align_down(T x, Integer<T> a) {
  return x / a * a;
}

}  // namespace nt
