#include "cli/layer_skip_options.h"

#include <fmt/format.h>

#include "cli/number_checks.h"
#include "core/error.h"
#include "engine/layer_skip.h"

namespace nt::cli {
namespace {

// The layers the options choose, from a skip list checked against the model.
std::vector<int32_t> chosen_layers(const LayerSkipOptions& o, const OpenedModel& model) {
  const SkipList list = read_skip_list(o.file);
  check_skip_list_model(list, model_identity(*model.file, model.runner->config().n_layers), o.file);
  return o.count ? skipped_by_count(list, *o.count) : skipped_by_threshold(list, *o.threshold);
}

std::string layer_list(const std::vector<int32_t>& layers) {
  return layers.empty() ? std::string("none") : fmt::format("{}", fmt::join(layers, ", "));
}

}  // namespace

void add_layer_skip_options(CLI::App& cmd, LayerSkipOptions& o) {
  auto* file = cmd.add_option("--layer-skip", o.file,
                              "Layer skip, which is LOSSY (the output changes; off by default): leave out of every "
                              "pass the layers this skip list from calibrate-skip ranks most skippable, as many as "
                              "--layer-skip-count or --layer-skip-threshold choose. With --draft-self, only the draft "
                              "leaves them out, and the output stays exact")
                    ->check(CLI::ExistingFile);
  auto* count = cmd.add_option("--layer-skip-count", o.count, "Layer skip: leave out the N most skippable layers")
                    ->needs(file)
                    ->check(non_negative());
  cmd.add_option("--layer-skip-threshold", o.threshold,
                 "Layer skip: leave out the layers whose input and output have a cosine similarity of at least T")
      ->needs(file)
      ->excludes(count);
}

void check_layer_skip_flags(const LayerSkipOptions& o) {
  if (o.enabled() && !o.count && !o.threshold) fail("--layer-skip needs --layer-skip-count N or --layer-skip-threshold T");
}

void apply_layer_skip(const LayerSkipOptions& o, OpenedModel& model) {
  if (!o.enabled()) return;
  const std::vector<int32_t> skipped = chosen_layers(o, model);
  const int64_t n_layers = model.runner->config().n_layers;
  model.runner->set_default_schedule(schedule_without(skipped, n_layers));
  fmt::print(stderr, "layer skip (lossy): every pass leaves out {} of {} layers: {}\n", skipped.size(), n_layers,
             layer_list(skipped));
}

LayerSchedule layer_skip_draft_schedule(const LayerSkipOptions& o, OpenedModel& model) {
  const std::vector<int32_t> skipped = chosen_layers(o, model);
  const int64_t n_layers = model.runner->config().n_layers;
  if (skipped.empty()) fail("--draft-self with --layer-skip: the skip list chooses no layer to skip, so the draft would be the whole model");
  fmt::print(stderr, "self-draft: the draft leaves out {} of {} layers: {}; every layer verifies\n", skipped.size(),
             n_layers, layer_list(skipped));
  return schedule_without(skipped, n_layers);
}

}  // namespace nt::cli
