#include "backend/cuda/tensor_parallel_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <vector>

#include "backend/cuda/gpu_set.h"
#include "backend/cuda/nccl_comm.h"
#include "backend/cuda/pipeline_stage.h"
#include "backend/cuda/residual_reducer.h"
#include "core/error.h"
#include "model/llama_weights.h"
#include "runtime/chained_progress.h"
#include "runtime/kernel_shapes.h"
#include "runtime/run_together.h"

namespace nt {
namespace {

class CudaTensorParallelRunner final : public ModelRunner {
 public:
  CudaTensorParallelRunner(const GgufFile& file, int64_t context, const CudaPipelineOptions& options, const MultiGpuPlan& plan);

  const LlamaConfig& config() const override { return config_; }
  std::string description() const override;
  uint64_t weight_bytes_per_token() const override;
  uint64_t kv_bytes_per_position() const override { return cache_bytes_per_position(config_); }
  int64_t pass_chunk_entries() const override { return max_batch_; }
  bool verifies_trees_exactly(int64_t pos, int64_t tokens) const override {
    return std::all_of(ranks_.begin(), ranks_.end(), [&](const auto& rank) { return rank->verifies_trees_exactly(pos, tokens); });
  }

 protected:
  bool honours_default_schedule() const override { return true; }
  void forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t> layers,
                     BatchOutputs& out) override;
  void copy_pages(std::span<const PageCopy> copies) override {
    for (const auto& rank : ranks_) rank->copy_kv_pages(copies);
  }
  void copy_rows(std::span<const RowCopy> copies) override {
    for (const auto& rank : ranks_) rank->move_rows(copies);
  }

 private:
  // The reducers for the plan's GPUs: NCCL over distinct GPUs, shared memory on one.
  void join_ranks(const std::vector<int>& gpus);

  LlamaConfig config_;
  int64_t max_batch_;
  std::vector<std::unique_ptr<NcclComm>> comms_;
  std::vector<std::unique_ptr<ResidualReducer>> reducers_;
  std::vector<std::unique_ptr<PipelineStage>> ranks_;  // declared last: gone before the reducers they use
};

CudaTensorParallelRunner::CudaTensorParallelRunner(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                                   const MultiGpuPlan& plan)
    : config_(read_llama_config(file.header(), file.path())), max_batch_(options.runner.max_batch) {
  if (plan.split != Split::Tensor) fail("the tensor-parallel runner runs a tensor split, not a {} split", split_name(plan.split));
  if (context <= 0) fail("{}: context size must be positive, got {}", file.path(), context);
  if (plan.gpus.empty()) fail("a tensor split needs at least one rank");
  std::vector<int> ids;
  for (const GpuPlacement& p : plan.gpus) ids.push_back(p.gpu.id);
  require_gpus(ids);  // an absent GPU is named before anything loads
  int64_t kv_head = 0, ffn_column = 0;
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    const GpuPlacement& p = plan.gpus[g];
    if (p.first_kv_head != kv_head || p.first_ffn_column != ffn_column ||
        int64_t(p.plan.layer_tier.size()) != config_.n_layers) {
      fail("the tensor split's rank {} (GPU {}) holds KV heads from {} and FFN columns from {} over {} layers: the ranks "
           "must cover the model's heads and columns in order, each over all {} layers",
           g, p.gpu.id, p.first_kv_head, p.first_ffn_column, p.plan.layer_tier.size(), config_.n_layers);
    }
    kv_head += p.kv_heads;
    ffn_column += p.ffn_columns;
  }
  if (kv_head != config_.n_kv_heads || ffn_column != config_.ffn_dim) {
    fail("the tensor split's ranks hold {} of {} KV heads and {} of {} FFN columns", kv_head, config_.n_kv_heads,
         ffn_column, config_.ffn_dim);
  }
  join_ranks(ids);
  init_pages(KvPages(KvPages::pool_pages(options.runner.kv_pool, options.runner.max_sequences, context, kKvTile), kKvTile,
                     context, options.runner.max_sequences));
  ChainedProgress progress(options.runner.on_load_progress);  // over all ranks
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    const GpuPlacement& p = plan.gpus[g];
    CudaRunnerOptions rank = options.runner;
    rank.device = p.gpu.id;
    const TensorShard shard{p.first_kv_head, p.kv_heads, p.first_ffn_column, p.ffn_columns};
    rank.stage = StageLayers{0, config_.n_layers, p.plan.layer_tier, TensorRank{int(g), shard, reducers_[g].get()}};
    rank.cpu_layers = 0;
    rank.trace_path.clear();  // a rank streams nothing to trace
    rank.on_load_progress = progress.next();
    ranks_.push_back(make_pipeline_stage(file, context, rank));
  }
}

void CudaTensorParallelRunner::join_ranks(const std::vector<int>& gpus) {
  const std::set<int> distinct(gpus.begin(), gpus.end());
  if (distinct.size() == 1) {  // every rank on one GPU (the test mode; one rank sums nothing)
    reducers_ = shared_gpu_reducers(int(gpus.size()));
    return;
  }
  if (distinct.size() != gpus.size()) {
    fail("a tensor split over GPUs {}: its ranks need distinct GPUs, or one GPU for all of them (the test mode)",
         fmt::join(gpus, ","));
  }
  comms_ = NcclComm::join_local_gpus(NcclLibrary::get(), gpus);
  for (const auto& comm : comms_) reducers_.push_back(nccl_reducer(*comm));
}

std::string CudaTensorParallelRunner::description() const {
  std::string ranks;
  for (size_t g = 0; g < ranks_.size(); ++g) ranks += fmt::format("{}{}", g ? "; " : "", ranks_[g]->description());
  return fmt::format("tensor split over {} ranks ({}): {}", ranks_.size(),
                     comms_.empty() ? "sums through one GPU" : "NCCL all-reduce", ranks);
}

uint64_t CudaTensorParallelRunner::weight_bytes_per_token() const {
  uint64_t bytes = 0;
  for (const auto& rank : ranks_) bytes += rank->weight_bytes_per_token();
  return bytes;
}

// Every rank runs every chunk through the schedule's layers, all at once:
// the sums inside the layers need every rank's part. Rank 0 runs on this
// thread and writes the outputs. A rank's error wakes the others' waits and
// is rethrown here.
void CudaTensorParallelRunner::forward_pages(const Batch& batch, std::span<const SequenceRun> runs,
                                             std::span<const int32_t> layers, BatchOutputs& out) {
  const int64_t total = int64_t(batch.size());
  for (const auto& reducer : reducers_) reducer->rearm();  // after a pass that failed
  run_together<ReductionAborted>(
      ranks_.size(),
      [&](size_t g) {
        for (int64_t at = 0; at < total; at += max_batch_) {
          ranks_[g]->run_batch_chunk(batch, runs, kv_pages(), at, std::min(max_batch_, total - at), layers, out);
        }
      },
      [&] {
        for (const auto& reducer : reducers_) reducer->abort();
      });
}

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_tensor_parallel(const GgufFile& file, int64_t context,
                                                       const CudaPipelineOptions& options, const MultiGpuPlan& plan) {
  return std::make_unique<CudaTensorParallelRunner>(file, context, options, plan);
}

}  // namespace nt
