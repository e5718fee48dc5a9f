// Matrix products of weights (any supported GGUF type) with f32 activations.
#pragma once

#include <cstddef>
#include <cstdint>
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

// Decodes row `row` of W to cols floats (an embedding lookup).
void embedding_row(const WeightView& w, int64_t row, float* out);

}  // namespace nt::cpu
