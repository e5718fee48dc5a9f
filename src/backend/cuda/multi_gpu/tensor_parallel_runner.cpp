#include "backend/cuda/multi_gpu/tensor_parallel_runner.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <set>
#include <variant>
#include <vector>

#include "backend/cuda/multi_gpu/gpu_set.h"
#include "backend/cuda/multi_gpu/nccl_comm.h"
#include "backend/cuda/multi_gpu/pipeline_stage.h"
#include "backend/cuda/multi_gpu/residual_reducer.h"
#include "core/error.h"
#include "model/model_weights.h"
#include "runtime/chained_progress.h"
#include "runtime/kernel_shapes.h"
#include "runtime/rank_messages.h"
#include "runtime/run_together.h"

namespace nt {
namespace {

// A tensor-split rank's runner options: the shard over every layer, at the
// tiers given (VRAM, or pinned RAM its cuts stream from), adding through `reducer`.
CudaRunnerOptions rank_options(CudaRunnerOptions rank, int gpu, int index, const TensorShard& shard,
                               ResidualReducer* reducer, std::vector<Tier> tiers) {
  const int64_t layers = int64_t(tiers.size());
  rank.device = gpu;
  rank.stage = StageLayers{0, layers, std::move(tiers), TensorRank{index, shard, reducer}};
  rank.cpu_layers = 0;
  rank.trace_path.clear();  // the ranks would all write one file
  return rank;
}

ModelCheck model_check(const GgufFile& file, const ModelSpec& config) {
  return {config.n_layers, config.dim, config.vocab_size, file.file_size()};
}

// This host and PID namespace: where a process id names the same process.
std::string process_space() {
  char host[256] = {}, pids[64] = {};
  if (gethostname(host, sizeof host - 1) != 0 || readlink("/proc/self/ns/pid", pids, sizeof pids - 1) <= 0) return {};
  return fmt::format("{} {}", host, pids);
}

// Where rank 0's process ids mean what they mean here, a follower checks
// while it waits that rank 0's process still runs: one killed without
// closing its model sends no stop.
void watch_leader(RankChannel& channel, const RankSetup& setup) {
  if (setup.leader_space.empty() || setup.leader_space != process_space()) return;
  const pid_t pid = pid_t(setup.leader_pid);
  const int rank = channel.rank();
  channel.watch_sender([pid, rank] {
    if (kill(pid, 0) != 0 && errno == ESRCH) fail("tensor-split rank {}: rank 0 (process {}) is gone", rank, pid);
  });
}

class CudaTensorParallelRunner final : public ModelRunner {
 public:
  // All ranks in this process, or (followers set) rank 0 here and the others
  // following over its channel.
  CudaTensorParallelRunner(const GgufFile& file, int64_t context, const CudaPipelineOptions& options, const MultiGpuPlan& plan,
                           std::optional<RankLink> followers);
  ~CudaTensorParallelRunner() override;

  const ModelSpec& config() const override { return config_; }
  std::string description() const override;
  uint64_t weight_bytes_per_token() const override;
  // Rank 0's: every rank holds a shard of every layer and places its own (even shards alike).
  std::vector<LayerPlace> layer_places() const override { return ranks_.front()->layer_places(); }
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
    tell_followers(RankPageCopies{{copies.begin(), copies.end()}});
    for (const auto& rank : ranks_) rank->copy_kv_pages(copies);
  }
  void copy_rows(std::span<const RowCopy> copies) override {
    tell_followers(RankRowMoves{{copies.begin(), copies.end()}});
    for (const auto& rank : ranks_) rank->move_rows(copies);
  }

 private:
  // The reducers for the plan's GPUs: NCCL over distinct GPUs, shared memory on one.
  void join_ranks(const std::vector<int>& gpus);
  void tell_followers(const RankMessage& message) {
    if (followers_.channel) followers_.channel->send(encode_rank_message(message));
  }

