// The text a calibration runs through the model, cut as perplexity cuts it:
// windows of n_ctx tokens from position 0, each starting with `bos` when it
// is >= 0, the last window taking the rest however short; at most
// max_windows windows (0: all). Every layer of every window is reported to
// the observer; on_window(done, total) reports progress after each.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "runtime/model_runner.h"

namespace nt {

struct CalibrationText {
  int64_t tokens = 0;  // tokens run
  int64_t windows = 0;
};

// Errors name `what` ("layer-skip calibration").
CalibrationText observe_text(ModelRunner& runner, std::span<const int32_t> tokens, int64_t n_ctx, int32_t bos,
                             int64_t max_windows, LayerObserver& observer,
                             const std::function<void(int64_t, int64_t)>& on_window, const std::string& what);

}  // namespace nt
