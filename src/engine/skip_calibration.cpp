#include "engine/skip_calibration.h"

#include <algorithm>
#include <cmath>

#include "core/align.h"
#include "core/error.h"

namespace nt {
namespace {

// Sums each layer's per-token cosine similarities.
class SimilarityObserver final : public LayerObserver {
 public:
  SimilarityObserver(int64_t n_layers, int64_t dim) : sums_(size_t(n_layers), 0.0), dim_(size_t(dim)) {}

  void observe(int32_t layer, std::span<const float> input, std::span<const float> output) override {
    for (size_t row = 0; row < input.size(); row += dim_) {
      double dot = 0, in_sq = 0, out_sq = 0;
      for (size_t i = row; i < row + dim_; ++i) {
        dot += double(input[i]) * double(output[i]);
        in_sq += double(input[i]) * double(input[i]);
        out_sq += double(output[i]) * double(output[i]);
      }
      // A zero vector has no direction: it counts as dissimilar.
      sums_[size_t(layer)] += in_sq > 0 && out_sq > 0 ? dot / std::sqrt(in_sq * out_sq) : 0.0;
    }
  }

  const std::vector<double>& sums() const { return sums_; }

 private:
  std::vector<double> sums_;
  size_t dim_;
};

}  // namespace

LayerSimilarity measure_layer_similarity(ModelRunner& runner, std::span<const int32_t> tokens, int64_t n_ctx,
                                         int32_t bos, int64_t max_windows,
                                         const std::function<void(int64_t, int64_t)>& on_window) {
  if (tokens.empty()) fail("layer-skip calibration: the text has no tokens");
  if (n_ctx < 1 || n_ctx > runner.context_size()) {
    fail("layer-skip calibration: a window of {} tokens does not fit the runner's context of {}", n_ctx,
         runner.context_size());
  }
  if (max_windows < 0) fail("layer-skip calibration: {} windows asked for; 0 means all", max_windows);
  const int64_t n = int64_t(tokens.size());
  int64_t windows = ceil_div(n, n_ctx);
  if (max_windows > 0) windows = std::min(windows, max_windows);

  const ModelSpec& c = runner.config();
  SimilarityObserver observer(c.n_layers, c.dim);
  Batch batch;
  BatchOutputs out;
  LayerSimilarity result;
  for (int64_t w = 0; w < windows; ++w) {
    const auto window = tokens.subspan(size_t(w * n_ctx), size_t(std::min(n_ctx, n - w * n_ctx)));
    batch.clear();
    batch.add_run(window, 0, 0, Output::None);
    if (bos >= 0) batch.entries[0].token = bos;
    runner.forward_observed(batch, out, LayerSchedule::all(), observer);
    result.tokens += int64_t(window.size());
    on_window(w + 1, windows);
  }
  runner.seq_truncate(0, 0);
  result.windows = windows;
  for (const double sum : observer.sums()) result.similarity.push_back(sum / double(result.tokens));
  return result;
}

}  // namespace nt
