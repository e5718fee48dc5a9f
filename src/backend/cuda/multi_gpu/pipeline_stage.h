// One stage of a layer-split pipeline (pipeline_runner.h): the CUDA runner
// over a contiguous range of layers on one GPU (CudaRunnerOptions::stage).
// The pipeline keeps the books of the sequences and hands every stage the
// same chunks of a batch; a stage runs its layers over the hidden state in
// hidden() and the next stage continues from a copy of it. The first stage
// fills hidden() from the token embedding, the last ends in the head.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/cuda/runner/cuda_runner.h"
#include "runtime/batch.h"
#include "runtime/kv_pages.h"

namespace nt {

class PipelineStage {
 public:
  virtual ~PipelineStage() = default;

  virtual std::string description() const = 0;
  virtual uint64_t weight_bytes_per_token() const = 0;
  // ModelRunner::layer_places for the stage's own layers, in order.
  virtual std::vector<LayerPlace> layer_places() const = 0;
  virtual int device() const = 0;
  // The compute stream: a chunk's hidden state is complete in hidden() once
  // the work queued on it is.
  virtual cudaStream_t stream() const = 0;
  // The residual stream, [rows][dim] floats on device(): where the previous
  // stage's hidden state goes before a chunk and this stage's comes from after.
  virtual float* hidden() = 0;

  // Entries [at, at + n) of `batch` through the scheduled `layers` of this
  // stage's range (in order, possibly none); `pages` are the pipeline's
  // books of the runs' sequences, whose pages every stage's pool mirrors.
  // The stage that holds the head writes what the entries ask for into
  // `out` (prepared for the batch); the others leave it alone. Returns with
  // the stream synchronized.
  virtual void run_batch_chunk(const Batch& batch, std::span<const SequenceRun> runs, const KvPages& pages, int64_t at,
                               int64_t n, std::span<const int32_t> layers, BatchOutputs& out) = 0;
  // Copies the stage's K and V of whole KV pages.
  virtual void copy_kv_pages(std::span<const PageCopy> copies) = 0;
  // Moves the stage's K and V rows (a token tree's accepted path).
  virtual void move_rows(std::span<const RowCopy> copies) = 0;
  // As ModelRunner::verifies_trees_exactly, for this stage's layers.
  virtual bool verifies_trees_exactly(int64_t pos, int64_t tokens) const = 0;
};

// options.stage must be set; everything else as make_cuda_runner.
std::unique_ptr<PipelineStage> make_pipeline_stage(const GgufFile& file, int64_t context, const CudaRunnerOptions& options);

}  // namespace nt
