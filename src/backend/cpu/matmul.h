// Matrix products of weights (any supported GGUF type) with f32 activations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "quant/tensor_type.h"

namespace nt::cpu {

// A rows x cols weight matrix as GGUF stores it: each row holds the `cols`
// inputs of one output, row r starting row_stride bytes after row r - 1.
struct WeightView {
  const void* data = nullptr;
  TensorType type = TensorType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_stride = 0;
  std::string_view name;  // for error messages

  // A matrix whose rows are packed back to back.
  static WeightView dense(const void* data, TensorType type, int64_t rows, int64_t cols,
                          std::string_view name = {});

  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_stride; }
};

// Y[t][r] = dot(W row r, X[t]) for t < n_tokens: X is n_tokens x cols,
// Y is n_tokens x rows, both f32 and dense. One token is a matvec split over
// rows; more tokens quantize X once and reuse each weight block across them.
// Throws nt::Error when W's type is not a weight format or cols does not
// fit its blocks.
void matmul(const WeightView& w, const float* x, float* y, int n_tokens, ThreadPool& pool);
void matmul(const WeightView& w, const float* x, float* y, int n_tokens, ThreadPool& pool,
            const Kernels& kernels);

// Tokens of one caller (a sequence's run in a batch): X and Y rows
// [first, first + count), of a call of `alone` tokens in all (a run the
// backend cuts into pieces).
struct TokenGroup {
  int64_t first = 0;
  int64_t count = 0;
  int64_t alone = 0;
};

// matmul over token groups in order, each taking the kernel matmul would
// take for its `alone` tokens. A token's result depends only on its own row
// of X and that kernel, so a sequence batched with others gets the very
// numbers it would get alone: the model turns even last-bit differences into
// different tokens within a few steps. Adjacent groups of one kernel run as
// one call, reading each weight row once for all of them.
void matmul_groups(const WeightView& w, const float* x, float* y, std::span<const TokenGroup> groups, ThreadPool& pool);

// Decodes row `row` of W to cols floats (an embedding lookup).
void embedding_row(const WeightView& w, int64_t row, float* out);

}  // namespace nt::cpu
