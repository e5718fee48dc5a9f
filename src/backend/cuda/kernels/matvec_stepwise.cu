// Stepwise mat-vec (matvec_stepwise in matvec.h): the columns of a stepwise
// run, each computed as a one-column decode launch computes it, so that a
// speculative verification pass reads every weight once and still gives
// each token the numbers of a one-token step. The launch takes the decode
// path's layout choice (the norm-output blocks, else its row split) and its
// format structs (the gated Q4_K decode's 64-element units). A launch whose
// columns all fit on the GPU at once gives each column its own blocks (the
// one-column body); larger ones loop over the columns in every thread.
#include <atomic>
#include <optional>

#include "backend/cuda/kernels/matvec_kernel.cuh"
#include "core/align.h"
#include "core/tuning.h"

namespace nt::cuda {
namespace {

// PRECOND: 1 <= columns <= kMaxColumns; as matvec_kernel. Bytes moved:
// the weights once (twice gated) for every column, columns * rows * 4 written.
// A column's operations do not depend on kMaxColumns, only the registers the
// launch holds: a few columns take the narrower kernel.
template <class F, bool kGated, int kSplit, int kMaxColumns>
__global__ void __launch_bounds__(kMatvecWarps * 32) matvec_stepwise_kernel(const MatvecParams p, int columns) {
  NT_TRACE_BLOCK(kMatvec);
  allow_dependents();
  matvec_block<F, kMaxColumns, kGated, kSplit, kDefaultUnroll<F, kGated>, false, kMatvecWarps, false, true>(p, blockIdx.x,
                                                                                                         columns);
}

// As matvec_norm_out_kernel, warp c also quantizing column c's norm output.
template <class F, int kMaxColumns>
__global__ void __launch_bounds__(kNormOutWarps * 32) matvec_stepwise_norm_out_kernel(const MatvecParams p, int columns) {
  NT_TRACE_BLOCK(kMatvec);
  allow_dependents();
  matvec_block<F, kMaxColumns, false, kNormOutSplit, kDefaultUnroll<F, true>, true, kNormOutWarps, true, true>(
      p, blockIdx.x, columns);
}

// Column c of the one-column launch's block b, as block b * columns + c:
// each column computed by the one-column body, and neighbouring blocks read
// the same weights, so that DRAM serves each weight once through L2.
template <class F, bool kGated, int kSplit>
__global__ void __launch_bounds__(kMatvecWarps * 32) matvec_apart_kernel(const MatvecParams p, int columns) {
  NT_TRACE_BLOCK(kMatvec);
  allow_dependents();
  matvec_block<F, 1, kGated, kSplit, kDefaultUnroll<F, kGated>>(column_params(p, blockIdx.x % columns),
                                                                 blockIdx.x / columns);
}

// As matvec_norm_out_kernel, column by column as matvec_apart_kernel.
template <class F>
__global__ void __launch_bounds__(kNormOutWarps * 32) matvec_apart_norm_out_kernel(const MatvecParams p, int columns) {
  NT_TRACE_BLOCK(kMatvec);
  allow_dependents();
  matvec_block<F, 1, false, kNormOutSplit, kDefaultUnroll<F, true>, true, kNormOutWarps, true>(
      column_params(p, blockIdx.x % columns), blockIdx.x / columns);
}

// Whether `blocks` blocks of kKernel (`threads` each) take at most two
// waves of the GPU: then every column gets blocks of its own, and the launch
// costs about what one column's does (small models, whose one-column launches
// leave most of the GPU idle). On SmolLM2's shapes (H100) two waves beat one
// by 10-65% at 5 to 8 columns, and three to eight gained nothing more.
// Tuning::cuda_columns_apart_waves allows other counts for A/B runs (0: never apart). The
// occupancy is the first device's, asked once per kernel.
template <auto kKernel>
bool columns_fit_apart(int threads, int64_t blocks) {
  const int64_t waves = tuning().cuda_columns_apart_waves;
  static std::atomic<int64_t> resident{-1};
  if (waves <= 0) return false;
  if (resident.load() < 0) {
    int device = 0, multiprocessors = 0, per_multiprocessor = 0;
    NT_CUDA_CHECK(cudaGetDevice(&device));
    NT_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    NT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kKernel, threads, 0));
    resident.store(int64_t(multiprocessors) * per_multiprocessor);
  }
  return blocks <= waves * resident.load();
}

// Launches of up to this many columns take the narrower kernels.
constexpr int kNarrowColumns = 4;

// A stepwise launch, or only its choice (stream null and `ask`): each
// function returns whether the columns get blocks of their own.
struct StepwiseCall {
  const MatvecParams& p;
  int columns;
  cudaStream_t stream;
  bool ask = false;
};

