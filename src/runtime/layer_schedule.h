// Which layers a forward pass runs, in order: all of them, a skip list, or
// the first N for a self-speculative draft. A streamed layer the schedule
// leaves out is not transferred.
#pragma once

#include <cstdint>
#include <vector>

namespace nt {

struct LayerSchedule {
  std::vector<int32_t> layers;  // empty: every layer in order

  static LayerSchedule all() { return {}; }
  bool runs_all() const { return layers.empty(); }
};

// The layers `schedule` runs in a model of n_layers, checked: each in range,
// strictly increasing (a layer's KV cache is written by it alone).
std::vector<int32_t> scheduled_layers(const LayerSchedule& schedule, int64_t n_layers);

}  // namespace nt
