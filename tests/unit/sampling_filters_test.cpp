// Candidate filters (top-k, top-p, min-p) and penalties against float64
// formulas written out here, on freshly drawn random logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "sampling/candidates.h"
#include "sampling/sampler.h"
#include "sampling_test_util.h"

namespace nt {
namespace {

using test::fresh_rng;
using test::random_logits;

// Token ids from the highest logit down (ties by id).
std::vector<int32_t> ranked_ids(const std::vector<float>& logits) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return ids;
}

std::vector<int32_t> ids_of(const Candidates& c) {
  std::vector<int32_t> ids;
  for (const auto& x : c.view()) ids.push_back(x.id);
  return ids;
}

TEST(SamplingFilters, TopKKeepsTheKHighestInOrder) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  const auto logits = random_logits(rng, 128256, 3.0f);
  const auto ranked = ranked_ids(logits);
  for (int64_t k : {1, 40, 1000}) {
    Candidates c;
    c.assign(logits);
    c.keep_top_k(k);
    EXPECT_EQ(ids_of(c), std::vector<int32_t>(ranked.begin(), ranked.begin() + k)) << "k=" << k;
  }
  Candidates all;
  all.assign(logits);
  all.keep_top_k(0);
  EXPECT_EQ(all.size(), logits.size());
}

// Choosing the top k while assigning keeps what assigning everything and then
// keep_top_k does, ties (logits on a coarse grid) and -inf entries included.
TEST(SamplingFilters, TopKWhileAssigningKeepsTheKHighestInOrder) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  auto logits = random_logits(rng, 128256, 3.0f);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = i % 97 == 0 ? -INFINITY : std::round(logits[i] * 4.0f) / 4.0f;  // thousands of ties
  }
  const auto ranked = ranked_ids(logits);
  for (int64_t k : {1, 2, 40, 1000, 128255}) {
    Candidates c;
    c.assign(logits, k);
    EXPECT_EQ(ids_of(c), std::vector<int32_t>(ranked.begin(), ranked.begin() + k)) << "k=" << k;
  }
  const std::vector<float> mostly_never = {-INFINITY, 1.0f, -INFINITY, -INFINITY};
  Candidates c;
  c.assign(mostly_never, 3);  // two of the three kept can never be drawn, as keep_top_k(3) leaves them
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1, 0, 2}));
  c.assign(mostly_never, 4);  // not fewer than the vocabulary: everything, in id order
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{0, 1, 2, 3}));
}

// Size of the smallest highest-first prefix of `ids` whose softmax mass (over `ids`) reaches p.
size_t nucleus_size(const std::vector<float>& logits, const std::vector<int32_t>& ids, double p, double* margin) {
  const double top = logits[ids[0]];
  double total = 0.0;
  for (int32_t id : ids) total += std::exp(double(logits[id]) - top);
  double mass = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const double before = mass / total;
    mass += std::exp(double(logits[ids[i]]) - top);
    if (mass / total >= p) {
      *margin = std::min(mass / total - p, p - before);
      return i + 1;
    }
  }
  *margin = 1.0;
  return ids.size();
}

TEST(SamplingFilters, TopPKeepsExactlyTheMinimalNucleus) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t vocab = trial % 4 == 0 ? 128256 : 3000;
    const auto logits = random_logits(rng, vocab, trial % 2 ? 1.0f : 4.0f);
    const int64_t top_k = trial % 3 == 0 ? 200 : 0;
    auto ranked = ranked_ids(logits);
    if (top_k > 0) ranked.resize(size_t(top_k));
    // Include p near 1, where the nucleus outgrows the first sorted chunk.
    const double p = trial % 5 == 0 ? 0.999 : uniform(rng);
    double margin;
    const size_t expected = nucleus_size(logits, ranked, p, &margin);
    if (margin < 1e-6) continue;  // float32 logits cannot settle a tie this close

    Candidates c;
    c.assign(logits);
    c.keep_top_k(top_k);
    c.keep_top_p(float(p));
    // float(p) differs from p by < 1e-7, inside the margin just checked.
    EXPECT_EQ(ids_of(c), std::vector<int32_t>(ranked.begin(), ranked.begin() + expected))
        << "trial " << trial << " p=" << p << " top_k=" << top_k;
  }
}

TEST(SamplingFilters, TopPOfOneKeepsEverything) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  Candidates c;
  c.assign(random_logits(rng, 500, 2.0f));
  c.keep_top_p(1.0f);
  EXPECT_EQ(c.size(), 500u);
}

TEST(SamplingFilters, MinPKeepsTokensAtLeastMinPTimesTheTopProbability) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  std::uniform_real_distribution<double> uniform(0.001, 0.9);
  for (int trial = 0; trial < 30; ++trial) {
    const auto logits = random_logits(rng, 20000, 2.0f);
    const double min_p = float(uniform(rng));
    const int64_t top_k = trial % 2 ? 100 : 0;
    auto ranked = ranked_ids(logits);
    if (top_k > 0) ranked.resize(size_t(top_k));
    // p_i / p_max over whatever set remains: the normaliser cancels.
    const double top = logits[ranked[0]];
    std::set<int32_t> expected;
    for (int32_t id : ranked)
      if (std::exp(double(logits[id]) - top) >= min_p) expected.insert(id);

    Candidates c;
    c.assign(logits);
    c.keep_top_k(top_k);
    c.keep_min_p(float(min_p));
    const auto got = ids_of(c);
    EXPECT_EQ(std::set<int32_t>(got.begin(), got.end()), expected) << "trial " << trial << " min_p=" << min_p;
  }
}

TEST(SamplingFilters, PenaltiesFollowTheFormulas) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const size_t vocab = 300;
  const auto original = random_logits(rng, vocab, 3.0f);
  SamplingParams params;
  params.repeat_penalty = 1.0f + 2.0f * uniform(rng);
  params.frequency_penalty = uniform(rng);
  params.presence_penalty = uniform(rng);
  TokenCounts counts;
  std::uniform_int_distribution<int32_t> token(0, int32_t(vocab) - 1);
  for (int i = 0; i < 120; ++i) ++counts[token(rng)];

  auto logits = original;
  apply_penalties(logits, counts, params);

  for (size_t id = 0; id < vocab; ++id) {
    const auto it = counts.find(int32_t(id));
    if (it == counts.end()) {
      EXPECT_EQ(logits[id], original[id]) << "token " << id << " was never seen";
      continue;
    }
    const double l = original[id];
    const double repeated = l > 0 ? l / params.repeat_penalty : l * params.repeat_penalty;
    const double expected = repeated - it->second * double(params.frequency_penalty) - params.presence_penalty;
    EXPECT_NEAR(logits[id], expected, 1e-5 * (1.0 + std::abs(expected))) << "token " << id << " count " << it->second;
  }
}

}  // namespace
}  // namespace nt