template <class F, bool kGated, int kSplit, int kMaxColumns>
bool launch_split(const StepwiseCall& c) {
  const MatvecParams& p = c.p;
  const int64_t blocks = ceil_div(p.w.rows, kMatvecWarps / kSplit);
  constexpr auto apart = matvec_apart_kernel<F, kGated, kSplit>;
  const bool columns_apart = columns_fit_apart<apart>(kMatvecWarps * 32, blocks * c.columns);
  if (c.ask) return columns_apart;
  if (columns_apart) {
    launch_kernel_with(apart, 1, streamed_weights({&p.w, &p.w_up}), dim3(unsigned(blocks * c.columns)),
                       dim3(kMatvecWarps * 32), 0, c.stream, p, c.columns);
  } else {
    launch_kernel_with(matvec_stepwise_kernel<F, kGated, kSplit, kMaxColumns>, 1, streamed_weights({&p.w, &p.w_up}),
                       dim3(unsigned(blocks)), dim3(kMatvecWarps * 32), 0, c.stream, p, c.columns);
  }
  NT_CUDA_CHECK_LAUNCH();
  return columns_apart;
}

// The choices launch_matvec_decode makes for one column of these params.
template <class F, bool kGated, int kMaxColumns>
bool launch_stepwise(const StepwiseCall& c) {
  const MatvecParams& p = c.p;
  if constexpr (!kGated && F::kQ8) {
    if (p.norm_out.q8) {  // matvec_stepwise checked the rows are whole groups
      const int64_t blocks = p.w.rows / 32;
      constexpr auto apart = matvec_apart_norm_out_kernel<F>;
      const bool columns_apart = columns_fit_apart<apart>(kNormOutWarps * 32, blocks * c.columns);
      if (c.ask) return columns_apart;
      if (columns_apart) {
        launch_kernel_with(apart, 1, streamed_weights({&p.w}), dim3(unsigned(blocks * c.columns)),
                           dim3(kNormOutWarps * 32), 0, c.stream, p, c.columns);
      } else {
        launch_kernel_with(matvec_stepwise_norm_out_kernel<F, kMaxColumns>, 1, streamed_weights({&p.w}),
                           dim3(unsigned(blocks)), dim3(kNormOutWarps * 32), 0, c.stream, p, c.columns);
      }
      NT_CUDA_CHECK_LAUNCH();
      return columns_apart;
    }
  }
  const int split = p.warps_per_row ? p.warps_per_row : default_warps_per_row(p.w.cols / F::kUnitElems);
  switch (split) {
    case 1: return launch_split<F, kGated, 1, kMaxColumns>(c);
    case 2: return launch_split<F, kGated, 2, kMaxColumns>(c);
    case 4: return launch_split<F, kGated, 4, kMaxColumns>(c);
    default: fail("matvec splits a row over 1, 2 or 4 warps, not {}", split);
  }
}

template <class F, bool kGated>
bool launch_columns(const StepwiseCall& c) {
  return c.columns <= kNarrowColumns ? launch_stepwise<F, kGated, kNarrowColumns>(c)
                                     : launch_stepwise<F, kGated, kMatvecMaxColumns>(c);
}

template <class F>
bool launch_format(const StepwiseCall& c) {
  return c.p.w_up.rows ? launch_columns<F, true>(c) : launch_columns<F, false>(c);
}

// The launch (or the choice) for the params' format; nullopt for a format without a mat-vec.
std::optional<bool> stepwise_call(const StepwiseCall& c) {
  switch (c.p.w.type) {
    case TensorType::F32: return launch_format<FormatF32>(c);
    case TensorType::F16: return launch_format<FormatF16>(c);
    case TensorType::BF16: return launch_format<FormatBF16>(c);
    case TensorType::Q4_0: return launch_format<FormatQ4_0>(c);
    case TensorType::Q4_1: return launch_format<FormatQ4_1>(c);
    case TensorType::Q5_0: return launch_format<FormatQ5_0>(c);
    case TensorType::Q5_1: return launch_format<FormatQ5_1>(c);
    case TensorType::Q8_0: return launch_format<FormatQ8_0>(c);
    case TensorType::MXFP4: return launch_format<FormatMXFP4>(c);
    case TensorType::Q2_K: return launch_format<FormatQ2_K>(c);
    case TensorType::Q3_K: return launch_format<FormatQ3_K>(c);
    case TensorType::Q4_K:  // gated: the gated decode mat-vec's units (launch_matvec_kquant)
      return c.p.w_up.rows ? launch_columns<FormatQ4_KPair, true>(c) : launch_columns<FormatQ4_K, false>(c);
    case TensorType::Q5_K: return launch_format<FormatQ5_K>(c);
    case TensorType::Q6_K: return launch_format<FormatQ6_K>(c);
    default: return std::nullopt;
  }
}

}  // namespace

bool launch_matvec_stepwise(const MatvecParams& p, int columns, cudaStream_t stream) {
  return stepwise_call({p, columns, stream}).has_value();
}

bool stepwise_columns_apart(const MatvecParams& p, int columns) {
  return stepwise_call({p, columns, nullptr, true}).value_or(false);
}

}  // namespace nt::cuda
