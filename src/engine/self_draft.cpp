#include "engine/self_draft.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace nt {

int64_t default_self_draft_layers(int64_t n_layers) { return std::max<int64_t>(1, n_layers / 2); }

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

}  // namespace

SelfDraft::SelfDraft(ModelRunner& runner, SeqId seq, int64_t layers)
    : SelfDraft(runner, seq, first_layers(layers, runner.config().n_layers)) {}

SelfDraft::SelfDraft(ModelRunner& runner, SeqId seq, LayerSchedule schedule)
    : runner_(runner), seq_(seq), schedule_(std::move(schedule)) {
  const int64_t n_layers = runner.config().n_layers;
  check_draft_layers(int64_t(scheduled_layers(schedule_, n_layers).size()), n_layers);
}

void SelfDraft::propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) {
  int32_t token = context.back();
  const int64_t pos = int64_t(context.size()) - 1;
  for (int64_t i = 0; i < max; ++i) {
    batch_.clear();
    batch_.add(token, pos + i, seq_, Output::Argmax);
    runner_.forward(batch_, out_, schedule_);
    token = out_.argmax[0];
    draft.push_back(token);
  }
}

}  // namespace nt
