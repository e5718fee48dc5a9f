#include "engine/calibration_windows.h"

#include <algorithm>

#include "core/align.h"
#include "core/error.h"

namespace nt {

CalibrationText observe_text(ModelRunner& runner, std::span<const int32_t> tokens, int64_t n_ctx, int32_t bos,
                             int64_t max_windows, LayerObserver& observer,
                             const std::function<void(int64_t, int64_t)>& on_window, const std::string& what) {
  if (tokens.empty()) fail("{}: the text has no tokens", what);
  if (n_ctx < 1 || n_ctx > runner.context_size()) {
    fail("{}: a window of {} tokens does not fit the runner's context of {}", what, n_ctx, runner.context_size());
  }
  if (max_windows < 0) fail("{}: {} windows asked for; 0 means all", what, max_windows);
  const int64_t n = int64_t(tokens.size());
  int64_t windows = ceil_div(n, n_ctx);
  if (max_windows > 0) windows = std::min(windows, max_windows);
  Batch batch;
  BatchOutputs out;
  CalibrationText text;
  for (int64_t w = 0; w < windows; ++w) {
    const auto window = tokens.subspan(size_t(w * n_ctx), size_t(std::min(n_ctx, n - w * n_ctx)));
    batch.clear();
    batch.add_run(window, 0, 0, Output::None);
    if (bos >= 0) batch.entries[0].token = bos;
    runner.forward_observed(batch, out, LayerSchedule::all(), observer);
    text.tokens += int64_t(window.size());
    on_window(w + 1, windows);
  }
  runner.seq_truncate(0, 0);
  text.windows = windows;
  return text;
}

}  // namespace nt
