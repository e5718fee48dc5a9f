#include "engine/self_draft.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace nt {

int64_t default_self_draft_layers(int64_t n_layers) { return std::max<int64_t>(1, n_layers / 2); }

SelfDraft::SelfDraft(ModelRunner& runner, SeqId seq, int64_t layers) : runner_(runner), seq_(seq) {
  const int64_t n_layers = runner.config().n_layers;
  // All the layers would be the target itself, at the price of a second pass.
  if (layers < 1 || layers >= n_layers) {
    fail("a self-speculative draft of {} layers: the model has {}, so use 1 to {}", layers, n_layers, n_layers - 1);
  }
  schedule_.layers.resize(size_t(layers));
  std::iota(schedule_.layers.begin(), schedule_.layers.end(), 0);
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