  ModelSpec config_;
  int64_t max_batch_;
  int n_ranks_ = 0;
  uint64_t follower_weight_bytes_ = 0;  // the other processes' shards, as planned
  RankLink followers_;  // rank 0's ties to ranks in other processes; empty when all are here
  std::vector<std::unique_ptr<NcclComm>> comms_;
  std::vector<std::unique_ptr<ResidualReducer>> reducers_;
  std::vector<std::unique_ptr<PipelineStage>> ranks_;  // declared last: gone before the reducers they use
};

CudaTensorParallelRunner::CudaTensorParallelRunner(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                                   const MultiGpuPlan& plan, std::optional<RankLink> followers)
    : config_(read_model_spec(file.header(), file.path())), max_batch_(options.runner.max_batch), n_ranks_(int(plan.gpus.size())) {
  if (plan.split != Split::Tensor) fail("the tensor-parallel runner runs a tensor split, not a {} split", split_name(plan.split));
  if (context <= 0) fail("{}: context size must be positive, got {}", file.path(), context);
  if (plan.gpus.empty()) fail("a tensor split needs at least one rank");
  std::vector<int> ids;
  std::vector<TensorShard> shards;
  std::vector<std::vector<Tier>> tiers;
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
    ids.push_back(p.gpu.id);
    shards.push_back({p.first_kv_head, p.kv_heads, p.first_ffn_column, p.ffn_columns});
    tiers.push_back(p.plan.layer_tier);
  }
  if (kv_head != config_.n_kv_heads || ffn_column != config_.ffn_dim) {
    fail("the tensor split's ranks hold {} of {} KV heads and {} of {} FFN columns", kv_head, config_.n_kv_heads,
         ffn_column, config_.ffn_dim);
  }
  init_pages(KvPages(KvPages::pool_pages(options.runner.kv_pool, options.runner.max_sequences, context, kKvTile), kKvTile,
                     context, options.runner.max_sequences));
  size_t local_ranks = plan.gpus.size();
  if (followers) {
    if (followers->channel->ranks() != n_ranks_ || followers->channel->rank() != 0) {
      fail("rank 0 of a tensor split of {} ranks was joined as rank {} of {}", n_ranks_, followers->channel->rank(),
           followers->channel->ranks());
    }
    followers_ = std::move(*followers);
    reducers_.push_back(std::move(followers_.reducer));
    local_ranks = 1;
    for (size_t g = 1; g < plan.gpus.size(); ++g) follower_weight_bytes_ += plan.gpus[g].plan.vram_layers;
    // The followers load their shards while rank 0 loads its own.
    tell_followers(RankSetup{int64_t(getpid()), process_space(), model_check(file, config_), shards, tiers, context,
                             max_batch_, options.runner.max_sequences, options.runner.kv_pool});
  } else {
    require_gpus(ids);  // an absent GPU is named before anything loads
    join_ranks(ids);
  }
  ChainedProgress progress(options.runner.on_load_progress);  // over the ranks loaded here
  try {
    for (size_t g = 0; g < local_ranks; ++g) {
      const GpuPlacement& p = plan.gpus[g];
      CudaRunnerOptions rank = rank_options(options.runner, p.gpu.id, int(g), shards[g], reducers_[g].get(), p.plan.layer_tier);
      rank.on_load_progress = progress.next();
      ranks_.push_back(make_pipeline_stage(file, context, rank));
    }
  } catch (...) {
    if (followers_.channel) followers_.channel->count_failed(true);  // the followers stop instead of waiting for passes
    throw;
  }
  if (followers_.channel) {
    const int failed = followers_.channel->count_failed(false);
    if (failed > 0) fail("{} of the tensor split's {} ranks could not load their shards: their own output says why", failed, n_ranks_);
  }
}

