// The Sampler end to end: greedy, determinism, the penalty window, and the
// empirical distribution of draws against float64 probabilities derived here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"
#include "sampling_test_util.h"

namespace nt {
namespace {

using test::chain_probabilities;
using test::chi_square;
using test::chi_square_bound;
using test::fresh_rng;
using test::random_logits;

SamplingParams unfiltered(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

int32_t argmax(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Sampler::sample penalises in place; each call gets its own copy.
int32_t sample_copy(Sampler& s, std::vector<float> logits) { return s.sample(logits); }

TEST(Sampler, GreedyIsArgmax) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  for (float temperature : {0.0f, -1.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    Sampler sampler(params, 128256);
    for (int i = 0; i < 5; ++i) {
      auto logits = random_logits(rng, 128256, 5.0f);
      EXPECT_EQ(sample_copy(sampler, logits), argmax(logits));
    }
  }
}

TEST(Sampler, GreedyBreaksTiesTowardTheLowestId) {
  std::vector<float> logits = {0.0f, 3.0f, 1.0f, 3.0f};
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params, 4);
  EXPECT_EQ(sample_copy(sampler, logits), 1);
}

TEST(Sampler, TopKOfOneAlwaysPicksTheArgmax) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  SamplingParams params = unfiltered(2.0f, rng());
  params.top_k = 1;
  Sampler sampler(params, 1000);
  for (int i = 0; i < 200; ++i) {
    auto logits = random_logits(rng, 1000, 0.5f);
    EXPECT_EQ(sample_copy(sampler, logits), argmax(logits));
  }
}

std::vector<int64_t> draw_counts(Sampler& sampler, const std::vector<float>& logits, int64_t n) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t i = 0; i < n; ++i) ++counts[size_t(sample_copy(sampler, logits))];
  return counts;
}

TEST(Sampler, DrawsFollowSoftmaxOverTemperature) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  std::uniform_real_distribution<float> uniform(0.5f, 2.0f);
  const float temperature = uniform(rng);
  const auto logits = random_logits(rng, 16, 1.0f);
  Sampler sampler(unfiltered(temperature, rng()), int64_t(logits.size()));

  std::vector<double> probs(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) probs[i] = std::exp(double(logits[i]) / temperature);
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  for (auto& p : probs) p /= total;

  const int64_t n = 200000;
  const auto [stat, df] = chi_square(draw_counts(sampler, logits, n), probs, n);
  EXPECT_LT(stat, chi_square_bound(df)) << "temperature " << temperature << ", df " << df;
}

TEST(Sampler, DrawsFollowTheFilteredChain) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  SamplingParams params;  // llama-cli defaults: top_k 40, top_p 0.95, min_p 0.05, T 0.8
  params.seed = rng();
  const auto logits = random_logits(rng, 2000, 2.5f);
  Sampler sampler(params, int64_t(logits.size()));
  const auto probs = chain_probabilities(logits, params);

  const int64_t n = 200000;
  const auto counts = draw_counts(sampler, logits, n);
  for (size_t id = 0; id < probs.size(); ++id) {
    if (probs[id] == 0.0) {
      EXPECT_EQ(counts[id], 0) << "token " << id << " should have been filtered out";
    }
  }
  const auto [stat, df] = chi_square(counts, probs, n);
  if (df == 0) {  // the chain left one token (1 draw of logits in ~150): every draw must be it
    EXPECT_EQ(stat, 0.0);
  } else {
    EXPECT_LT(stat, chi_square_bound(df)) << "df " << df;
  }
}

// The probabilities of the listed tokens, 0 for the rest.
std::vector<double> dense(const TokenDistribution& d, size_t vocab) {
  std::vector<double> probs(vocab, 0.0);
  for (const TokenProbability& t : d) probs.at(size_t(t.id)) += t.p;
  return probs;
}

