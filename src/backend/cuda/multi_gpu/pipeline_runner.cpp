#include "backend/cuda/multi_gpu/pipeline_runner.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/multi_gpu/gpu_set.h"
#include "backend/cuda/multi_gpu/hidden_state_link.h"
#include "backend/cuda/multi_gpu/pipeline_stage.h"
#include "backend/cuda/runner/runner_memory.h"
#include "core/error.h"
#include "model/model_weights.h"
#include "planning/device_memory_plan.h"
#include "runtime/chained_progress.h"
#include "runtime/hand_off_slot.h"
#include "runtime/kernel_shapes.h"
#include "runtime/pass_chunks.h"
#include "runtime/run_together.h"
#include "storage/host_memory.h"
#include "storage/layer_reads.h"

namespace nt {
namespace {

// Each stage writes its own trace: stage g of "t.json" to "t.stage<g>.json".
std::string stage_trace_path(const std::string& path, size_t stage) {
  if (path.empty()) return path;
  const std::filesystem::path p(path);
  return (p.parent_path() / fmt::format("{}.stage{}{}", p.stem().string(), stage, p.extension().string())).string();
}

class CudaPipelineRunner final : public ModelRunner {
 public:
  CudaPipelineRunner(const GgufFile& file, int64_t context, const CudaPipelineOptions& options, const MultiGpuPlan& plan);

  const ModelSpec& config() const override { return config_; }
  std::string description() const override;
  uint64_t weight_bytes_per_token() const override;
  std::vector<LayerPlace> layer_places() const override {
    std::vector<LayerPlace> places;
    for (const auto& stage : stages_) {
      const std::vector<LayerPlace> own = stage->layer_places();
      places.insert(places.end(), own.begin(), own.end());
    }
    return places;
  }
  uint64_t kv_bytes_per_position() const override { return cache_bytes_per_position(config_); }
  int64_t pass_chunk_entries() const override { return max_batch_; }
  bool verifies_trees_exactly(int64_t pos, int64_t tokens) const override {
    return std::all_of(stages_.begin(), stages_.end(),
                       [&](const auto& stage) { return stage->verifies_trees_exactly(pos, tokens); });
  }

 protected:
  // Every pass comes through forward_pages with the caller's schedule.
  bool honours_default_schedule() const override { return true; }
  void forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t> layers,
                     BatchOutputs& out) override;
  void copy_pages(std::span<const PageCopy> copies) override;
  void copy_rows(std::span<const RowCopy> copies) override;

 private:
  // Stage g's part of a pass: each chunk from the stage before (its hand-off
  // slot filled), through its layers, on to the next stage (once that one is
  // done with the chunk before). `overlapped`: the stages run on threads of
  // their own, so a stage's residual stream must be read out before the
  // stage before it may refill it.
  void run_stage(size_t g, const Batch& batch, std::span<const SequenceRun> runs, BatchOutputs& out, bool overlapped);
  // run_stage on threads of their own, stage 0 on this one; rethrows the
  // first stage's error after stopping the others.
  void run_stages_overlapped(const Batch& batch, std::span<const SequenceRun> runs, BatchOutputs& out);