CudaTensorParallelRunner::~CudaTensorParallelRunner() {
  try {
    tell_followers(RankStop{});
  } catch (const std::exception&) {
    // The followers are gone already; nothing is left to stop.
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
  std::string how = comms_.empty() ? "sums through one GPU" : "NCCL all-reduce";
  if (followers_.channel) {
    how = followers_.comm ? "NCCL all-reduce; the ranks past the first follow in processes of their own"
                          : "sums through one GPU; the ranks past the first follow on threads of their own";
  }
  return fmt::format("tensor split over {} ranks ({}): {}", n_ranks_, how, ranks);
}

uint64_t CudaTensorParallelRunner::weight_bytes_per_token() const {
  uint64_t bytes = follower_weight_bytes_;
  for (const auto& rank : ranks_) bytes += rank->weight_bytes_per_token();
  return bytes;
}

// Every rank runs every chunk through the schedule's layers, all at once:
// the sums inside the layers need every rank's part. Ranks in other
// processes get the pass first; rank 0 runs on this thread and writes the
// outputs. A rank's error wakes the others' waits (of this process) and is
// rethrown here.
void CudaTensorParallelRunner::forward_pages(const Batch& batch, std::span<const SequenceRun> runs,
                                             std::span<const int32_t> layers, BatchOutputs& out) {
  // Rearmed after a pass that failed, and before a follower can reach a sum of this one.
  for (const auto& reducer : reducers_) reducer->rearm();
  tell_followers(RankPass{batch, {layers.begin(), layers.end()}, books_of(kv_pages(), runs)});
  const int64_t total = int64_t(batch.size());
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

// A rank past the first: its runner, then rank 0's messages in order.
class TensorRankFollower {
 public:
  TensorRankFollower(const GgufFile& file, int gpu, RankLink link, const CudaRunnerOptions& options);
  // Runs rank 0's passes and KV moves until rank 0 stops.
  void follow();

 private:
  void run(const RankPass& pass);

  RankLink link_;
  std::optional<KvPages> books_;  // rank 0's books of the sequences of each pass
  std::unique_ptr<PipelineStage> stage_;
  int64_t max_batch_ = 0;
  BatchOutputs unused_;  // a rank past the first writes no outputs
};

TensorRankFollower::TensorRankFollower(const GgufFile& file, int gpu, RankLink link, const CudaRunnerOptions& options)
    : link_(std::move(link)) {
  const int rank = link_.channel->rank();
  bool loaded = false;
  try {
    const RankMessage first = decode_rank_message(link_.channel->receive());
    const auto* setup = std::get_if<RankSetup>(&first);
    if (!setup) fail("tensor-split rank {}: rank 0's first message is not its setup", rank);
    watch_leader(*link_.channel, *setup);
    const ModelSpec config = read_model_spec(file.header(), file.path());
    const ModelCheck mine = model_check(file, config);
    if (!(mine == setup->model)) {
      fail("tensor-split rank {}: {} ({} layers, width {}, {} tokens, {} bytes) is not the model rank 0 runs ({} layers, "
           "width {}, {} tokens, {} bytes)",
           rank, file.path(), mine.n_layers, mine.dim, mine.vocab_size, mine.file_bytes, setup->model.n_layers,
           setup->model.dim, setup->model.vocab_size, setup->model.file_bytes);
    }
    if (int64_t(setup->shards.size()) != link_.channel->ranks()) {
      fail("tensor-split rank {}: rank 0 planned {} ranks, this rank joined {}", rank, setup->shards.size(), link_.channel->ranks());
    }
    CudaRunnerOptions o =
        rank_options(options, gpu, rank, setup->shards[size_t(rank)], link_.reducer.get(), setup->tiers[size_t(rank)]);
    o.max_batch = max_batch_ = setup->max_batch;
    o.max_sequences = int(setup->max_sequences);
    o.kv_pool = setup->kv_pool;
    books_.emplace(KvPages::pool_pages(o.kv_pool, o.max_sequences, setup->context, kKvTile), kKvTile, setup->context,
                   o.max_sequences);
    stage_ = make_pipeline_stage(file, setup->context, o);
    loaded = true;
  } catch (...) {
    link_.channel->count_failed(true);  // rank 0 stops waiting for this rank
    throw;
  }
  if (link_.channel->count_failed(!loaded) > 0) fail("tensor-split rank {}: another rank could not load its shard", rank);
}

void TensorRankFollower::follow() {
  try {
    for (;;) {
      const RankMessage message = decode_rank_message(link_.channel->receive());
      if (std::holds_alternative<RankStop>(message)) return;
      if (const auto* pass = std::get_if<RankPass>(&message)) run(*pass);
      if (const auto* copies = std::get_if<RankPageCopies>(&message)) stage_->copy_kv_pages(copies->copies);
      if (const auto* moves = std::get_if<RankRowMoves>(&message)) stage_->move_rows(moves->moves);
      if (std::holds_alternative<RankSetup>(message)) fail("tensor-split rank {}: rank 0 sent a second setup", link_.channel->rank());
    }
  } catch (...) {
    link_.reducer->abort();  // ranks waiting on the host for this one's sums fail instead of waiting forever
    throw;
  }
}

void TensorRankFollower::run(const RankPass& pass) {
  for (const SequenceBooks& b : pass.books) books_->mirror(b.seq, b.length, b.pages);
  const std::vector<SequenceRun> runs = sequence_runs(pass.batch);
  const int64_t total = int64_t(pass.batch.size());
  try {
    for (int64_t at = 0; at < total; at += max_batch_) {
      stage_->run_batch_chunk(pass.batch, runs, *books_, at, std::min(max_batch_, total - at), pass.layers, unused_);
    }
  } catch (const ReductionAborted&) {
    // Rank 0's part of this pass failed (it reports why); the next message starts afresh.
  }
}

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_tensor_parallel(const GgufFile& file, int64_t context,
                                                       const CudaPipelineOptions& options, const MultiGpuPlan& plan) {
  return std::make_unique<CudaTensorParallelRunner>(file, context, options, plan, std::nullopt);
}

std::unique_ptr<ModelRunner> make_cuda_tensor_leader(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                                     const MultiGpuPlan& plan, RankLink followers) {
  return std::make_unique<CudaTensorParallelRunner>(file, context, options, plan, std::move(followers));
}

void follow_tensor_rank(const GgufFile& file, int gpu, RankLink link, const CudaRunnerOptions& options) {
  TensorRankFollower(file, gpu, std::move(link), options).follow();
}

}  // namespace nt
