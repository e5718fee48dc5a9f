#include "engine/skip_calibration.h"

#include <algorithm>
#include <cmath>

#include "engine/calibration_windows.h"

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
  const ModelSpec& c = runner.config();
  SimilarityObserver observer(c.n_layers, c.dim);
  const CalibrationText text =
      observe_text(runner, tokens, n_ctx, bos, max_windows, observer, on_window, "layer-skip calibration");
  LayerSimilarity result;
  result.tokens = text.tokens;
  result.windows = text.windows;
  for (const double sum : observer.sums()) result.similarity.push_back(sum / double(result.tokens));
  return result;
}

}  // namespace nt
