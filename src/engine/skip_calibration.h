// Layer-skip calibration: how little each layer changes the residual stream
// over a text. A layer whose output is nearly its input (cosine similarity
// near 1) costs the least to leave out (engine/layer_skip.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/model_runner.h"

namespace nt {

struct LayerSimilarity {
  std::vector<double> similarity;  // per layer: the mean over tokens of cos(layer input, layer output)
  int64_t tokens = 0;              // tokens each mean is over
  int64_t windows = 0;
};

// Runs every layer over the text as engine/calibration_windows.h cuts it.
LayerSimilarity measure_layer_similarity(ModelRunner& runner, std::span<const int32_t> tokens, int64_t n_ctx,
                                         int32_t bos, int64_t max_windows,
                                         const std::function<void(int64_t, int64_t)>& on_window);

}  // namespace nt
