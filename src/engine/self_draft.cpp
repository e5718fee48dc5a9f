#include "engine/self_draft.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace nt {
namespace {

// All the layers would be the target itself, at the price of a second pass.
void check_draft_layers(int64_t layers, int64_t n_layers) {
  if (layers < 1 || layers >= n_layers) {
    fail("a self-speculative draft of {} layers: the model has {}, so use 1 to {}", layers, n_layers, n_layers - 1);
  }
}

LayerSchedule first_layers(int64_t layers, int64_t n_layers) {
  check_draft_layers(layers, n_layers);
  LayerSchedule schedule;
  schedule.layers.resize(size_t(layers));
  std::iota(schedule.layers.begin(), schedule.layers.end(), 0);
  return schedule;
}

LayerSchedule checked(LayerSchedule schedule, int64_t n_layers) {
  check_draft_layers(int64_t(scheduled_layers(schedule, n_layers).size()), n_layers);
  return schedule;
}

}  // namespace

int64_t default_self_draft_layers(int64_t n_layers) { return std::max<int64_t>(1, n_layers / 2); }

SelfDraft::SelfDraft(ModelRunner& runner, SeqId seq, int64_t layers, const SamplingParams& params)
    : drafter_(runner, seq, first_layers(layers, runner.config().n_layers), params) {}

SelfDraft::SelfDraft(ModelRunner& runner, SeqId seq, LayerSchedule schedule, const SamplingParams& params)
    : drafter_(runner, seq, checked(std::move(schedule), runner.config().n_layers), params) {}

void SelfDraft::propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) {
  // The context's last token is the one about to be verified: not cached yet.
  drafter_.draft(context.last(1), int64_t(context.size()) - 1, max, draft);
}

void SelfDraft::propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) {
  drafter_.draft_tree(context, int64_t(context.size()) - 1, max_depth, max_nodes, tree);
}

}  // namespace nt
