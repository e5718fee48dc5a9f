// Decode mat-vec: y = W x for 1 to 8 activation columns, reading every weight
// once per call, for every weight format. Quantized formats take the
// activations as q8 (see quantize_activations); float formats take them as f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/weights/device_matrix.h"
#include "runtime/expert_pairs.h"

namespace nt {

constexpr int kMatvecMaxColumns = 8;

struct Activations {
  const float* f32 = nullptr;        // [columns][cols]
  const int8_t* q8 = nullptr;        // [columns][cols]
  const float2* q8_scales = nullptr; // [columns][cols / 32]: (d, d * sum q)
};

// RMSNorm folded into the mat-vecs on each side of it (decode, one column).
// q8 rounding does not depend on a common scale, so the producer of the
// residual stream h writes q8(h * norm weight) and each 32-row group's sum of
// squares of h; the consumer scales its products by rsqrt(mean(h^2) + eps).
struct NormIn {
  const float* group_sumsq = nullptr;  // cols / 32 sums; null: x is already normalized
  float eps = 0.0f;
};

struct NormOut {
  const float* weight = nullptr;       // [rows]: the next RMSNorm's weight
  int8_t* q8 = nullptr;                // [rows]; null: no norm output
  float2* q8_scales = nullptr;         // [rows / 32]
  float* group_sumsq = nullptr;        // [rows / 32]
};

// The most columns of a paired launch (MatvecParams::rows_per_warp).
constexpr int kMatvecPairedMaxColumns = 4;

struct MatvecParams {
  DeviceMatrix w;                    // rows x cols
  DeviceMatrix w_up;                 // set for the gated form: y = silu(W x) * (W_up x)
  Activations x;
  float* y = nullptr;                // column c, row r at y[c * y_stride + r]
  int64_t y_stride = 0;
  const float* residual = nullptr;   // added to y in the epilogue (may be y itself)
  // One column: warps_per_row 1, 2 or 4 and (not gated) rows_per_warp 1 or 2
  // force a variant, 0 picks by shape. Two to kMatvecPairedMaxColumns
  // columns, not gated: 2 and 2 pair rows over two warps (cuda_bench
  // columns); otherwise one warp a row.
  int warps_per_row = 0;
  int rows_per_warp = 0;
  NormIn norm_in;                    // single column: x is un-normalized (see NormIn)
  NormOut norm_out;                  // single column, not gated: also writes the next RMSNorm's input
};

constexpr int kMaxMatvecParts = 3;

// Matrices over one input whose outputs lie side by side, as Q, K and V do.
struct MatvecPart {
  DeviceMatrix w;
  int64_t y_offset = 0;  // where this part's first output goes in y
};

struct MatvecPartsParams {
  MatvecPart part[kMaxMatvecParts];
  int n_parts = 0;
  Activations x;
  NormIn norm_in;
  float* y = nullptr;
};

// True when `type` takes q8 activations.
bool matvec_wants_q8(TensorType type);

void matvec(const MatvecParams& p, int columns, cudaStream_t stream);

// Any number of columns, each computed with exactly the operations matvec(p, 1)
// applies to one column alone (its warps per row, its format's decode units,
// its folded norms), kMatvecMaxColumns at a time reading every weight once for
// all: the tokens of a stepwise run (runtime/batch.h) then get the numbers of
// one-token decode steps. Column c's folded norms lie where its activations
// and outputs do: NormIn sums at group_sumsq + c * cols / 32, NormOut at
// q8 + c * rows, q8_scales and group_sumsq + c * rows / 32.
void matvec_stepwise(const MatvecParams& p, int64_t columns, cudaStream_t stream);

// Whether matvec_stepwise(p, columns), columns at most kMatvecMaxColumns,
// gives each column blocks of its own: then it costs about what one column's
// launch does (small matrices, whose one-column launches leave most of the
// GPU idle); otherwise every thread loops over the columns.
bool matvec_stepwise_columns_apart(const MatvecParams& p, int64_t columns);

// One column through every part: a single launch when the parts use at most
// two formats that are instantiated together (the K-quant mixes), else one
// mat-vec per part. Every part must have the same number of columns.
void matvec_parts(const MatvecPartsParams& p, cudaStream_t stream);

// Any number of columns through the parts, each as matvec_parts computes one
// column (column c's outputs at p.y + c * y_stride).
void matvec_parts_stepwise(const MatvecPartsParams& p, int64_t columns, int64_t y_stride, cudaStream_t stream);
// Whether every part's launch of matvec_parts_stepwise gives each column blocks of its own.
bool matvec_parts_stepwise_columns_apart(const MatvecPartsParams& p, int64_t columns);

// Mixture-of-experts rows: pair i (a row's choice of an expert) multiplies
// expert chosen[i]'s matrix, which lies in slot slot_of[chosen[i]] of a
// uniform array: MatvecParams' matrices are slot 0's, slot s's planes
// slot_bytes * s further on. Its input is column i / k of the activations
// (the pair's row), or column i with per_pair_input (the pair's own hidden
// row); its output goes to column i of y. The expert ids stay on the GPU.
struct ExpertRows {
  const int32_t* chosen = nullptr;   // [pairs]
  const int32_t* slot_of = nullptr;  // [n_experts] of the layer
  uint64_t slot_bytes = 0;
  int k = 1;
  bool per_pair_input = false;
};
// One launch over `pairs` pairs, each as the one-column launch's arithmetic
// with one warp a row (gated when p.w_up is set); no folded norms or residual.
void matvec_experts(const MatvecParams& p, const ExpertRows& rows, int64_t pairs, cudaStream_t stream);

// One launch over n_chunks chunks (runtime/expert_pairs.h; at most kMatvecMaxColumns pairs each): columns [first, first + count) of the
// activations times expert `expert`'s matrix (slot slot_of[expert], as
// ExpertRows), into the same columns of y. Each column gets the numbers
// matvec_experts gives its pair (one warp a row), and a chunk reads its
// expert's weights once for all its columns.
void matvec_expert_chunks(const MatvecParams& p, const ExpertChunk* chunks, int64_t n_chunks, const int32_t* slot_of,
                          uint64_t slot_bytes, cudaStream_t stream);

// Quantizes `columns` rows of `cols` floats (cols a multiple of 32) to q8.
void quantize_activations(const float* x, int64_t columns, int64_t cols, int8_t* q8, float2* q8_scales,
                          cudaStream_t stream);

}  // namespace nt