TEST(Sampler, DistributionIsTheFilteredChainAndWhatItDraws) {
  std::mt19937_64 rng(24);
  for (const int32_t top_k : {40, 0}) {
    SamplingParams params;
    params.top_k = top_k;
    params.seed = rng();
    Sampler sampler(params, 2000);
    auto logits = random_logits(rng, 2000, 2.5f);
    const auto want = chain_probabilities(logits, params);
    TokenDistribution got;
    auto row = logits;
    sampler.distribution(row, got);
    const auto probs = dense(got, logits.size());
    for (size_t id = 0; id < want.size(); ++id) EXPECT_NEAR(probs[id], want[id], 1e-12) << "token " << id;
    // Drawing from it at the sampler's uniforms gives the sampler's own tokens.
    Sampler twin(params, 2000);
    for (int i = 0; i < 200; ++i) EXPECT_EQ(draw_from(got, sampler.next_uniform()), sample_copy(twin, logits));
  }
}

TEST(Sampler, GreedyDistributionIsOneHotAtThePenalisedArgmax) {
  std::vector<float> logits(8, 0.0f);
  logits[3] = 5.0f;
  logits[5] = 4.0f;
  SamplingParams params = greedy_sampling();
  params.repeat_penalty = 2.0f;
  Sampler sampler(params, 8);
  TokenDistribution got;
  auto row = logits;
  sampler.distribution(row, got);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, 3);
  EXPECT_EQ(got[0].p, 1.0);
  sampler.accept(3);
  row = logits;
  sampler.distribution(row, got);
  EXPECT_EQ(got[0].id, 5);
}

TEST(Sampler, SameSeedSameSequence) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  const auto params = unfiltered(1.0f, rng());
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 64; ++i) rows.push_back(random_logits(rng, 500, 1.0f));

  const auto run = [&](Sampler& s) {
    std::vector<int32_t> out;
    for (const auto& row : rows) out.push_back(sample_copy(s, row));
    return out;
  };
  Sampler a(params, 500), b(params, 500);
  const auto first = run(a);
  EXPECT_EQ(run(b), first);
  a.reset();
  EXPECT_EQ(run(a), first) << "reset() restarts the random sequence";
  auto other_params = params;
  other_params.seed = params.seed + 1;
  Sampler c(other_params, 500);
  EXPECT_NE(run(c), first);
}

TEST(Sampler, UniformFromBitsSpansZeroToJustBelowOne) {
  EXPECT_EQ(uniform_from_bits(0), 0.0);
  EXPECT_EQ(uniform_from_bits(~uint64_t(0)), 1.0 - 0x1.0p-53);
  EXPECT_EQ(uniform_from_bits(uint64_t(1) << 63), 0.5);
}

TEST(Sampler, PenaltiesCoverOnlyTheLastNAcceptedTokens) {
  // Token 3 leads token 5 by a margin a penalty of 2 reverses.
  std::vector<float> logits(8, 0.0f);
  logits[3] = 5.0f;
  logits[5] = 4.0f;
  SamplingParams params;
  params.temperature = 0.0f;
  params.repeat_penalty = 2.0f;
  params.repeat_last_n = 4;
  Sampler sampler(params, 8);

  EXPECT_EQ(sample_copy(sampler, logits), 3);
  sampler.accept(3);
  EXPECT_EQ(sample_copy(sampler, logits), 5);
  for (int32_t t : {0, 1, 2}) sampler.accept(t);
  EXPECT_EQ(sample_copy(sampler, logits), 5) << "token 3 is still among the last 4";
  sampler.accept(6);
  EXPECT_EQ(sample_copy(sampler, logits), 3) << "token 3 left the window";
  sampler.accept(3);
  sampler.reset();
  EXPECT_EQ(sample_copy(sampler, logits), 3) << "reset() forgets the history";
}

TEST(Sampler, PenalisesTheCallersLogitsInPlace) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  Sampler sampler(params, 4);
  sampler.accept(2);
  sampler.accept(2);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  sampler.sample(logits);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 2 * 0.5f - 0.25f);
  EXPECT_EQ(logits[0], 1.0f);
}