  ModelSpec config_;
  int64_t max_batch_;
  int micro_batches_;                                    // per decode step of several sequences
  std::vector<PassChunk> chunks_;                        // the running pass's chunks
  std::vector<int64_t> first_layer_, end_layer_;       // per stage
  std::vector<std::unique_ptr<PipelineStage>> stages_;  // in layer order
  std::vector<std::unique_ptr<HiddenStateLink>> links_;  // links_[g]: stage g to stage g + 1
  std::vector<HandOffSlot> hand_offs_;                   // hand_offs_[g]: stage g + 1's residual stream
  std::vector<std::vector<int32_t>> stage_layers_;      // a pass's scheduled layers of each stage
};

CudaPipelineRunner::CudaPipelineRunner(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                       const MultiGpuPlan& plan)
    : config_(read_model_spec(file.header(), file.path())),
      max_batch_(options.runner.max_batch),
      micro_batches_(options.micro_batches > 0 ? options.micro_batches : int(plan.gpus.size())) {
  if (plan.split != Split::Layer) fail("the pipeline runs a layer split, not a {} split", split_name(plan.split));
  if (context <= 0) fail("{}: context size must be positive, got {}", file.path(), context);
  if (plan.gpus.empty()) fail("a layer split needs at least one stage");
  if (options.micro_batches < 0) fail("a decode step in {} micro-batches: give 1 or more, or 0 for one a stage", options.micro_batches);
  std::vector<int> ids;
  for (const GpuPlacement& p : plan.gpus) ids.push_back(p.gpu.id);
  require_gpus(ids);  // an absent GPU is named before anything loads
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    const GpuPlacement& p = plan.gpus[g];
    const int64_t expected_first = g == 0 ? 0 : plan.gpus[g - 1].end_layer;
    if (p.first_layer != expected_first || p.end_layer <= p.first_layer ||
        (g + 1 == plan.gpus.size() && p.end_layer != config_.n_layers)) {
      fail("the layer split's stage {} (GPU {}) runs layers [{}, {}): the stages must cover the model's {} layers in order",
           g, p.gpu.id, p.first_layer, p.end_layer, config_.n_layers);
    }
  }
  // The stages' pools: pages of one KV tile, each sequence's whole context.
  init_pages(KvPages(KvPages::pool_pages(options.runner.kv_pool, options.runner.max_sequences, context, kKvTile), kKvTile,
                     context, options.runner.max_sequences));

  ChainedProgress progress(options.runner.on_load_progress);  // over all stages
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    const GpuPlacement& p = plan.gpus[g];
    CudaRunnerOptions stage = options.runner;
    stage.device = p.gpu.id;
    stage.stage = StageLayers{p.first_layer, p.end_layer, p.plan.layer_tier, {}};
    stage.cpu_layers = 0;
    stage.trace_path = stage_trace_path(options.runner.trace_path, g);
    stage.on_load_progress = progress.next();
    stages_.push_back(make_pipeline_stage(file, context, stage));
    first_layer_.push_back(p.first_layer);
    end_layer_.push_back(p.end_layer);
  }
  const uint64_t hidden_bytes = uint64_t(max_batch_) * uint64_t(config_.dim) * sizeof(float);
  for (size_t g = 0; g + 1 < stages_.size(); ++g) {
    links_.push_back(std::make_unique<HiddenStateLink>(stages_[g]->device(), stages_[g + 1]->device(), hidden_bytes));
  }
  stage_layers_.resize(stages_.size());
  hand_offs_ = std::vector<HandOffSlot>(links_.size());
}

std::string CudaPipelineRunner::description() const {
  std::string stages;
  for (size_t g = 0; g < stages_.size(); ++g) {
    stages += fmt::format("{}stage {}: {}", g ? "; " : "", g, stages_[g]->description());
    if (g + 1 < stages_.size()) stages += fmt::format("; hand-off {}", links_[g]->route());
  }
  return fmt::format("layer split over {} stages: {}", stages_.size(), stages);
}

uint64_t CudaPipelineRunner::weight_bytes_per_token() const {
  uint64_t bytes = 0;
  for (const auto& s : stages_) bytes += s->weight_bytes_per_token();
  return bytes;
}

void CudaPipelineRunner::copy_pages(std::span<const PageCopy> copies) {
  for (const auto& s : stages_) s->copy_kv_pages(copies);
}

void CudaPipelineRunner::copy_rows(std::span<const RowCopy> copies) {
  for (const auto& s : stages_) s->move_rows(copies);
}

// Each chunk through every stage in turn: stage g + 1 continues from the
// hidden state stage g left, each running its share of the schedule. A pass
// of several chunks (or micro-batches) overlaps them: stage g computes chunk
// k + 1 while stage g + 1 computes chunk k.
void CudaPipelineRunner::forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t> layers,
                                       BatchOutputs& out) {
  for (size_t g = 0; g < stages_.size(); ++g) {
    stage_layers_[g].clear();
    for (const int32_t l : layers) {
      if (l >= first_layer_[g] && l < end_layer_[g]) stage_layers_[g].push_back(l);
    }
  }
  for (HandOffSlot& slot : hand_offs_) slot.reset();
  const bool decode_step = std::all_of(runs.begin(), runs.end(), [](const SequenceRun& r) { return r.count == 1; });
  chunks_ = pass_chunks(int64_t(batch.size()), decode_step, max_batch_, micro_batches_);
  if (stages_.size() > 1 && chunks_.size() > 1) {
    run_stages_overlapped(batch, runs, out);
    return;
  }
  for (size_t g = 0; g < stages_.size(); ++g) run_stage(g, batch, runs, out, false);
}

