// The kernels of a mixture-of-experts FFN on the GPU (expert_ffn.h): the
// router's top-k, and the rows an expert takes gathered before its products
// and added back, weighted, after them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nt {

// Per row of logits [n][n_experts], as the CPU's route_token: with
// softmax_over_all (ExpertGating::SoftmaxTopK) the k largest probabilities
// of the softmax over all experts, renormalized to sum 1; otherwise
// (TopKSoftmax) the k largest logits, softmaxed among themselves. A tie
// goes to the lower expert index. experts and weights are [n][k], in order
// of decreasing weight.
void route_top_k(const float* logits, int64_t n, int64_t n_experts, int64_t k, bool softmax_over_all, int32_t* experts,
                 float* weights, cudaStream_t stream);

// ye[i] += bias[experts[i]] for the m (row, choice) pairs i, each a row of
// `width`: every chosen expert's bias (one row per expert) on its pair's output.
void add_expert_biases(float* ye, const int32_t* experts, const float* bias, int64_t m, int64_t width, cudaStream_t stream);

// xe[i] = x[routed[i] / k] for i < m: the rows an expert takes, routed[i]
// being a (row, choice) pair's index row * k + choice.
void gather_routed_rows(const float* x, const int32_t* routed, int64_t m, int64_t k, int64_t dim, float* xe,
                        cudaStream_t stream);

// y[routed[i] / k] += weights[routed[i]] * ye[i] for i < m (distinct rows).
void add_routed_rows(const float* ye, const int32_t* routed, const float* weights, int64_t m, int64_t k, int64_t dim,
                     float* y, cudaStream_t stream);

// y[t] += sum of weights[t][j] * ye[t * k + j] over the k choices of row t,
// taken in ascending expert order (as add_routed_rows' experts add them),
// for rows t < n. With `place`, pair t * k + j's output is row place[t * k + j] of ye.
void add_expert_outputs(const float* ye, const int32_t* experts, const float* weights, int64_t n, int64_t k, int64_t dim,
                        float* y, cudaStream_t stream, const int32_t* place = nullptr);

}  // namespace nt
