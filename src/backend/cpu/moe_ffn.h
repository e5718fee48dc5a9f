// The mixture-of-experts FFN on the CPU. A router picks each token's experts;
// the pass then takes the experts in turn, each over all the tokens routed
// to it, so that its matrices are read once per pass however many sequences
// and prompt tokens the pass holds.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/thread_pool.h"
#include "model/arch/model_spec.h"
#include "model/model_weights.h"

namespace nt::cpu {

// One token's routing as `gating` says (ties go to the lower expert index, a
// rule that depends on nothing but the values). Writes the experts in order
// of decreasing weight, and overwrites `logits`.
void route_token(ExpertGating gating, float* logits, int64_t n_experts, int64_t k, int32_t* experts, float* weights);

class MoeFfn {
 public:
  // Scratch for passes of up to max_rows rows through the mixture layers of `spec`.
  MoeFfn(const ModelSpec& spec, int64_t max_rows);

  // y [n][dim] = the layer's mixture of experts on the normed rows x [n][dim];
  // y must not alias x. `groups` cover the n rows as for matmul_groups: an
  // expert takes a group's tokens with the kernel the group's `alone` picks,
  // so a token gets the numbers it gets in a pass of its own, and sums its
  // experts' outputs in expert order.
  void run(const LayerSpec& layer, const LayerWeights& w, const float* x, float* y, int64_t n,
           std::span<const TokenGroup> groups, ThreadPool& pool);
  // The last run's routing: each of its n rows' k experts, [n][k].
  std::span<const int32_t> chosen(int64_t n, int64_t k) const { return {chosen_.data(), size_t(n * k)}; }

  // One token routed to an expert, and its weight there.
  struct Routed {
    int64_t row;
    float weight;
  };
  // y[row] += weight * expert `expert`'s FFN of x[row] for each of `tokens`
  // (at most max_rows), multiplied together as one call of theirs: an
  // expert that another backend routed (the CUDA runner's misses).
  void add_expert(const LayerSpec& layer, const LayerWeights& w, int64_t expert, std::span<const Routed> tokens,
                  const float* x, float* y, ThreadPool& pool);

 private:
  void route(const MoeSpec& moe, const LayerWeights& w, const float* x, int64_t n, std::span<const TokenGroup> groups,
             ThreadPool& pool);
  // out [m][rows of the matrix] = expert `expert`'s matrix of `role` times in, plus its bias where the mixture has them.
  void expert_matmul(const MoeSpec& moe, const LayerWeights& w, LayerRole role, int64_t expert, const float* in, float* out,
                     int64_t m, ThreadPool& pool);
  void run_expert(const LayerSpec& layer, const LayerWeights& w, int64_t expert, std::span<const Routed> tokens, const float* x,
                  float* y, ThreadPool& pool);
  // run_expert's products once expert_groups_ cover the tokens.
  void compute_expert(const LayerSpec& layer, const LayerWeights& w, int64_t expert, std::span<const Routed> tokens,
                      const float* x, float* y, ThreadPool& pool);

  int64_t dim_ = 0;
  std::vector<float> logits_;           // router [n][n_experts], then probabilities
  std::vector<int32_t> chosen_;         // [n][k] experts of each token
  std::vector<float> chosen_weights_;   // [n][k]
  std::vector<TokenGroup> groups_;      // the pass's
  std::vector<int64_t> row_group_;      // [n] the index in groups_ of each row
  std::vector<int64_t> expert_start_;   // [n_experts + 1] each expert's slice of by_expert_
  std::vector<int64_t> expert_fill_;    // [n_experts] the next free place of each slice while sorting
  std::vector<Routed> by_expert_;       // [n * k] tokens sorted by expert, rows ascending
  std::vector<TokenGroup> expert_groups_;  // the expert at hand's tokens, grouped as their rows are
  std::vector<float> xe_, ye_;          // the expert at hand's input and output rows [n][dim]
  std::vector<float> gate_, up_;        // its hidden rows [n][expert_ffn_dim]
};

}  // namespace nt::cpu
