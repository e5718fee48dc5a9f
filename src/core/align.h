// Rounding to whole multiples of an alignment: GGUF data offsets, O_DIRECT
// read ranges, pinned pages.
#pragma once

#include <cstdint>

namespace nt {

// PRECOND: a > 0.
constexpr uint64_t align_down(uint64_t x, uint64_t a) { return x / a * a; }
constexpr uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace nt