TEST(Sampler, RejectsBadInput) {
  SamplingParams params;
  Sampler sampler(params, 10);
  std::vector<float> short_row(9, 0.0f);
  EXPECT_THROW(sampler.sample(short_row), Error);
  std::vector<float> with_nan(10, 0.0f);
  with_nan[4] = NAN;
  EXPECT_THROW(sampler.sample(with_nan), Error);
  std::vector<float> all_masked(10, -INFINITY);
  EXPECT_THROW(sampler.sample(all_masked), Error);
  EXPECT_THROW(sampler.accept(10), Error);
  EXPECT_THROW(sampler.accept(-1), Error);
  params.top_p = 1.5f;
  EXPECT_THROW(Sampler(params, 10), Error);
}

// sample_top on a row's top_needed() highest logits (shuffled: any order is
// allowed) against sample() on the whole row, step by step with the same seed.
// The window's tokens get the row's highest logits so that penalties reorder
// the top and push penalised tokens out of the top-k; so do tokens 0-9 where
// a chain lowers them by a logit bias. The rows are coarse, so equal logits
// straddle the cut.
TEST(Sampler, ChoosesFromTheRowsTopAsFromTheWholeRow) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  struct Chain {
    float temperature, repeat_penalty, frequency_penalty, presence_penalty;
    int32_t top_k, repeat_last_n;
    float top_p, min_p;
    float bias = 0.0f;  // < 0: added to tokens 0-9
  };
  const Chain chains[] = {
      {0.8f, 1.0f, 0.0f, 0.0f, 40, 64, 0.95f, 0.05f},   // the CLI's defaults
      {1.0f, 1.3f, 0.4f, 0.5f, 10, 16, 1.0f, 0.0f},     // penalties that reorder the top
      {0.0f, 1.5f, 0.0f, 0.0f, 40, 8, 0.95f, 0.05f},    // greedy with a penalty
      {1.5f, 1.1f, 0.0f, 1.0f, 1, -1, 0.9f, 0.1f},      // top-1, the window unbounded
      {0.7f, 1.0f, 2.0f, 0.0f, 300, 32, 0.99f, 0.0f},  // a wide top-k
      {0.9f, 1.2f, 0.0f, 0.0f, 5, 16, 1.0f, 0.0f, -3.0f},    // lowering biases beside penalties
      {0.0f, 1.0f, 0.0f, 0.0f, 40, 0, 1.0f, 0.0f, -100.0f},  // greedy with banned tokens
  };
  const int64_t vocab = 1000;
  std::uniform_int_distribution<int32_t> any_token(0, int32_t(vocab) - 1);
  for (const Chain& c : chains) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.repeat_penalty = c.repeat_penalty;
    p.frequency_penalty = c.frequency_penalty;
    p.presence_penalty = c.presence_penalty;
    p.top_k = c.top_k;
    p.repeat_last_n = c.repeat_last_n;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    for (int32_t t = 0; c.bias < 0.0f && t < 10; ++t) p.logit_bias.push_back({t, c.bias});
    p.seed = rng();
    Sampler whole(p, vocab), top(p, vocab);
    std::vector<int32_t> history;
    Candidates selected;
    for (int step = 0; step < 300; ++step) {
      auto row = random_logits(rng, size_t(vocab), 3.0f);
      for (float& x : row) x = std::round(x * 4.0f) / 4.0f;  // ties
      for (const LogitBias& b : p.logit_bias) row[size_t(b.token)] = 8.0f + float(b.token % 4);
      for (size_t i = history.size() > 20 ? history.size() - 20 : 0; i < history.size(); ++i) {
        row[size_t(history[i])] = 9.0f + float(i % 3);
      }
      const int64_t needed = top.top_needed();
      ASSERT_GT(needed, 0);
      selected.assign(row, needed);
      std::vector<Candidate> given(selected.view().begin(), selected.view().end());
      std::shuffle(given.begin(), given.end(), rng);
      const int32_t want = sample_copy(whole, row);
      ASSERT_EQ(top.sample_top(given), want) << "step " << step << ", top_k " << c.top_k;
      const int32_t next = step % 2 ? want : any_token(rng);  // the window gets repeats
      whole.accept(next);
      top.accept(next);
      history.push_back(next);
    }
  }
}