void CudaPipelineRunner::run_stage(size_t g, const Batch& batch, std::span<const SequenceRun> runs, BatchOutputs& out,
                                   bool overlapped) {
  const uint64_t row_bytes = uint64_t(config_.dim) * sizeof(float);
  PipelineStage& stage = *stages_[g];
  for (const auto [at, n] : chunks_) {
    if (g > 0) hand_offs_[g - 1].wait_filled();
    stage.run_batch_chunk(batch, runs, kv_pages(), at, n, stage_layers_[g], out);
    if (g + 1 < stages_.size()) {
      PipelineStage& next = *stages_[g + 1];
      hand_offs_[g].wait_free();
      links_[g]->carry(stage.hidden(), stage.stream(), next.hidden(), next.stream(), uint64_t(n) * row_bytes);
      if (overlapped) NT_CUDA_CHECK(cudaStreamSynchronize(stage.stream()));
      hand_offs_[g].fill();
    }
    if (g > 0) hand_offs_[g - 1].free();
  }
}

void CudaPipelineRunner::run_stages_overlapped(const Batch& batch, std::span<const SequenceRun> runs, BatchOutputs& out) {
  run_together<HandOffAborted>(
      stages_.size(), [&](size_t g) { run_stage(g, batch, runs, out, true); },
      [&] {
        for (HandOffSlot& slot : hand_offs_) slot.abort();
      });
}

}  // namespace

CudaPipelineRequest cuda_pipeline_request(const GgufFile& file, int64_t context, const CudaPipelineOptions& o) {
  if (o.gpus.empty()) fail("a pipeline needs at least one GPU");
  if (!o.vram_budgets.empty() && o.vram_budgets.size() != o.gpus.size()) {
    fail("{} VRAM budgets for {} pipeline stages: give one per stage", o.vram_budgets.size(), o.gpus.size());
  }
  const std::vector<CudaDeviceInfo> gpus = require_gpus(o.gpus);
  const ModelSpec c = read_model_spec(file.header(), file.path());
  const ModelWeights w = load_model_weights(file, c);
  const OpenedReader opened = open_layer_reader(file.path(), o.runner);
  const std::vector<LayerRead> reads = plan_layer_reads(file.header(), opened.reader->alignment(), file.path());
  // One reserve for every stage: the activations of the GPU with the most
  // multiprocessors (the attention's key splits grow with them).
  int sms = 0;
  for (const CudaDeviceInfo& g : gpus) sms = std::max(sms, g.multiprocessors);
  const RunnerBuffers buffers =
      runner_buffers(c, w, context, kv_cache_context(context), o.runner.max_batch, o.runner.max_sequences, sms, o.runner.kv_pool);
  std::vector<uint64_t> free_bytes;
  for (const CudaDeviceInfo& g : gpus) free_bytes.push_back(g.free_memory);
  const std::vector<uint64_t> budgets = o.vram_budgets.empty() ? free_vram_budgets(o.gpus, free_bytes) : o.vram_budgets;
  std::vector<GpuResources> resources;
  for (size_t g = 0; g < o.gpus.size(); ++g) resources.push_back({o.gpus[g], budgets[g], 0, 0});
  const uint64_t ram_budget =
      o.runner.ram_budget ? *o.runner.ram_budget : automatic_ram_budget(host_mem_available(), c, o.runner.max_batch).budget;
  CudaPipelineRequest r;
  r.footprint = device_footprint(c, w, reads);
  r.request = device_multi_gpu_request(file.header(), c, r.footprint, buffers, std::move(resources), ram_budget,
                                       o.runner.ring_slots);
  return r;
}

std::unique_ptr<ModelRunner> make_cuda_pipeline(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                                const MultiGpuPlan& plan) {
  return std::make_unique<CudaPipelineRunner>(file, context, options, plan);
}

}  // namespace nt
