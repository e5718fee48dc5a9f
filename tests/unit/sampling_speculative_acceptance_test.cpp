// Speculative rejection sampling at one position: whatever distribution q the
// draft drew its token from (or none: a deterministic draft), the token kept
// (the draft's when keeps_draft, else a draw from what reject_draft leaves)
// is distributed as the target's p, and so is the token kept from several
// candidates judged in turn (a token tree's children). Chi-square against p, derived here from the logits in
// float64, over many draws with fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "sampling/speculative_acceptance.h"
#include "sampling_test_util.h"

namespace nt {
namespace {

using test::chain_probabilities;
using test::chi_square;
using test::chi_square_bound;
using test::random_logits;

TokenDistribution sparse(const std::vector<double>& probs) {
  TokenDistribution d;
  for (size_t id = 0; id < probs.size(); ++id) {
    if (probs[id] > 0.0) d.push_back({int32_t(id), probs[id]});
  }
  return d;
}

double uniform(std::mt19937_64& rng) { return uniform_from_bits(rng()); }

struct Outcome {
  std::vector<int64_t> counts;
  int64_t kept = 0;  // draws that kept the drafted token
};

// n verifications of a draft from q (empty: always `fixed`) against p.
Outcome verify_many(const TokenDistribution& p, const TokenDistribution& q, int32_t fixed, size_t vocab, int64_t n,
                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  RejectionScratch scratch;
  Outcome o;
  o.counts.assign(vocab, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t x = q.empty() ? fixed : draw_from(q, uniform(rng));
    int32_t token = x;
    if (keeps_draft(p, q, x, uniform(rng))) {
      ++o.kept;
    } else {
      TokenDistribution residual = p;
      reject_draft(residual, q, x, scratch);
      token = draw_from(residual, uniform(rng));
    }
    ++o.counts.at(size_t(token));
  }
  return o;
}

void expect_distributed_as(const Outcome& o, const std::vector<double>& probs, int64_t n, const std::string& what) {
  for (size_t id = 0; id < probs.size(); ++id) {
    if (probs[id] == 0.0) {
      EXPECT_EQ(o.counts[id], 0) << what << ": token " << id << " is outside p";
    }
  }
  const auto [stat, df] = chi_square(o.counts, probs, n);
  ASSERT_GT(df, 0) << what;
  EXPECT_LT(stat, chi_square_bound(df)) << what << ", df " << df;
}

constexpr size_t kVocab = 300;
constexpr int64_t kDraws = 200000;

SamplingParams chain(float temperature, int32_t top_k, float top_p, float min_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

TEST(SpeculativeAcceptance, AnyDraftDistributionYieldsTheTargets) {
  for (const uint64_t seed : {1u, 2u, 3u}) {
    std::mt19937_64 rng(seed);
    const auto target_logits = random_logits(rng, kVocab, 1.5f);
    const auto p = chain_probabilities(target_logits, chain(0.8f, 40, 0.95f, 0.05f));
    // A draft model: the target's logits plus noise, a hotter and wider chain,
    // so q covers tokens p filtered out and misses some p keeps.
    auto draft_logits = random_logits(rng, kVocab, 1.0f);
    for (size_t i = 0; i < kVocab; ++i) draft_logits[i] += target_logits[i];
    const auto q = chain_probabilities(draft_logits, chain(1.3f, 60, 1.0f, 0.0f));
    const Outcome o = verify_many(sparse(p), sparse(q), 0, kVocab, kDraws, seed);
    expect_distributed_as(o, p, kDraws, "seed " + std::to_string(seed));
    EXPECT_GT(o.kept, 0);
    EXPECT_LT(o.kept, kDraws);
  }
}

TEST(SpeculativeAcceptance, ADeterministicDraftIsKeptWithTheTargetsProbability) {
  std::mt19937_64 rng(7);
  const auto logits = random_logits(rng, kVocab, 1.5f);
  const auto p = chain_probabilities(logits, chain(1.0f, 0, 1.0f, 0.0f));
  const TokenDistribution target = sparse(p);
  for (const int32_t x : {int32_t(std::max_element(p.begin(), p.end()) - p.begin()), int32_t(17)}) {
    const Outcome o = verify_many(target, {}, x, kVocab, kDraws, 11);
    expect_distributed_as(o, p, kDraws, "draft " + std::to_string(x));
    // Kept about p(x) of the time: within 6 standard deviations.
    const double expected = p[size_t(x)] * kDraws, sd = std::sqrt(expected * (1.0 - p[size_t(x)]));
    EXPECT_NEAR(double(o.kept), expected, 6.0 * sd + 1.0) << x;
  }
}

TEST(SpeculativeAcceptance, ADraftTheTargetFilteredOutIsAlwaysRejected) {
  std::mt19937_64 rng(5);
  const auto logits = random_logits(rng, kVocab, 2.0f);
  const auto p = chain_probabilities(logits, chain(0.8f, 10, 1.0f, 0.0f));
  const int32_t outside = int32_t(std::find(p.begin(), p.end(), 0.0) - p.begin());
  const Outcome o = verify_many(sparse(p), {}, outside, kVocab, kDraws, 13);
  EXPECT_EQ(o.kept, 0);
  expect_distributed_as(o, p, kDraws, "a filtered-out draft");
}

TEST(SpeculativeAcceptance, EqualDistributionsAlwaysKeepAndGreedyIsExact) {
  std::mt19937_64 rng(9);
  const auto p = sparse(chain_probabilities(random_logits(rng, kVocab, 1.0f), chain(1.0f, 50, 1.0f, 0.0f)));
  const Outcome o = verify_many(p, p, 0, kVocab, 20000, 17);
  EXPECT_EQ(o.kept, 20000);
  // Greedy: p is one-hot at y. A draft of y is kept at any u; any other is
  // refused and replaced by y, whatever q was.
  const TokenDistribution one_hot = {{42, 1.0}};
  RejectionScratch scratch;
  EXPECT_TRUE(keeps_draft(one_hot, {}, 42, 1.0 - 0x1.0p-53));
  EXPECT_FALSE(keeps_draft(one_hot, {}, 41, 0.0));
  EXPECT_FALSE(keeps_draft(one_hot, p, 41, 0.0));
  const auto replacement = [&](const TokenDistribution& q, int32_t x, double u) {
    TokenDistribution residual = one_hot;
    reject_draft(residual, q, x, scratch);
    return draw_from(residual, u);
  };
  EXPECT_EQ(replacement({}, 41, 0.999), 42);
  EXPECT_EQ(replacement(p, 41, 0.5), 42);
  // Rounding that leaves no residual mass keeps p itself.
  EXPECT_EQ(replacement(one_hot, 42, 0.5), 42);
}

// Candidates for one position judged in turn, each against what the
// rejections before it left (SpecInfer's multi-step speculative sampling):
// `drawn` candidates drawn from q independently, then the `fixed` ones (q one-hot).
Outcome verify_candidates(const TokenDistribution& p, const TokenDistribution& q, int drawn,
                          const std::vector<int32_t>& fixed, size_t vocab, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  RejectionScratch scratch;
  Outcome o;
  o.counts.assign(vocab, 0);
  TokenDistribution left;
  for (int64_t i = 0; i < n; ++i) {
    left = p;
    std::vector<std::pair<int32_t, const TokenDistribution*>> candidates;
    static const TokenDistribution kOneHot;
    for (int c = 0; c < drawn; ++c) candidates.emplace_back(draw_from(q, uniform(rng)), &q);
    for (const int32_t x : fixed) candidates.emplace_back(x, &kOneHot);
    int32_t token = -1;
    for (const auto& [x, from] : candidates) {
      if (keeps_draft(left, *from, x, uniform(rng))) {
        token = x;
        ++o.kept;
        break;
      }
      reject_draft(left, *from, x, scratch);
    }
    if (token < 0) token = draw_from(left, uniform(rng));
    ++o.counts.at(size_t(token));
  }
  return o;
}

TEST(SpeculativeAcceptance, CandidatesJudgedInTurnYieldTheTargets) {
  std::mt19937_64 rng(21);
  const auto target_logits = random_logits(rng, kVocab, 1.5f);
  const auto p = chain_probabilities(target_logits, chain(0.8f, 40, 0.95f, 0.05f));
  auto draft_logits = random_logits(rng, kVocab, 1.0f);
  for (size_t i = 0; i < kVocab; ++i) draft_logits[i] += target_logits[i];
  const auto q = chain_probabilities(draft_logits, chain(1.3f, 60, 1.0f, 0.0f));
  // The target's three likeliest tokens and one it filtered out, as deterministic candidates.
  std::vector<int32_t> by_p(kVocab);
  for (size_t i = 0; i < kVocab; ++i) by_p[i] = int32_t(i);
  std::sort(by_p.begin(), by_p.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
  const std::vector<int32_t> fixed = {by_p[1], by_p.back(), by_p[0], by_p[2]};
  for (const auto& [drawn, candidates] : std::vector<std::pair<int, std::vector<int32_t>>>{{0, fixed}, {3, {}}, {2, fixed}}) {
    const std::string what = std::to_string(drawn) + " drawn, " + std::to_string(candidates.size()) + " fixed";
    const Outcome o = verify_candidates(sparse(p), sparse(q), drawn, candidates, kVocab, kDraws, 23);
    expect_distributed_as(o, p, kDraws, what);
    EXPECT_GT(o.kept, 0) << what;
    EXPECT_LT(o.kept, kDraws) << what;
  }
}

}  // namespace
}  // namespace nt
