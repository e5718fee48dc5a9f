#include "engine/expert_calibration.h"

#include "core/error.h"
#include "core/output_file.h"
#include "engine/calibration_windows.h"

namespace nt {
namespace {

constexpr const char* kFormat = "ntransformer expert-routing counts";
constexpr int kVersion = 1;

class RoutingObserver final : public LayerObserver {
 public:
  RoutingObserver(int64_t layers, int64_t experts) : counts_(size_t(layers), std::vector<uint64_t>(size_t(experts), 0)) {}

  void observe(int32_t, std::span<const float>, std::span<const float>) override {}
  void observe_experts(int32_t layer, std::span<const int32_t> chosen, int64_t) override {
    for (const int32_t e : chosen) ++counts_[size_t(layer)][size_t(e)];
    routed_ = true;
  }

  std::vector<std::vector<uint64_t>> counts() const { return counts_; }
  bool routed() const { return routed_; }

 private:
  std::vector<std::vector<uint64_t>> counts_;
  bool routed_ = false;
};

}  // namespace

std::vector<uint64_t> ExpertCounts::flat() const {
  std::vector<uint64_t> all;
  for (const auto& layer : counts) all.insert(all.end(), layer.begin(), layer.end());
  return all;
}

ExpertCounts count_expert_routing(ModelRunner& runner, ModelIdentity model, std::span<const int32_t> tokens, int64_t n_ctx,
                                  int32_t bos, int64_t max_windows, std::string text,
                                  const std::function<void(int64_t, int64_t)>& on_window) {
  const ModelSpec& c = runner.config();
  if (!c.has_experts()) fail("expert calibration: '{}' has no mixture of experts", model.file);
  const int64_t experts = c.widest_experts().n_experts;
  RoutingObserver observer(c.n_layers, experts);
  const CalibrationText run = observe_text(runner, tokens, n_ctx, bos, max_windows, observer, on_window, "expert calibration");
  if (!observer.routed()) fail("expert calibration: the {} backend does not report its routing; use --device cpu", runner.description());
  ExpertCounts counts;
  counts.model = std::move(model);
  counts.experts = experts;
  counts.counts = observer.counts();
  counts.text = std::move(text);
  counts.context = n_ctx;
  counts.tokens = run.tokens;
  counts.windows = run.windows;
  return counts;
}

void write_expert_counts(const ExpertCounts& counts, const std::string& path) {
  const nlohmann::json json = {
      {"format", kFormat},
      {"version", kVersion},
      {"model", identity_json(counts.model)},
      {"calibration", {{"text", counts.text}, {"context", counts.context}, {"tokens", counts.tokens}, {"windows", counts.windows}}},
      {"experts_per_layer", counts.experts},
      {"counts", counts.counts},
  };
  write_file_atomically(path, "the expert counts", json.dump(1) + "\n");
}

ExpertCounts read_expert_counts(const std::string& path) {
  const nlohmann::json json = read_calibration_json(path, kFormat, kVersion, "expert-counts", "calibrate-experts");
  ExpertCounts c;
  c.model = read_identity(json, path);
  c.text = json_field<std::string>(json, "calibration/text", path);
  c.context = json_field<int64_t>(json, "calibration/context", path);
  c.tokens = json_field<int64_t>(json, "calibration/tokens", path);
  c.windows = json_field<int64_t>(json, "calibration/windows", path);
  c.experts = json_field<int64_t>(json, "experts_per_layer", path);
  c.counts = json_field<std::vector<std::vector<uint64_t>>>(json, "counts", path);
  if (c.experts < 1) fail("{}: 'experts_per_layer' is {}; a mixture has at least one expert", path, c.experts);
  if (int64_t(c.counts.size()) != c.model.layers) {
    fail("{}: 'counts' has {} layers for the {} of 'model/layers'", path, c.counts.size(), c.model.layers);
  }
  for (size_t l = 0; l < c.counts.size(); ++l) {
    if (int64_t(c.counts[l].size()) != c.experts) {
      fail("{}: 'counts' layer {} has {} experts, not the {} of 'experts_per_layer'", path, l, c.counts[l].size(), c.experts);
    }
  }
  return c;
}

ExpertCounts read_expert_counts_for(const std::string& path, const ModelIdentity& model, int64_t experts_per_layer) {
  ExpertCounts c = read_expert_counts(path);
  check_calibrated_on(c.model, model, path, "calibrate-experts");
  if (c.experts != experts_per_layer) {
    fail("{}: counts {} experts a layer, but '{}' has {}", path, c.experts, model.file, experts_per_layer);
  }
  return c;
}

}  // namespace nt
