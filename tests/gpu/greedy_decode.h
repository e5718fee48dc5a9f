// Greedy decoding as generation runs it, for the GPU tests that compare
// other paths against it.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_runner.h"

namespace nt::test {

// The prompt's pick, then decode_greedy feeding each pick back on the device.
inline std::vector<int32_t> greedy_decode(ModelRunner& runner, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out = {runner.forward_greedy(prompt, 0)};
  runner.decode_greedy(out[0], int64_t(prompt.size()), n - 1, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  return out;
}

}  // namespace nt::test