// A raised token may come from anywhere in the row: the chain then needs all
// of it, and the bias decides a greedy pick; a token outside the vocabulary
// is refused by name.
TEST(Sampler, RaisingBiasesNeedTheWholeRow) {
  SamplingParams p = greedy_sampling();
  p.logit_bias = {{7, 100.0f}};
  Sampler sampler(p, 50);
  EXPECT_EQ(sampler.top_needed(), 0);
  EXPECT_FALSE(sampler.picks_highest_logit());
  std::vector<float> row(50, 0.0f);
  row[3] = 20.0f;
  EXPECT_EQ(sampler.sample(row), 7);
  p.logit_bias = {{50, -1.0f}};
  try {
    Sampler(p, 50);
    FAIL() << "token 50 of a vocabulary of 50 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logit_bias names token 50"), std::string::npos) << e.what();
  }
}

TEST(Sampler, NeedsTheWholeRowWithoutATopKAndRejectsTooShortATop) {
  SamplingParams params;
  params.top_k = 0;
  EXPECT_EQ(Sampler(params, 50).top_needed(), 0);
  EXPECT_THROW(Sampler(params, 50).sample_top({}), Error);
  params.top_k = 50;
  EXPECT_EQ(Sampler(params, 50).top_needed(), 0) << "top-k of the whole vocabulary";
  params.top_k = 5;
  params.repeat_penalty = 1.2f;
  Sampler sampler(params, 50);
  EXPECT_EQ(sampler.top_needed(), 5);
  sampler.accept(7);
  sampler.accept(7);
  sampler.accept(9);
  EXPECT_EQ(sampler.top_needed(), 7) << "the top-k and the two distinct tokens in the window";
  const std::vector<Candidate> six = {{6, 0}, {5, 1}, {4, 2}, {3, 3}, {2, 4}, {1, 5}};
  EXPECT_THROW(sampler.sample_top(six), Error);
}

// A decode's step policy carries the chain's settings, chooses as sample_top
// does and draws what next_uniform would; only a chain without history has one.
TEST(Sampler, StepPolicyIsTheChainWithoutHistory) {
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 5;
  params.top_p = 0.9f;
  params.min_p = 0.02f;
  params.seed = 11;
  Sampler sampler(params, 50), reference(params, 50);
  const StepPolicy policy = sampler.step_policy();
  EXPECT_FALSE(policy.argmax());
  EXPECT_EQ(policy.top_k, 5);
  EXPECT_EQ(policy.temperature, 0.7f);
  EXPECT_EQ(policy.top_p, 0.9f);
  EXPECT_EQ(policy.min_p, 0.02f);
  const std::vector<Candidate> top = {{2.0f, 3}, {1.5f, 8}, {1.0f, 1}, {0.5f, 9}, {0.0f, 4}};
  for (int step = 0; step < 20; ++step) EXPECT_EQ(policy.choose(top), reference.sample_top(top)) << "step " << step;
  EXPECT_EQ(policy.draw(), reference.next_uniform());
  params.repeat_penalty = 1.2f;
  EXPECT_THROW(Sampler(params, 50).step_policy(), Error);
  params.repeat_penalty = 1.0f;
  params.temperature = 0.0f;
  EXPECT_THROW(Sampler(params, 50).step_policy(), Error) << "greedy: the argmax policy, not a chain";
}

TEST(Sampler, MaskedTokensAreNeverDrawn) {
  uint64_t seed;
  auto rng = fresh_rng(seed);
  SCOPED_TRACE(seed);
  auto logits = random_logits(rng, 50, 1.0f);
  for (size_t i = 0; i < logits.size(); i += 2) logits[i] = -INFINITY;
  Sampler sampler(unfiltered(1.0f, rng()), 50);
  for (int i = 0; i < 2000; ++i) EXPECT_EQ(sample_copy(sampler, logits) % 2, 1);
}

}  // namespace
}  // namespace nt
