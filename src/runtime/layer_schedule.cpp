#include "runtime/layer_schedule.h"

#include "core/error.h"

namespace nt {

std::vector<int32_t> scheduled_layers(const LayerSchedule& schedule, int64_t n_layers) {
  if (schedule.runs_all()) {
    std::vector<int32_t> every(static_cast<size_t>(n_layers));
    for (int64_t l = 0; l < n_layers; ++l) every[size_t(l)] = int32_t(l);
    return every;
  }
  for (size_t i = 0; i < schedule.layers.size(); ++i) {
    const int32_t l = schedule.layers[i];
    if (l < 0 || l >= n_layers) fail("layer schedule: layer {} is outside the model's {} layers", l, n_layers);
    if (i > 0 && l <= schedule.layers[i - 1]) {
      fail("layer schedule: layer {} follows layer {}; layers run in increasing order", l, schedule.layers[i - 1]);
    }
  }
  return schedule.layers;
}

}  // namespace nt
