#include "engine/step_drafter.h"

#include <algorithm>
#include <cmath>
#include <queue>

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
  last_context_.clear();  // a chain teaches the tree's calibration nothing
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

void StepDrafter::likeliest(std::span<float> logits, int64_t width, TokenDistribution& out) {
  out.clear();
  if (!greedy_) {
    sampler_.distribution(logits, out);
  } else {
    // The softmax over the whole row: a top candidate's share is what says how sure the draft is.
    top_.assign(logits, std::min<int64_t>(width, int64_t(logits.size()) - 1));
    const float max = top_.view().front().logit;
    double total = 0.0;
    for (const float l : logits) total += std::exp(double(l) - max);
    for (const Candidate& c : top_.view()) out.push_back({c.id, std::exp(double(c.logit) - max) / total});
  }
  const size_t keep = std::min(out.size(), size_t(width));
  const auto likelier = [](const TokenProbability& a, const TokenProbability& b) {
    return a.p > b.p || (a.p == b.p && a.id < b.id);
  };
  std::partial_sort(out.begin(), out.begin() + ptrdiff_t(keep), out.end(), likelier);
  out.resize(keep);
}

std::span<float> StepDrafter::run_path(const DraftTree& tree, int32_t node, int64_t base) {
  path_.clear();
  for (int32_t n = node; n >= 0; n = tree.parents[size_t(n)]) path_.push_back(n);
  std::reverse(path_.begin(), path_.end());
  // The cache keeps the path it shares with the one it holds.
  const auto [differs, unused] = std::mismatch(path_.begin(), path_.end(), cached_nodes_.begin(), cached_nodes_.end());
  const size_t shared = size_t(differs - path_.begin());
  batch_.clear();
  for (size_t i = shared; i < path_.size(); ++i) {
    batch_.add(tree.tokens[size_t(path_[i])], base + int64_t(i), seq_, i + 1 == path_.size() ? Output::Logits : Output::None);
  }
  runner_.forward(batch_, out_, schedule_);
  cached_nodes_ = path_;
  cached_tokens_.clear();
  for (const int32_t n : path_) cached_tokens_.push_back(tree.tokens[size_t(n)]);
  return out_.logits;
}

void StepDrafter::learn(std::span<const int32_t> context) {
  const size_t known = last_context_.size();
  if (known == 0 || context.size() <= known || !std::equal(last_context_.begin(), last_context_.end(), context.begin())) {
    return;
  }
  // Down the path the target took: at each node that offered candidates, which one it kept.
  int32_t node = -1;
  for (size_t i = known; i < context.size() && !offered_[size_t(node + 1)].empty(); ++i) {
    const TokenDistribution& offered = offered_[size_t(node + 1)];
    for (size_t k = 0; k < offered.size(); ++k) calibration_.record(offered[k].p, k == 0, offered[k].id == context[i]);
    node = last_tree_.child(node, context[i]);
    if (node < 0) break;
  }
}

void StepDrafter::draft_tree(std::span<const int32_t> context, int64_t from, int64_t max_depth, int64_t max_nodes,
                             DraftTree& tree) {
  learn(context);
  tree.clear();
  distributions_.clear();
  cached_nodes_.clear();
  cached_tokens_.clear();
  last_context_.clear();
  if (max_depth <= 0 || max_nodes <= 0) return;
  if (from < 0 || from >= int64_t(context.size())) fail("a draft continues at least one token");
  struct Branch {
    double likelihood;
    int32_t parent, token;
    int64_t depth, order;  // ties go to the shallower, then the earlier found
    bool operator<(const Branch& o) const {
      if (likelihood != o.likelihood) return likelihood < o.likelihood;
      return depth != o.depth ? depth > o.depth : order > o.order;
    }
  };
  std::priority_queue<Branch> candidates;
  int64_t found = 0;
  offered_.assign(1, {});
  const auto offer = [&](std::span<float> row, int32_t parent, double likelihood, int64_t depth) {
    TokenDistribution& next = offered_[size_t(parent + 1)];
    likeliest(row, kBranching, next);
    for (size_t k = 0; k < next.size(); ++k) {
      candidates.push({likelihood * calibration_.acceptance(next[k].p, k == 0), parent, next[k].id, depth, found++});
    }
  };
  batch_.clear();
  batch_.add_run(context.subspan(size_t(from)), from, seq_, Output::Logits);
  runner_.forward(batch_, out_, schedule_);
  offer(out_.logits, -1, 1.0, 1);
  const int64_t base = int64_t(context.size());
  // Children are never likelier than their parent: the pops come likeliest
  // first, and each node is added after its parent.
  for (int64_t runs = 1; int64_t(tree.size()) < max_nodes && !candidates.empty();) {
    const Branch c = candidates.top();
    candidates.pop();
    const int32_t node = tree.add(c.token, c.parent);
    offered_.emplace_back();
    if (runs < max_depth && c.depth < max_depth) {
      offer(run_path(tree, node, base), node, c.likelihood, c.depth + 1);
      ++runs;
    }
  }
  last_tree_ = tree;
  last_context_.assign(context.begin(), context.end());
}

}  // namespace nt
