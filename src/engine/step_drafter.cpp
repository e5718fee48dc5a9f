#include "engine/step_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace nt {

SamplingParams draft_sampling(const SamplingParams& target) {
  SamplingParams p = target;
  p.repeat_penalty = 1.0f;
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.0f;
  p.seed = target.seed ^ 0x9e3779b97f4a7c15ull;  // any fixed change: the draft's draws must not be the target's
  return p;
}

StepDrafter::StepDrafter(ModelRunner& runner, SeqId seq, LayerSchedule schedule, const SamplingParams& params)
    : runner_(runner),
      seq_(seq),
      schedule_(std::move(schedule)),
      sampler_(params, runner.config().vocab_size),
      greedy_(sampler_.picks_highest_logit()) {}

void StepDrafter::draft(std::span<const int32_t> tokens, int64_t pos, int64_t max, std::vector<int32_t>& draft) {
  distributions_.resize(greedy_ ? 0 : size_t(std::max<int64_t>(max, 0)));
  if (max > 0 && tokens.empty()) fail("a draft continues at least one token");
  const Output output = greedy_ ? Output::Argmax : Output::Logits;
  for (int64_t i = 0; i < max; ++i) {
    batch_.clear();
    batch_.add_run(tokens, pos, seq_, output);
    runner_.forward(batch_, out_, schedule_);
    pos += int64_t(tokens.size());
    int32_t pick;
    if (greedy_) {
      pick = out_.argmax[0];
    } else {
      TokenDistribution& q = distributions_[size_t(i)];
      sampler_.distribution(out_.logits, q);
      pick = draw_from(q, sampler_.next_uniform());
    }
    draft.push_back(pick);
    tokens = {&draft.back(), 1};
  }
}

}  // namespace nt
