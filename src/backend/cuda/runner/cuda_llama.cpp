// CudaLlamaRunner: a decoder's forward pass on one GPU, Llama's and the other
// families' (their layers' specs, LayerPass; the embedding scale and the
// logits' soft-cap here). Layers that fit the VRAM
// budget are resident; the rest stream per pass through a LayerStreamer
// (layer_stream.h) from pinned RAM or storage; DeviceWeights (device_weights.h)
// places and uploads them; LayerPass (layer_pass.h) computes each layer over a
// chunk's rows, HybridPass (hybrid_pass.h) the layers a hybrid split gives the
// host; the runner drives the layer loop, the head and the sequences' pages.
// Resident decode steps replay a captured CUDA graph (one for positions below
// kShortDecodeMaxKeys, whose attention needs no key splits, one for the rest);
// the position and token live in device memory, so the graphs never need
// updating. Prefill runs in chunks of up to max_batch tokens: short chunks
// through the multi-column mat-vec, long ones through dequantize + cuBLAS GEMM.
// Batches of many sequences run the same layer loop over one paged KV pool,
// each sequence reading its pages from the block table (page_table.h;
// runner_memory.h plans the device memory; batched decode steps replay a graph
// per sequence count). A batch's stepwise runs (speculative verification)
// compute each of their rows as a one-token step does, in the same pass
// (LayerPass::stepwise_layer).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/dequantize.h"
#include "backend/cuda/kernels/family_ops.h"
#include "backend/cuda/kernels/gemm.h"
#include "backend/cuda/kernels/kv_rows.h"
#include "backend/cuda/kernels/llama_ops.h"
#include "backend/cuda/kernels/matvec.h"
#include "backend/cuda/kernels/sample_top.h"
#include "backend/cuda/kernels/top_logits.h"
#include "backend/cuda/multi_gpu/pipeline_stage.h"
#include "backend/cuda/multi_gpu/residual_reducer.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "backend/cuda/runner/decode_ahead.h"
#include "backend/cuda/runner/expert_ffn.h"
#include "backend/cuda/runner/graph_cache.h"
#include "backend/cuda/runner/layer_pass.h"
#include "backend/cuda/runner/page_table.h"
#include "backend/cuda/runner/pass_buffers.h"
#include "backend/cuda/runner/runner_switches.h"
#include "backend/cuda/runner/saved_kv_rows.h"
#include "backend/cuda/weights/device_matrix.h"
#include "backend/cuda/weights/device_weights.h"
#include "backend/cuda/weights/hybrid_pass.h"
#include "backend/cuda/weights/layer_stream.h"
#include "model/model_weights.h"
#include "runtime/tree_mask.h"

namespace nt {
namespace {

// Also a stage of a layer-split pipeline (pipeline_stage.h) when
// options.stage names its layers: it then holds only those, and the pipeline
// keeps the sequences' books.
class CudaLlamaRunner final : public ModelRunner, public PipelineStage {
 public:
  CudaLlamaRunner(const GgufFile& file, int64_t context, const CudaRunnerOptions& options);
  ~CudaLlamaRunner() override;

  const ModelSpec& config() const override { return config_; }
  std::string description() const override;
  uint64_t weight_bytes_per_token() const override { return weights_->bytes_per_token(); }
  uint64_t kv_bytes_per_position() const override { return cache_bytes_per_position(config_); }
  std::vector<LayerPlace> layer_places() const override {
    std::vector<LayerPlace> places;
    for (int64_t l = first_layer_; l < end_layer_; ++l) {
      const Tier tier = weights_->tier(l);
      places.push_back(on_host(l)             ? LayerPlace::Cpu
                       : tier == Tier::Vram ? LayerPlace::Vram
                       : tier == Tier::Ram  ? LayerPlace::Ram
                                            : LayerPlace::Disk);
    }
    return places;
  }
  ExpertTraffic expert_traffic() const override {
    if (!experts_) return {};
    const ExpertCacheStats& s = experts_->store().stats();
    return {s.uses, s.hits, s.on_cpu, s.copied_bytes};
  }
  std::vector<int32_t> resident_layers() const override {
    if (!weights_->streamer() && !hybrid_) return ModelRunner::resident_layers();
    std::vector<int32_t> layers;
    for (int64_t l = first_layer_; l < end_layer_; ++l) {
      if (weights_->tier(l) == Tier::Vram) layers.push_back(int32_t(l));
    }
    return layers;
  }
  int64_t decode(int32_t token, int64_t pos, int64_t max_steps, const StepPolicy& policy,
                 const std::function<bool(int32_t)>& on_token) override;

  // As a pipeline stage.
  int device() const override { return device_.index; }
  cudaStream_t stream() const override { return stream_; }
  float* hidden() override { return act_.x; }
  // One chunk of a batch (entries [at, at + n)), and what it hands back.
  void run_batch_chunk(const Batch& batch, std::span<const SequenceRun> runs, const KvPages& pages, int64_t at, int64_t n,
                       std::span<const int32_t> layers, BatchOutputs& out) override;
  void copy_kv_pages(std::span<const PageCopy> copies) override {
    NT_CUDA_CHECK(cudaSetDevice(device_.index));
    copy_pages(copies);
  }
  void move_rows(std::span<const RowCopy> copies) override {
    NT_CUDA_CHECK(cudaSetDevice(device_.index));
    copy_rows(copies);
  }
  // Trees run as stepwise rows (trees_run_stepwise) where every path's
  // deepest row, at most `tokens` - 1 below the pending token, still takes
  // the short-context decode, whose key loads follow a path.
  int64_t pass_chunk_entries() const override { return options_.max_batch; }
  bool verifies_trees_exactly(int64_t pos, int64_t tokens) const override {
    return !hybrid_ && tokens <= options_.max_batch && tree_paths_attend_stepwise(pos, pos + tokens - 1);
  }

 protected:
  void forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t> layers,
                     BatchOutputs& out) override;
  void copy_pages(std::span<const PageCopy> copies) override;
  void copy_rows(std::span<const RowCopy> copies) override;
  // A whole model's runner reads its rows back (saved_kv_rows.h); a
  // pipeline's or tensor split's stage leaves that to its runner, which cannot.
  bool saves_kv_rows() const override { return !options_.stage && !window_pages(); }
  void read_rows(std::span<const int64_t> rows, std::span<uint8_t> out) const override;
  void write_rows(std::span<const int64_t> rows, std::span<const uint8_t> in) override;
  // The single-sequence paths run default_layers_ (layer skip); graphs only the full schedule.
  bool honours_default_schedule() const override { return true; }
  void default_schedule_changed(std::span<const int32_t> layers) override {
    default_layers_.assign(layers.begin(), layers.end());
  }

 private:
  // The KV caches, the GEMM workspace and the hybrid split's CPU layers, after the weights.
  void allocate_caches(const ModelWeights& weights, const RunnerBuffers& buffers);
  std::string tier_counts() const;
  void allocate_activations();
  // One-token steps replay captured graphs (host-driven streaming and
  // an expert cache, which the host fills as the routing asks, cannot be captured).
  bool decodes_in_graphs() const {
    return options_.decode_graph && !streamer_ && (!experts_ || experts_->store().all_resident()) &&
           int64_t(default_layers_.size()) == stage_layers();
  }
  // The kinds of one-token step graph. Logits: the staged inputs copied in,
  // then the forward pass (the caller copies out what it needs). Greedy: the
  // forward pass on the inputs the step before left, ending in
  // argmax_and_advance. Top: as Logits, then top_logits (k from the inputs)
  // and the top copied out. Sampled: as Greedy, ending in top_logits and
  // sample_top_and_advance.
  enum class StepGraph { Logits, Greedy, Top, Sampled };
  // The sampler's error for a row top_logits found poisoned at index `poisoned`
  // (or, when it is negative, all -inf); the stream has drained.
  [[noreturn]] void fail_unsampleable(int32_t poisoned, int64_t top_k) const;
  // Queues step graphs ahead of the picks it hands over (decode; DecodeAhead).
  int64_t decode_ahead(int32_t token, int64_t pos, int64_t max_steps, int64_t top_k, StepGraph kind,
                       const std::function<void(int64_t)>& before_step, const std::function<bool(int32_t)>& on_token);
  // The graph of a one-token step prepared for max_keys keys, captured on first use.
  cudaGraphExec_t decode_graph(int64_t max_keys, StepGraph kind);
  // top_logits over the last row with k from the inputs; with copy_out, the
  // top and its poisoned index into host_out().
  void select_top(bool copy_out);
  // Writes a chunk's inputs into the pinned staging and copies them in.
  void stage_inputs(std::span<const int32_t> tokens, int64_t pos, int64_t top_k);
  void copy_inputs(int64_t n_tokens);
  void* host_out() { return host_io_.as<int32_t>() + batch_input_words(options_.max_batch); }
  // Fails unless `tokens` are in the vocabulary (claim_default checks the positions).
  void check_token_ids(std::span<const int32_t> tokens) const;
  // What a run of the default sequence hands back after its tokens: one of
  struct Readout {
    float* logits = nullptr;  // the last token's row, or every token's
    bool all_logits = false;
    int32_t* greedy = nullptr;              // the last token's argmax: 4 bytes cross the bus instead of the row
    std::vector<Candidate>* top = nullptr;  // its `keep` highest, selected on the GPU (top_logits)
    int64_t keep = 0;
  };
  // A pass that is one run of the default sequence through every layer,
  // asking for the last token's output or every token's logits: what the
  // single-sequence path serves (its captured step graphs, its prefill
  // chunks). Where in `out` it hands back; nothing for any other pass.
  std::optional<Readout> single_sequence_readout(const Batch& batch, std::span<const SequenceRun> runs,
                                                 std::span<const int32_t> layers, BatchOutputs& out) const;
  // The single-sequence path over positions the pass has claimed.
  void run_default(std::span<const int32_t> tokens, int64_t pos, const Readout& out);
  void run_tokens(std::span<const int32_t> tokens, int64_t pos, const Readout& out);
  // The rows that go through the head: the last `count` of the chunk, or
  // when `gather` (device) is set, those rows in that order.
  struct HeadRows {
    int64_t count = 0;
    const int32_t* gather = nullptr;
  };
  // Runs n tokens of the default sequence at `pos` (on the device at
  // act_.pos); logits of the last token (or all) into act_.logits.
  void run_chunk(int64_t n, int64_t pos, int64_t max_keys, bool all_logits) {
    const ChunkSequence one{0, n, act_.pos, max_keys, 0, pos};
    run_chunk(n, {{&one, 1}, &kv_pages()}, default_layers_, {all_logits ? n : 1, nullptr}, true);
  }
  // The general pass: the scheduled layers over rows of several sequences;
  // the head's rows' logits into act_.logits, then (stepwise rows) every
  // stepwise row's.
  void run_chunk(int64_t n, const ChunkRows& rows, std::span<const int32_t> layers, const HeadRows& head, bool may_fold);
  // Whether the host computes layer l in the running pass.
  bool on_host(int64_t l) const { return hybrid_ && hybrid_->computes(l); }
  // The model's soft-cap (if any) over `rows` rows of act_.logits from first_row.
  void cap_logits(int64_t first_row, int64_t rows);
  // Whether the token trees among rows [at, at + n) run as stepwise rows:
  // each stepwise and whole in the chunk, no host layers, and every row's
  // one-token step at its path position taking the short-context decode,
  // whose key loads can follow the row's path (AttentionParams::path_parents).
  bool trees_run_stepwise(const Batch& batch, std::span<const SequenceRun> runs, int64_t at, int64_t n) const;
  // Whether the one-token steps of a tree's rows from position `pos` (its
  // pending token) to `deepest` all take the short-context decode that can
  // follow a path's keys.
  bool tree_paths_attend_stepwise(int64_t pos, int64_t deepest) const {
    AttentionParams step = pass_->attention_shape();
    step.n_tokens = 1;
    step.max_keys = decode_max_keys(deepest);
    return step.max_keys == decode_max_keys(pos) && attention_follows_tree_paths(step);
  }
  // The captured graph of a batched decode step of n sequences, or null when
  // this batch cannot replay one; captured from `pass` on first use.
  cudaGraphExec_t batch_decode_graph(const Batch& batch, std::span<const SequenceRun> runs, int64_t at, int64_t n,
                                     std::span<const int32_t> layers, const std::function<void()>& pass);
  // The KV caches' layout, for the kernels that move rows (layers, rows and
  // staging unset): the pool of the full-attention layers (every layer
  // without a window pool), or the sliding-window layers' pool.
  KvRowsParams cache_layout(KvBook book = KvBook::Full) const;
  // The layers a pool holds.
  int64_t pool_layers(KvBook book) const {
    if (kv_window_.window == 0) return stage_layers();
    return book == KvBook::Window ? kv_window_.window_layers : kv_window_.full_layers;
  }
  // The pages of a pass's sequences into the block table, before it queues anything.
  void sync_page_table(const KvPages& pages, std::span<const SequenceRun> runs);
  // Whether a chunk of n tokens folds the RMSNorms into its mat-vecs.
  bool folds_norms(int64_t n, bool use_gemm) const;
  // The stepwise_steps_max a model takes by default.
  int64_t stepwise_steps_apart() const;
  // Whether every row of a decode batch attends as a one-token step below kShortDecodeMaxKeys does.
  bool rows_attend_short(const Batch& batch) const;
  // Whether every layer matrix is F16 or BF16 (decode batches take cuBLAS sooner).
  bool float_layers() const;
  int64_t decode_max_keys(int64_t pos) const { return pass_->decode_max_keys(pos); }
  // Decode batches (one token a run) may take the int8 GEMM; prompt chunks keep f16 GEMMs.
  MatmulPaths matmul_paths(bool one_token_runs) const {
    return one_token_runs ? MatmulPaths{options_.decode_gemm_min_tokens, true} : MatmulPaths{options_.gemm_min_tokens, false};
  }

  ModelSpec config_;
  int64_t context_;
  int64_t cache_context_;  // context_ rounded up to whole KV tiles
  CudaRunnerOptions options_;
  bool stepwise_by_model_ = false;  // stepwise_steps_max came from stepwise_steps_apart()
  CudaDeviceInfo device_;
  // The layers held: all of them, or a pipeline stage's range.
  int64_t first_layer_ = 0, end_layer_ = 0;
  bool embeds_ = true;    // holds the token embedding (the range starts at layer 0)
  bool has_head_ = true;  // holds the final norm and the head (the range ends at the last layer)
  std::optional<TensorRank> tensor_;  // a tensor-split rank: config_ is its shard's model
  int64_t stage_layers() const { return end_layer_ - first_layer_; }
  std::string gpu_label() const { return fmt::format("GPU {} ({})", device_.index, device_.name); }
  uint64_t resident_bytes_ = 0;
  cudaStream_t stream_ = nullptr;

  std::unique_ptr<DeviceWeights> weights_;
  std::optional<ExpertFfn> experts_;  // a mixture of experts' FFN over weights_'s experts
  std::vector<int32_t> default_layers_;  // the default schedule's: 0, 1, ..., n_layers - 1 unless layer skip is on

  DeviceBuffer k_cache_, v_cache_;  // the pool: pages of kKvTile positions of every layer held (kv_layout.h)
  std::optional<DevicePageTable> page_table_;
  // The sliding-window layers' own pool where they keep only their window
  // (runtime/kv_window.h); the pool above then holds the other layers.
  KvWindowPlan kv_window_;
  DeviceBuffer k_window_, v_window_;
  std::optional<DevicePageTable> window_table_;
  PassBuffers act_;
  std::optional<Gemm> gemm_;
  std::optional<LayerPass> pass_;  // the layers' kernels, over act_, gemm_ and the pool
  PinnedBuffer host_io_;  // the inputs as on the device, then one row of logits, the greedy pick, the top or a batch's picks
  // One-token steps by 2 * StepGraph + (short: prepared below kShortDecodeMaxKeys, not for the whole context).
  GraphCache decode_graphs_;
  GraphCache batch_graphs_;  // batched decode steps, by sequence count and attention launch
  std::optional<DecodeAhead> ahead_;  // the step graphs' picks ring and sampling parameters
  std::vector<int32_t> default_tokens_;  // a single-sequence pass's tokens
  std::vector<float> top_row_;  // a Top row when top_logits cannot select that many
  Candidates top_candidates_;
  LayerStreamer* streamer_ = nullptr;  // weights_'s; null when every layer is resident
  std::vector<int32_t> gpu_layers_;   // a pass's layers that the GPU runs
  std::optional<HybridPass> hybrid_;  // the hybrid split's CPU layers; declared after weights_: uses the streamer's pinned copies
  std::vector<int64_t> row_entries_;  // run_batch_chunk: each chunk row's batch entry
  Batch stepwise_batch_;              // forward_pages: a small decode step's entries, made stepwise
  std::vector<SequenceRun> stepwise_runs_;
};

CudaLlamaRunner::CudaLlamaRunner(const GgufFile& file, int64_t context, const CudaRunnerOptions& options)
    : context_(context),
      cache_context_(kv_cache_context(context)),
      options_(with_environment_switches(options)),
      device_(require_cuda_device(options.device)) {
  const ModelSpec full = read_model_spec(file.header(), file.path());
  if (options_.stage && options_.stage->tensor) {
    tensor_ = options_.stage->tensor;
    if (!tensor_->reducer) fail("{}: tensor-split rank {} has no reducer", gpu_label(), tensor_->rank);
    // Decode steps replay graphs where the sums across ranks are NCCL's, which
    // a graph captures; sums through one GPU's memory wait on the host.
    options_.decode_graph = options_.decode_graph && tensor_->reducer->queues_only() && options_.tensor_graphs;
  }
  if (tensor_ && !full.llama_layers()) {
    fail("{}: the tensor split runs Llama layers only so far, not architecture '{}' ({}); run it on one GPU",
         file.path(), full.architecture, describe_layers(full));
  }
  config_ = tensor_ ? shard_config(full, tensor_->shard) : full;
  if (context <= 0) fail("{}: context size must be positive, got {}", file.path(), context);
  if (options_.max_batch < 1) fail("max_batch must be at least 1, got {}", options_.max_batch);
  if (options_.gemm_min_tokens < 2 || (options_.decode_gemm_min_tokens != 0 && options_.decode_gemm_min_tokens < 2)) {
    fail("gemm_min_tokens must be at least 2 and decode_gemm_min_tokens 0 (by the formats) or at least 2, got {} and {}",
         options_.gemm_min_tokens, options_.decode_gemm_min_tokens);
  }
  if (options_.int8_gemm_min_tokens != 0 && options_.int8_gemm_min_tokens < 2) {
    fail("int8_gemm_min_tokens must be 0 (each format's own) or at least 2, got {}", options_.int8_gemm_min_tokens);
  }
  if (config_.head_dim % 8 != 0) {
    fail("{}: head dimension {} is not a multiple of 8, which the CUDA KV cache layout needs", file.path(), config_.head_dim);
  }
  // The dequantize + GEMM prefill and the q8 activations work in 32-element
  // chunks; a float model of other widths (stories260K's FFN is 172 wide)
  // prefills through the mat-vec, which reads float rows 4 or 8 elements at a time.
  if (config_.q_dim() % 32 != 0 || config_.kv_dim() % 32 != 0 || config_.ffn_dim % 32 != 0) {
    options_.gemm_min_tokens = options_.decode_gemm_min_tokens = std::numeric_limits<int64_t>::max();
  }
  if (options_.int8_gemm_widest_tile != 32 && options_.int8_gemm_widest_tile != 64) {
    fail("int8_gemm_widest_tile (NT_CUDA_INT8_TILE) is 32 or 64 tokens, not {}", options_.int8_gemm_widest_tile);
  }
  if (options_.max_sequences < 1) fail("max_sequences must be at least 1, got {}", options_.max_sequences);
  if (options_.stepwise_steps_max < -1) {
    fail("stepwise_steps_max must be -1 (by the model), 0 (off) or a sequence count, got {}", options_.stepwise_steps_max);
  }
  end_layer_ = config_.n_layers;
  if (const auto& stage = options_.stage) {
    if (stage->first_layer < 0 || stage->first_layer >= stage->end_layer || stage->end_layer > config_.n_layers ||
        int64_t(stage->tiers.size()) != stage->end_layer - stage->first_layer) {
      fail("{}: a pipeline stage of layers [{}, {}) with {} tiers does not fit the model's {} layers", gpu_label(),
           stage->first_layer, stage->end_layer, stage->tiers.size(), config_.n_layers);
    }
    if (options_.cpu_layers > 0) fail("{}: a pipeline stage computes no layers on the CPU (use --cpu-layers 0)", gpu_label());
    first_layer_ = stage->first_layer;
    end_layer_ = stage->end_layer;
  }
  const bool ends = !tensor_ || tensor_->rank == 0;  // a tensor split's rank 0 embeds and holds the head
  embeds_ = first_layer_ == 0 && ends;
  has_head_ = end_layer_ == config_.n_layers && ends;
  // Pages of one KV tile: every kernel walks keys a tile at a time, and a
  // tile is contiguous in memory.
  kv_window_ = device_kv_window(config_, cache_context_, options_.max_sequences, options_.kv_pool, options_.max_batch,
                                keeps_kv_windows(options_));
  init_pages(KvPages(KvPages::pool_pages(options_.kv_pool, options_.max_sequences, context_, kKvTile), kKvTile, context_,
                     options_.max_sequences),
             kv_window_.books(kKvTile, context_, options_.max_sequences));
  for (int64_t l = first_layer_; l < end_layer_; ++l) default_layers_.push_back(int32_t(l));
  const ModelWeights weights = load_model_weights(file, full);
  NT_CUDA_CHECK(cudaSetDevice(device_.index));
  // Compute first: streamed layers' re-lay kernels (layer_stream.h) fill the
  // SMs, and a hybrid pass waits on each GPU layer between two CPU ones.
  int least = 0, greatest = 0;
  NT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  NT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
  const RunnerBuffers buffers = stage_buffers(config_, weights, context_, cache_context_, options_.max_batch,
                                              options_.max_sequences, device_.multiprocessors, stage_layers(), has_head_,
                                              options_.kv_pool, keeps_kv_windows(options_));
  weights_ = std::make_unique<DeviceWeights>(file, config_, weights, context_, buffers, LayerRange{first_layer_, end_layer_},
                                             device_, options_);
  streamer_ = weights_->streamer();
  if (options_.decode_gemm_min_tokens == 0) options_.decode_gemm_min_tokens = float_layers() ? 9 : 65;
  allocate_caches(weights, buffers);
  allocate_activations();
  KvPool pool{k_cache_.as<uint16_t>(), v_cache_.as<uint16_t>(), first_layer_, stage_layers(), &*page_table_};
  if (window_table_) {
    pool.window = &kv_window_;
    pool.window_k = k_window_.as<uint16_t>();
    pool.window_v = v_window_.as<uint16_t>();
    pool.window_table = &*window_table_;
  }
  const ResidualSum residual = tensor_ ? ResidualSum{tensor_->rank == 0, tensor_->reducer} : ResidualSum{};
  const PassKernelChoices choices{options_.int8_gemm_min_tokens, options_.int8_gemm_widest_tile,
                                  options_.super_block_activations, options_.matvec_row_pairs,
                                  options_.sequence_splits};
  pass_.emplace(config_, context_, act_, *gemm_, pool, device_.multiprocessors, choices, residual, stream_);
  if (ExpertStore* store = weights_->experts()) {
    ExpertFfnOptions e;
    e.misses = options_.expert_misses;
    e.cpu_threads = options_.cpu_threads;
    e.trace_path = weights_->streamer() ? std::string() : options_.trace_path;  // the streamer's when layers stream
    e.chunks = options_.expert_chunks;
    experts_.emplace(config_, options_.max_batch, *store, e);
    pass_->set_experts(&*experts_);
  }
  stepwise_by_model_ = options_.stepwise_steps_max < 0;
  if (stepwise_by_model_) options_.stepwise_steps_max = stepwise_steps_apart();
}

CudaLlamaRunner::~CudaLlamaRunner() {
  cudaSetDevice(device_.index);  // a pipeline's stages may sit on other GPUs than the current one
  hybrid_.reset();
  if (stream_) cudaStreamSynchronize(stream_);
  weights_.reset();  // before the stream goes: the streamer's last copies wait on it
  if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaLlamaRunner::tier_counts() const {
  const auto n = [&](Tier t) { return std::count(weights_->tiers().begin(), weights_->tiers().end(), t); };
  const std::string cpu = hybrid_ ? fmt::format(" ({})", hybrid_->describe()) : std::string();
  const std::string range = tensor_ ? fmt::format("rank {}, KV heads {}-{}, FFN columns {}-{}: ", tensor_->rank,
                                                  tensor_->shard.first_kv_head,
                                                  tensor_->shard.first_kv_head + tensor_->shard.kv_heads - 1,
                                                  tensor_->shard.first_ffn_column,
                                                  tensor_->shard.first_ffn_column + tensor_->shard.ffn_columns - 1)
                            : options_.stage ? fmt::format("{}-{}: ", first_layer_, end_layer_ - 1)
                                             : std::string();
  const std::string experts = experts_ ? "; " + experts_->describe() : std::string();
  return fmt::format("layers {}{} vram + {} ram{} + {} disk{}", range, n(Tier::Vram), n(Tier::Ram), cpu, n(Tier::Disk),
                     experts);
}

std::string CudaLlamaRunner::description() const {
  return fmt::format("cuda ({}, {} SMs, {:.1f} MiB resident, context {}{}{}, {}{}{}, {}{})",
                     options_.stage ? gpu_label() : device_.name, device_.multiprocessors,
                     double(resident_bytes_) / double(1ull << 20), context_,
                     options_.max_sequences > 1 ? fmt::format(" x {} sequences", options_.max_sequences) : std::string(),
                     (options_.kv_pool > 0 ? fmt::format(", KV pool of {} positions", kv_pages().page_count() * kKvTile)
                                           : std::string()) +
                         (kv_window_.window > 0 ? fmt::format(", {} sliding-window layers: {} positions", kv_window_.window_layers,
                                                              kv_window_.pages * kKvTile)
                                                : std::string()),
                     decodes_in_graphs() ? "decode graph" : "no graph",
                     folds_norms(1, false) ? ", folded norms" : "",
                     options_.stepwise_steps_max > 0
                         ? fmt::format(", decode steps of up to {} sequences stepwise", options_.stepwise_steps_max)
                         : std::string(),
                     tier_counts(),
                     streamer_ ? ", storage " + streamer_->reader().description() : std::string());
}

void CudaLlamaRunner::allocate_caches(const ModelWeights& weights, const RunnerBuffers& buffers) {
  k_cache_ = DeviceBuffer((buffers.kv - buffers.window_kv) / 2, "the K cache");
  v_cache_ = DeviceBuffer((buffers.kv - buffers.window_kv) / 2, "the V cache");
  // Zeroed: a released page's entry reads page 0 of its pool (page_table.cpp), never garbage.
  for (DeviceBuffer* cache : {&k_cache_, &v_cache_}) NT_CUDA_CHECK(cudaMemset(cache->get(), 0, cache->size()));
  page_table_.emplace(options_.max_sequences, cache_context_ / kKvTile);
  if (kv_window_.window > 0) {
    k_window_ = DeviceBuffer(buffers.window_kv / 2, "the sliding-window layers' K cache");
    v_window_ = DeviceBuffer(buffers.window_kv / 2, "the sliding-window layers' V cache");
    for (DeviceBuffer* cache : {&k_window_, &v_window_}) NT_CUDA_CHECK(cudaMemset(cache->get(), 0, cache->size()));
    window_table_.emplace(options_.max_sequences, cache_context_ / kKvTile);
  }
  NT_CUDA_CHECK(cudaDeviceSynchronize());  // the memsets ran on the legacy stream, unordered with stream_
  gemm_.emplace(buffers.gemm);
  resident_bytes_ = weights_->device_bytes() + buffers.kv + buffers.page_table;
  // The host's scratch holds its widest pass.
  std::unique_ptr<HostLayers> host =
      weights_->make_host_layers(weights, kv_pages().page_count(), cache_layout(),
                                 std::min(options_.max_batch, options_.cpu_passes.widest()), options_.cpu_threads);
  if (host) hybrid_.emplace(std::move(host), options_.cpu_passes, *streamer_);
}

void CudaLlamaRunner::allocate_activations() {
  act_ = PassBuffers(config_, options_.max_batch, context_, device_.multiprocessors, has_head_);
  const uint64_t out_bytes = std::max({4 * uint64_t(config_.vocab_size), sizeof(TopLogit) * kMaxTopLogits + 4,
                                       4 * uint64_t(options_.max_batch)});  // a row, the top, or a batch's picks
  host_io_ = PinnedBuffer(4 * uint64_t(batch_input_words(options_.max_batch)) + out_bytes, "token and logit transfers");
  ahead_.emplace();
}

// Whether every layer matrix is F16 or BF16: formats without an int8 GEMM,
// whose decode batches of more than the mat-vec's 8 columns take cuBLAS (8B
// F16 on an H100: 444 tok/s at 64 sequences through the mat-vec, 7,868
// through cuBLAS; docs/PERFORMANCE.md "A Q2_K tile, and decode batches of
// float weights").
bool CudaLlamaRunner::float_layers() const {
  const auto is_float = [](const DeviceMatrix& m) { return m.type == TensorType::F16 || m.type == TensorType::BF16; };
  for (int64_t l = first_layer_; l < end_layer_; ++l) {
    const LayerOnDevice& L = weights_->layer(l);
    for (const MatrixPart& part : L.qkv) {
      if (!is_float(part.m)) return false;
    }
    if (!is_float(L.wo) || !is_float(L.gate) || !is_float(L.up) || !is_float(L.down)) return false;
  }
  return true;
}

// The most sequences, up to the mat-vec's columns, whose stepwise decode step
// gives each row blocks of its own in every layer mat-vec: such a step costs
// about one sequence's step (the one-column launches leave the GPU mostly
// idle), less than the batched kernels', and gives each sequence its step
// alone. Small models: SmolLM2 takes 8 (on an H100, 3-30% faster than the
// batched step at 2 to 8 sequences, docs/PERFORMANCE.md "Small models decode
// batches stepwise"); the 8B none. 0 where layers run on the host, ranks
// split the matrices or stages split the layers: their passes keep the
// batched kernels, which their tests compare with one runner's.
int64_t CudaLlamaRunner::stepwise_steps_apart() const {
  if (hybrid_ || tensor_ || options_.stage || experts_) return 0;
  const bool fold = folds_norms(1, false);
  int64_t most = 0;
  for (int64_t n = 2; n <= kMatvecMaxColumns; ++n) {
    for (int64_t l = first_layer_; l < end_layer_; ++l) {
      if (!pass_->stepwise_columns_apart(weights_->layer(l), l, n, fold)) return most;
    }
    most = n;
  }
  return most;
}

// One-token steps fold the RMSNorms into the mat-vecs on each side (NormIn
// and NormOut in matvec.h) when every matrix takes q8 activations: wo and
// down write the next norm's q8 input, so two launches a layer drop out
// (+3% 8B Q4_K_M, +6% 8B Q8_0 decode on the H200, bench/cuda_NOTES.md).
bool CudaLlamaRunner::folds_norms(int64_t n, bool use_gemm) const {
  // A host layer's output is the next GPU layer's plain input; a
  // tensor-split rank has no whole sum to norm before the ranks add theirs.
  // A mixture of experts' router reads the normed rows themselves.
  if (hybrid_ || tensor_ || config_.has_experts()) return false;
  if (!options_.fold_norms || n != 1 || use_gemm || config_.dim % 32 != 0 || (has_head_ && !matvec_wants_q8(weights_->output().type))) {
    return false;
  }
  // wo and down then run one 1024-thread block per 32 rows, one per
  // multiprocessor: the 70B's 256 would take two waves (-0.5%, cuda_NOTES.md).
  if (config_.dim / 32 > device_.multiprocessors) return false;
  // A norm or a bias on a block's output comes between the product and the
  // residual add, and GeGLU's gate and up run apart (the gated kernels
  // compute SwiGLU): the mat-vecs cannot fold such layers' norms.
  for (const LayerSpec& layer : config_.layers) {
    if (layer.post_attention_norm || layer.post_ffn_norm || layer.activation != FfnActivation::Silu ||
        layer.attention.output_bias) {
      return false;
    }
  }
  for (int64_t l = first_layer_; l < end_layer_; ++l) {
    const LayerOnDevice& L = weights_->layer(l);
    for (const MatrixPart& part : L.qkv) {
      if (!matvec_wants_q8(part.m.type)) return false;
    }
    if (!matvec_wants_q8(L.wo.type) || !matvec_wants_q8(L.gate.type) || L.gate.type != L.up.type || !matvec_wants_q8(L.down.type)) {
      return false;
    }
  }
  return true;
}

void CudaLlamaRunner::sync_page_table(const KvPages& pages, std::span<const SequenceRun> runs) {
  for (const SequenceRun& r : runs) {
    page_table_->sync(pages, r.seq, stream_);
    if (window_table_) window_table_->sync(*window_pages(), r.seq, stream_);
  }
}

void CudaLlamaRunner::run_chunk(int64_t n, const ChunkRows& chunk, std::span<const int32_t> layers, const HeadRows& head,
                                bool may_fold) {
  const ModelSpec& c = config_;
  // Rows [0, m) run as one chunk, the stepwise rows [m, n) as one-token steps.
  const int64_t m = n - chunk.stepwise_rows;
  const auto stepwise_seqs =
      std::find_if(chunk.seqs.begin(), chunk.seqs.end(), [](const ChunkSequence& s) { return s.stepwise; });
  const bool one_token_runs =
      std::all_of(chunk.seqs.begin(), stepwise_seqs, [](const ChunkSequence& s) { return s.rows == 1; });
  pass_->set_paths(matmul_paths(one_token_runs));
  const bool use_gemm = m >= pass_->paths().gemm_from;
  // The head's folded input comes from the last layer's down: a stage may run none.
  const bool fold = m == n && may_fold && folds_norms(n, use_gemm) && !layers.empty();
  const bool step_fold = m < n && folds_norms(1, false) && !layers.empty();
  ChunkRows chunked = chunk;
  chunked.seqs = {chunk.seqs.begin(), stepwise_seqs};
  chunked.stepwise_rows = 0;

  if (hybrid_) hybrid_->begin(n, chunk, stream_);
  // Streamed layers start arriving before anything computes.
  if (streamer_) {
    gpu_layers_.clear();
    for (const int32_t l : layers) {
      if (!on_host(l)) gpu_layers_.push_back(l);
    }
    streamer_->begin_chunk(stream_, gpu_layers_);
  }
  // Token embeddings into the residual stream x (a later pipeline stage finds the hidden state there).
  if (embeds_) {
    gather_rows_f32(weights_->token_embd(), act_.tokens, n, act_.x, stream_);
    if (c.embedding_scale != 1.0f) scale_floats(act_.x, n * c.dim, c.embedding_scale, stream_);
  }
  if (tensor_) {  // the other ranks start from zeros, so the sum hands every rank rank 0's rows
    if (!embeds_) NT_CUDA_CHECK(cudaMemsetAsync(act_.x, 0, size_t(n * c.dim) * sizeof(float), stream_));
    tensor_->reducer->sum(act_.x, n * c.dim, stream_);
  }
  LayerOnDevice slotted;  // a streamed layer's matrices in the GPU slot its weights arrived in
  for (size_t i = 0; i < layers.size(); ++i) {
    const size_t l = size_t(layers[i]);
    if (on_host(int64_t(l))) {
      size_t end = i + 1;
      while (end < layers.size() && on_host(layers[end])) ++end;
      hybrid_->run(layers.subspan(i, end - i), n, chunk, act_.x, stream_);
      i = end - 1;
      continue;
    }
    const bool streamed = streamer_ && streamer_->streams(int64_t(l));
    const LayerOnDevice& L =
        streamed ? (slotted = weights_->layer(l).in_slot(uint64_t(streamer_->before_layer(int64_t(l), stream_)) *
                                                         weights_->slot_bytes()))
                 : weights_->layer(l);
    // The norm after this layer: the next layer's, or the final one (none
    // after a pipeline stage's last layer: the next stage norms). When
    // folding, each layer's down writes its input and the next layer's
    // attention reads it (the first layer normalizes its own).
    const float* next_norm = i + 1 < layers.size() ? weights_->layer(layers[i + 1]).attn_norm : weights_->output_norm();
    if (m > 0) pass_->chunk_layer(L, int64_t(l), m, use_gemm, fold, fold && i > 0, chunked, next_norm);
    if (m < n) pass_->stepwise_layer(L, int64_t(l), m, n, step_fold, step_fold && i > 0, chunk, next_norm);
    if (streamed) streamer_->after_layer(int64_t(l), stream_);
  }
  if (hybrid_) hybrid_->end(stream_);

  // Final norm and classifier, for the head's rows, then every stepwise row.
  const int64_t rows = head.count;
  if (m < n && has_head_) {
    pass_->stepwise_head(weights_->output(), weights_->output_norm(), m, n, step_fold, rows);
    cap_logits(rows, n - m);
  }
  if (rows == 0) return;
  const float* x_rows = act_.x + (m - rows) * c.dim;
  if (head.gather) {  // gather_rows_f32 reads act_.x as a matrix of n rows; act_.gate is free by now
    gather_rows_f32(place_device_matrix(TensorType::F32, n, c.dim, act_.x), head.gather, rows, act_.gate, stream_);
    x_rows = act_.gate;
  }
  const bool head_gemm = rows >= pass_->paths().gemm_from;
  if (!fold) rms_norm(x_rows, weights_->output_norm(), rows, c.dim, c.rms_eps, act_.xn, head_gemm ? nullptr : act_.q8, act_.q8_scales, stream_);
  if (head_gemm) convert_f32_to_f16(act_.xn, rows * c.dim, act_.f16, stream_);
  if (fold) {  // one token, whose last down projection wrote the final norm's input
    MatvecParams p;
    p.w = weights_->output();
    p.x = {nullptr, act_.norm_q8, act_.norm_q8_scales};
    p.norm_in = {act_.norm_sumsq, c.rms_eps};
    p.y = act_.logits;
    p.y_stride = c.vocab_size;
    matvec(p, 1, stream_);
  } else {
    pass_->matmul(weights_->output(), Input{act_.xn, act_.q8, act_.q8_scales, act_.f16, c.dim}, rows, act_.logits,
                  c.vocab_size, false);
  }
  cap_logits(0, rows);
}

void CudaLlamaRunner::cap_logits(int64_t first_row, int64_t rows) {
  const ModelSpec& c = config_;
  if (c.final_logit_softcap > 0.0f) soft_cap(act_.logits + first_row * c.vocab_size, rows * c.vocab_size, c.final_logit_softcap, stream_);
}

void CudaLlamaRunner::check_token_ids(std::span<const int32_t> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      fail("token id {} at index {} is outside the vocabulary of {} tokens", tokens[i], i, config_.vocab_size);
    }
  }
}

void CudaLlamaRunner::fail_unsampleable(int32_t poisoned, int64_t top_k) const {
  if (poisoned < 0) fail("sampler: every one of the top {} logits is -inf", top_k);
  float value;
  NT_CUDA_CHECK(cudaMemcpy(&value, act_.logits + poisoned, 4, cudaMemcpyDeviceToHost));
  fail("sampler: the logit of token {} is {}", poisoned, value);
}

void CudaLlamaRunner::select_top(bool copy_out) {
  top_logits(act_.logits, config_.vocab_size, act_.top_k, act_.top, act_.top_poisoned, act_.top_scratch, stream_);
  if (copy_out) {
    NT_CUDA_CHECK(cudaMemcpyAsync(host_out(), act_.top, sizeof(TopLogit) * kMaxTopLogits + 4, cudaMemcpyDeviceToHost, stream_));
  }
}

void CudaLlamaRunner::stage_inputs(std::span<const int32_t> tokens, int64_t pos, int64_t top_k) {
  int32_t* staged = host_io_.as<int32_t>();
  staged[0] = int32_t(pos);
  staged[1] = int32_t(top_k);
  std::memcpy(staged + kInputsHeader, tokens.data(), tokens.size_bytes());
}

void CudaLlamaRunner::copy_inputs(int64_t n_tokens) {
  const size_t bytes = size_t(kInputsHeader + n_tokens) * 4;
  NT_CUDA_CHECK(cudaMemcpyAsync(act_.pos, host_io_.as<int32_t>(), bytes, cudaMemcpyHostToDevice, stream_));
}

cudaGraphExec_t CudaLlamaRunner::decode_graph(int64_t max_keys, StepGraph kind) {
  return decode_graphs_.get(2 * int(kind) + (max_keys != context_), stream_, [&] {
    if (kind == StepGraph::Logits || kind == StepGraph::Top) copy_inputs(1);  // the others advance on the device
    run_chunk(1, 0, max_keys, false);  // the position is the device's: graphs run no host layers
    const StepAdvance advance = ahead_->advance(act_.tokens, act_.pos);
    if (kind == StepGraph::Greedy) {
      argmax_and_advance(act_.logits, config_.vocab_size, act_.argmax_scratch, advance, stream_);
    } else if (kind == StepGraph::Top) {
      select_top(true);
    } else if (kind == StepGraph::Sampled) {
      select_top(false);
      sample_top_and_advance(act_.top, act_.top_k, act_.top_poisoned, &ahead_->chain(), advance, stream_);
    }
  });
}

// Each step's graph picks its token and feeds it to the next on the GPU, so
// the host only queues graphs and reads picks: no copies, argmax launches or
// host round trip between steps (they cost ~27 us a step on the H200: +1.5%
// 8B and +3.5% 1B decode, bench/cuda_NOTES.md). A sampling policy's chain
// runs on the GPU over the row's top (sample_top_and_advance); the host
// hands each step its draw when it queues it. 1B sampled decode ~+4% over a
// host round trip per step (bench/cuda_NOTES.md).
int64_t CudaLlamaRunner::decode(int32_t token, int64_t pos, int64_t max_steps, const StepPolicy& policy,
                                const std::function<bool(int32_t)>& on_token) {
  if (!decodes_in_graphs() || (!policy.argmax() && (!policy.draw || !top_logits_fits(config_.vocab_size, policy.top_k)))) {
    return ModelRunner::decode(token, pos, max_steps, policy, on_token);
  }
  if (policy.argmax()) return decode_ahead(token, pos, max_steps, 0, StepGraph::Greedy, [](int64_t) {}, on_token);
  SampleChain& chain = ahead_->chain();
  chain.temperature = policy.temperature;
  chain.top_p = policy.top_p;
  chain.min_p = policy.min_p;
  const auto draw = [&](int64_t step) { chain.uniforms[(pos + step) % kSampleUniforms] = policy.draw(); };
  return decode_ahead(token, pos, max_steps, policy.top_k, StepGraph::Sampled, draw, on_token);
}

int64_t CudaLlamaRunner::decode_ahead(int32_t token, int64_t pos, int64_t max_steps, int64_t top_k, StepGraph kind,
                                      const std::function<void(int64_t)>& before_step,
                                      const std::function<bool(int32_t)>& on_token) {
  if (max_steps < 0) fail("decoding {} steps: the count must not be negative", max_steps);
  if (window_pages() && max_steps > options_.max_batch) {
    // The window pool holds a chunk's positions past each window: the steps
    // are queued that many at a time, each run's pages claimed before it.
    int64_t handed = 0;
    bool stopped = false;
    const auto pick = [&](int32_t t) {
      token = t;
      stopped = !on_token(t);
      return !stopped;
    };
    while (handed < max_steps && !stopped) {
      const int64_t first = handed;
      handed += decode_ahead(token, pos + first, std::min(options_.max_batch, max_steps - first), top_k, kind,
                             [&](int64_t step) { before_step(first + step); }, pick);
    }
    return handed;
  }
  check_token_ids({&token, 1});
  claim_default(pos, max_steps);
  if (max_steps == 0) return 0;
  const SequenceRun steps{0, 0, max_steps, pos};
  claim_window({&steps, 1});
  sync_page_table(kv_pages(), {&steps, 1});  // every queued step's page
  stage_inputs({&token, 1}, pos, top_k);
  copy_inputs(1);
  // Both graphs a run that crosses kShortDecodeMaxKeys needs, captured before any step is queued.
  const cudaGraphExec_t first = decode_graph(decode_max_keys(pos), kind);
  const cudaGraphExec_t later = decode_graph(decode_max_keys(pos + max_steps - 1), kind);
  const auto queue = [&](int64_t step) {
    before_step(step);
    NT_CUDA_CHECK(cudaGraphLaunch(decode_max_keys(pos + step) == decode_max_keys(pos) ? first : later, stream_));
  };
  const auto poisoned = [&] {
    int32_t index;
    NT_CUDA_CHECK(cudaMemcpy(&index, act_.top_poisoned, 4, cudaMemcpyDeviceToHost));
    fail_unsampleable(index, top_k);
  };
  const int64_t handed = ahead_->run(stream_, pos, max_steps, queue, on_token, poisoned);
  settle_default(pos + handed);  // the steps queued past the last pick are overwritten later
  return handed;
}

std::optional<CudaLlamaRunner::Readout> CudaLlamaRunner::single_sequence_readout(const Batch& batch,
                                                                                 std::span<const SequenceRun> runs,
                                                                                 std::span<const int32_t> layers,
                                                                                 BatchOutputs& out) const {
  if (runs.size() != 1 || runs[0].seq != 0 || runs[0].stepwise || runs[0].tree || runs[0].count != int64_t(batch.size()) ||
      int64_t(layers.size()) != config_.n_layers) {
    return std::nullopt;
  }
  const auto& entries = batch.entries;
  const auto outputs = [&](Output o) { return [o](const BatchEntry& e) { return e.output == o; }; };
  const bool every_row = std::all_of(entries.begin(), entries.end(), outputs(Output::Logits));
  if (!every_row && !std::all_of(entries.begin(), entries.end() - 1, outputs(Output::None))) return std::nullopt;
  Readout r;
  switch (entries.back().output) {
    case Output::Logits:
      r.logits = out.logits.data();
      r.all_logits = every_row && entries.size() > 1;
      return r;
    case Output::Argmax: r.greedy = &out.argmax[0]; return r;
    case Output::Top:
      r.top = &out.top[0];
      r.keep = batch.top_k;
      return r;
    case Output::None: break;
  }
  return std::nullopt;
}

void CudaLlamaRunner::run_default(std::span<const int32_t> tokens, int64_t pos, const Readout& out) {
  if (out.greedy && tokens.size() == 1 && decodes_in_graphs()) {  // the step graph picks it
    decode_ahead(tokens[0], pos, 1, 0, StepGraph::Greedy, [](int64_t) {}, [&](int32_t pick) {
      *out.greedy = pick;
      return false;
    });
    return;
  }
  if (out.top && !top_logits_fits(config_.vocab_size, out.keep)) {  // the row comes over and the host selects
    top_row_.resize(size_t(config_.vocab_size));
    run_tokens(tokens, pos, {.logits = top_row_.data()});
    top_candidates_.assign(top_row_, out.keep);
    out.top->assign(top_candidates_.view().begin(), top_candidates_.view().end());
    return;
  }
  run_tokens(tokens, pos, out);
}

void CudaLlamaRunner::run_tokens(std::span<const int32_t> tokens, int64_t pos, const Readout& out) {
  const int64_t total = int64_t(tokens.size());
  const int64_t vocab = config_.vocab_size;
  void* host = host_out();  // a row of logits, the pick, or the top and its poisoned index
  for (int64_t start = 0; start < total; start += options_.max_batch) {
    const int64_t n = std::min(options_.max_batch, total - start);
    // The previous chunk synchronized: the block tables may change.
    const SequenceRun chunk{0, 0, n, pos + start};
    claim_window({&chunk, 1});
    sync_page_table(kv_pages(), {&chunk, 1});
    const bool last_chunk = start + n == total;
    // The previous chunk synchronized, so the pinned staging is free to rewrite.
    stage_inputs(tokens.subspan(size_t(start), size_t(n)), pos + start, out.keep);
    const bool top_in_graph = n == 1 && decodes_in_graphs() && last_chunk && out.top;
    if (n == 1 && decodes_in_graphs()) {
      const StepGraph kind = top_in_graph ? StepGraph::Top : StepGraph::Logits;
      NT_CUDA_CHECK(cudaGraphLaunch(decode_graph(decode_max_keys(pos + start), kind), stream_));
    } else {
      copy_inputs(n);
      // A decode step runs the attention the captured graphs run at its
      // position, so decode results do not depend on whether a graph runs
      // (the tensor-core attention rounds probabilities per split).
      run_chunk(n, pos + start, n == 1 ? decode_max_keys(pos + start) : pos + start + n, out.all_logits);
    }
    if (out.all_logits) {
      NT_CUDA_CHECK(cudaMemcpyAsync(out.logits + start * vocab, act_.logits, size_t(n * vocab) * 4, cudaMemcpyDeviceToHost, stream_));
    } else if (last_chunk && out.greedy) {
      argmax_rows(act_.logits, 1, vocab, act_.argmax, act_.argmax_scratch, stream_);
      NT_CUDA_CHECK(cudaMemcpyAsync(host, act_.argmax, 4, cudaMemcpyDeviceToHost, stream_));
    } else if (last_chunk && out.top && !top_in_graph) {
      select_top(true);
    } else if (last_chunk && !out.top) {
      NT_CUDA_CHECK(cudaMemcpyAsync(host, act_.logits, size_t(vocab) * 4, cudaMemcpyDeviceToHost, stream_));
    }
    NT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (streamer_) streamer_->end_chunk();
  }
  if (out.all_logits || total == 0) return;
  if (out.greedy) {
    std::memcpy(out.greedy, host, 4);
  } else if (out.top) {
    static_assert(sizeof(TopLogit) == sizeof(Candidate) && offsetof(TopLogit, id) == offsetof(Candidate, id));
    const auto* top = static_cast<const Candidate*>(host);
    int32_t poisoned;
    std::memcpy(&poisoned, static_cast<const uint8_t*>(host) + sizeof(TopLogit) * kMaxTopLogits, 4);
    if (poisoned >= 0) fail_unsampleable(poisoned, out.keep);
    out.top->assign(top, top + out.keep);
  } else {
    std::memcpy(out.logits, host, size_t(vocab) * 4);
  }
}

// A decode step of n >= 2 sequences (on a tensor rank n >= 1), one token
// each, every one asking for its argmax, over every resident layer: its
// launches depend on n alone (the positions, sequences and tokens are device
// inputs at fixed places, the sequences attend in one multi-sequence
// launch), so one graph per n serves every such step. So do steps whose
// every row is stepwise (batch-invariant decoding) where each row's step
// takes the short-context decode: their attention is one launch of it too.
// Null for any other batch.
cudaGraphExec_t CudaLlamaRunner::batch_decode_graph(const Batch& batch, std::span<const SequenceRun> runs, int64_t at,
                                                    int64_t n, std::span<const int32_t> layers,
                                                    const std::function<void()>& pass) {
  const ModelSpec& c = config_;
  // One sequence's steps take the single-sequence graphs, except on a tensor
  // rank, whose every pass is a batch.
  const int64_t fewest = tensor_ ? 1 : 2;
  if (!decodes_in_graphs() || n < fewest || int64_t(runs.size()) != n || at != 0 || int64_t(batch.size()) != n ||
      int64_t(layers.size()) != stage_layers() ||
      !attention_multi_sequence_supported(int(c.n_heads), int(c.n_kv_heads), int(c.head_dim))) {
    return nullptr;
  }
  const bool stepwise = batch.entries[0].stepwise;
  for (const BatchEntry& e : batch.entries) {
    if (e.output != Output::Argmax || e.stepwise != stepwise) return nullptr;
  }
  // Stepwise rows replay graphs only where each attends in the short-context launch.
  if (stepwise && !rows_attend_short(batch)) return nullptr;
  // A graph per sequence count and attention launch: the multi-sequence
  // kernel (0), stepwise rows in the short-context one (1).
  if (n == 1) {
    // A lone sequence attends as its single-sequence step would: through its
    // own block-table row, sized by decode_max_keys. So graphs per sequence
    // (negative keys): from kShortDecodeMaxKeys (0), below it (1), stepwise (2).
    const BatchEntry& e = batch.entries[0];
    const int64_t launch = stepwise ? 2 : e.pos < kShortDecodeMaxKeys ? 1 : 0;
    return batch_graphs_.get(-1 - (3 * int64_t(e.seq) + launch), stream_, pass);
  }
  const auto graph = [&](int64_t launch) { return batch_graphs_.get(2 * n + launch, stream_, pass); };
  if (stepwise) return graph(1);
  if (n >= options_.decode_gemm_min_tokens) return nullptr;
  return graph(0);
}

bool CudaLlamaRunner::rows_attend_short(const Batch& batch) const {
  AttentionParams step = pass_->attention_shape();
  step.n_tokens = 1;
  for (const BatchEntry& e : batch.entries) {
    step.max_keys = decode_max_keys(e.pos);
    if (!attention_decodes_short(step)) return false;
  }
  return true;
}

void CudaLlamaRunner::copy_pages(std::span<const PageCopy> copies) {
  for (const PageCopy& copy : copies) {
    using Caches = std::array<const DeviceBuffer*, 2>;
    const Caches caches = copy.book == KvBook::Window ? Caches{&k_window_, &v_window_} : Caches{&k_cache_, &v_cache_};
    const uint64_t page_bytes = 2 * uint64_t(kv_page_elems(pool_layers(copy.book), config_.n_kv_heads, config_.head_dim));
    for (const DeviceBuffer* cache : caches) {
      auto* base = cache->as<uint8_t>();
      NT_CUDA_CHECK(cudaMemcpyAsync(base + uint64_t(copy.to) * page_bytes, base + uint64_t(copy.from) * page_bytes, page_bytes,
                                    cudaMemcpyDeviceToDevice, stream_));
    }
  }
  NT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (hybrid_) hybrid_->layers().copy_pages(copies);
}

KvRowsParams CudaLlamaRunner::cache_layout(KvBook book) const {
  const ModelSpec& c = config_;
  KvRowsParams p;
  p.k_cache = (book == KvBook::Window ? k_window_ : k_cache_).as<uint16_t>();
  p.v_cache = (book == KvBook::Window ? v_window_ : v_cache_).as<uint16_t>();
  p.layer_stride = kv_page_elems(1, c.n_kv_heads, c.head_dim);
  // Built before pass_ (the host layers take it): computed here. A pipeline stage holds its layers only.
  p.page_stride = kv_page_elems(pool_layers(book), c.n_kv_heads, c.head_dim);
  p.page_size = kKvTile;
  p.n_kv_heads = int(c.n_kv_heads);
  p.head_dim = int(c.head_dim);
  return p;
}

void CudaLlamaRunner::copy_rows(std::span<const RowCopy> copies) {
  // A row is page * kKvTile + position in the page; launches of moves follow
  // each other. Each book's rows move in its own pool, in order.
  for (const KvBook book : {KvBook::Full, KvBook::Window}) {
    std::vector<RowCopy> mine;
    for (const RowCopy& copy : copies) {
      if (copy.book == book) mine.push_back(copy);
    }
    KvRowMoves moves;
    moves.caches = cache_layout(book);
    moves.n_layers = int(pool_layers(book));
    for (size_t i = 0; i < mine.size(); i += kMaxKvRowMoves) {
      moves.n_moves = int(std::min<size_t>(kMaxKvRowMoves, mine.size() - i));
      for (int j = 0; j < moves.n_moves; ++j) {
        const RowCopy& copy = mine[i + size_t(j)];
        moves.from_page[j] = int32_t(copy.from / kKvTile);
        moves.from[j] = int32_t(copy.from % kKvTile);
        moves.to_page[j] = int32_t(copy.to / kKvTile);
        moves.to[j] = int32_t(copy.to % kKvTile);
      }
      move_kv_rows(moves, stream_);
    }
  }
  NT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (hybrid_) hybrid_->layers().copy_rows(copies);
}

// The host layers' caches hold every row of theirs: their parts come from there.
void CudaLlamaRunner::read_rows(std::span<const int64_t> rows, std::span<uint8_t> out) const {
  NT_CUDA_CHECK(cudaSetDevice(device_.index));
  read_saved_rows(cache_layout(), int(stage_layers()), rows, out, stream_);
  if (hybrid_) hybrid_->layers().read_saved_rows(rows, out);
}

// Both copies of the host layers' caches get the rows, so neither is stale.
void CudaLlamaRunner::write_rows(std::span<const int64_t> rows, std::span<const uint8_t> in) {
  NT_CUDA_CHECK(cudaSetDevice(device_.index));
  write_saved_rows(cache_layout(), int(stage_layers()), rows, in, stream_);
  if (hybrid_) hybrid_->layers().write_saved_rows(rows, in);
}

bool CudaLlamaRunner::trees_run_stepwise(const Batch& batch, std::span<const SequenceRun> runs, int64_t at, int64_t n) const {
  if (hybrid_) return false;  // the host layers take a tree's masks (cpu::TreeRows)
  bool any = false;
  for (const SequenceRun& r : runs) {
    if (!r.tree || r.first >= at + n || r.first + r.count <= at) continue;
    if (!r.stepwise || r.first < at || r.first + r.count > at + n) return false;
    int64_t deepest = r.pos;
    for (int64_t e = r.first; e < r.first + r.count; ++e) deepest = std::max(deepest, batch.entries[size_t(e)].pos);
    if (!tree_paths_attend_stepwise(r.pos, deepest)) return false;
    any = true;
  }
  return any;
}

void CudaLlamaRunner::forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t> layers,
                                    BatchOutputs& out) {
  // One run of the default sequence is the single-sequence path's: its
  // captured step graphs serve a decode step.
  if (const std::optional<Readout> readout = single_sequence_readout(batch, runs, layers, out)) {
    default_tokens_.clear();
    for (const BatchEntry& e : batch.entries) default_tokens_.push_back(e.token);
    run_default(default_tokens_, runs[0].pos, *readout);
    return;
  }
  for (const SequenceRun& r : runs) {
    if (r.tree && r.count > options_.max_batch) {  // its rows' ancestor bits are planned for trees of one chunk
      fail("{}: a token tree of {} tokens is longer than the batch of {}; draft smaller trees", description(), r.count,
           options_.max_batch);
    }
  }
  // A small decode step runs each row as its sequence's step alone
  // (stepwise_steps_max); by the model's choice only where the rows' steps
  // attend in the short-context launch, which keeps the step one graph.
  const bool one_token_runs =
      std::all_of(runs.begin(), runs.end(), [](const SequenceRun& r) { return r.count == 1 && !r.tree; });
  const bool step_alone = one_token_runs && int64_t(batch.size()) <= options_.stepwise_steps_max &&
                          (!stepwise_by_model_ || rows_attend_short(batch));
  if (step_alone) {
    stepwise_batch_ = batch;
    for (BatchEntry& e : stepwise_batch_.entries) e.stepwise = true;
    stepwise_runs_.assign(runs.begin(), runs.end());
    for (SequenceRun& r : stepwise_runs_) r.stepwise = true;
  }
  const Batch& pass = step_alone ? stepwise_batch_ : batch;
  const std::span<const SequenceRun> pass_runs = step_alone ? std::span<const SequenceRun>(stepwise_runs_) : runs;
  const int64_t total = int64_t(batch.size());
  for (int64_t at = 0; at < total; at += options_.max_batch) {
    const int64_t n = std::min(options_.max_batch, total - at);
    claim_window(pass_runs, at, n);
    run_batch_chunk(pass, pass_runs, kv_pages(), at, n, layers, out);
  }
}

// The chunk's inputs move in one copy: [header][tokens][each row's position]
// [each row's sequence][each sequence's first position][the head's rows].
// Rows follow the entries, but the stepwise runs' come after all others.
void CudaLlamaRunner::run_batch_chunk(const Batch& batch, std::span<const SequenceRun> runs, const KvPages& pages, int64_t at,
                                      int64_t n, std::span<const int32_t> layers, BatchOutputs& out) {
  NT_CUDA_CHECK(cudaSetDevice(device_.index));  // a pipeline drives stages on several GPUs from one thread
  sync_page_table(pages, runs);
  const int64_t vocab = config_.vocab_size;
  int32_t* staged = host_io_.as<int32_t>();
  staged[0] = int32_t(batch.entries[size_t(at)].pos);
  staged[1] = int32_t(batch.top_k);
  int32_t* tokens = staged + kInputsHeader;
  int32_t* token_pos = tokens + n;
  int32_t* token_seq = token_pos + n;
  int32_t* run_pos = token_seq + n;
  const auto device = [&](const int32_t* host) { return act_.pos + (host - staged); };
  std::vector<ChunkSequence> seqs;
  row_entries_.clear();
  int64_t stepwise_rows = 0;
  // Stepwise token trees run as stepwise rows where they can; otherwise a
  // tree runs through the chunk kernels, which take its ancestor masks, and
  // so does every run of a chunk that holds one, keeping its rows in entry order.
  const bool stepwise_trees = trees_run_stepwise(batch, runs, at, n);
  const int64_t tree_words = stepwise_trees ? 0 : chunk_tree_words(runs, at, n);
  for (const bool stepwise : {false, true}) {
    for (size_t i = 0; i < runs.size(); ++i) {
      const SequenceRun& r = runs[i];
      const int64_t first = std::max(r.first, at), end = std::min(r.first + r.count, at + n);
      if ((r.stepwise && tree_words == 0) != stepwise || first >= end) continue;
      const int64_t pos = r.pos + (first - r.first), row = int64_t(row_entries_.size());
      for (int64_t t = first; t < end; ++t) {
        tokens[row_entries_.size()] = batch.entries[size_t(t)].token;
        token_pos[row_entries_.size()] = int32_t(pos + (t - first));
        token_seq[row_entries_.size()] = r.seq;
        row_entries_.push_back(t);
      }
      run_pos[seqs.size()] = int32_t(pos);
      // A one-row run attends as a single-sequence decode step at its position does.
      const int64_t max_keys = end - first == 1 ? decode_max_keys(pos) : pos + (end - first);
      seqs.push_back({row, end - first, device(run_pos + seqs.size()), max_keys, r.seq, pos, stepwise, r.tree ? r.pos : -1});
      if (stepwise) stepwise_rows += end - first;
    }
  }
  // The head takes the other rows that ask for an output, then every stepwise row.
  const int64_t m = n - stepwise_rows;
  int32_t* head_rows = run_pos + seqs.size();
  int64_t rows = 0;
  for (int64_t t = 0; t < m; ++t) {
    if (batch.entries[size_t(row_entries_[size_t(t)])].output != Output::None && has_head_) head_rows[rows++] = int32_t(t);
  }
  ChunkRows chunk{seqs, &pages, device(token_pos), device(token_seq), stepwise_rows};
  // Token trees: every row's RoPE position (its depth's), then each row's
  // ancestor bits. A chunk with a tree has no stepwise rows (see above), so
  // its rows are its entries in order.
  int32_t* inputs_end = head_rows + rows;
  if (tree_words > 0) {
    int32_t* rope_pos = inputs_end;
    for (int64_t t = 0; t < n; ++t) rope_pos[t] = int32_t(batch.entries[size_t(at + t)].pos);
    write_tree_masks(batch, runs, at, n, tree_words, reinterpret_cast<uint32_t*>(rope_pos + n));
    inputs_end = rope_pos + n + n * tree_words;
    chunk.token_rope_pos = device(rope_pos);
    chunk.tree_masks = reinterpret_cast<const uint32_t*>(device(rope_pos + n));
    chunk.tree_words = int(tree_words);
    if (hybrid_) {
      hybrid_->trees().assign(batch, runs, at, n);
      chunk.host_trees = &hybrid_->trees();
    }
  } else if (stepwise_trees) {  // every row's RoPE position (its path's), then its parent's index in its run
    int32_t* rope_pos = inputs_end;
    int32_t* parents = rope_pos + n;
    for (const ChunkSequence& s : seqs) {
      for (int64_t k = 0; k < s.rows; ++k) {
        const BatchEntry& e = batch.entries[size_t(row_entries_[size_t(s.first_row + k)])];
        rope_pos[s.first_row + k] = int32_t(e.pos);
        parents[s.first_row + k] = parent_in_run(e, k);
      }
    }
    inputs_end = parents + n;
    chunk.token_rope_pos = device(rope_pos);
    chunk.path_parents = device(parents);
  }
  const size_t input_bytes = size_t(inputs_end - staged) * 4;
  // The head's rows are gathered unless they are the other rows' last ones;
  // a one-token pass runs as a single-sequence step does (folded norms).
  const bool trailing = rows == 0 || (head_rows[0] == m - rows && head_rows[rows - 1] == m - 1);
  const int32_t* gather = trailing ? nullptr : device(head_rows);
  const int64_t head_total = has_head_ ? rows + stepwise_rows : 0;  // a stage before the last hands on the hidden state only
  auto* picks = static_cast<int32_t*>(host_out());
  // The pass: the inputs in, the layers, the head, every head row's argmax out.
  const auto pass = [&] {
    NT_CUDA_CHECK(cudaMemcpyAsync(act_.pos, staged, input_bytes, cudaMemcpyHostToDevice, stream_));
    run_chunk(n, chunk, layers, {rows, gather}, n == 1);
    if (head_total > 0) {
      argmax_rows(act_.logits, head_total, vocab, act_.argmax, act_.argmax_scratch, stream_);
      NT_CUDA_CHECK(cudaMemcpyAsync(picks, act_.argmax, size_t(head_total) * 4, cudaMemcpyDeviceToHost, stream_));
    }
  };
  if (cudaGraphExec_t graph = batch_decode_graph(batch, runs, at, n, layers, pass)) {
    NT_CUDA_CHECK(cudaGraphLaunch(graph, stream_));
  } else {
    pass();
  }
  if (tensor_) {
    tensor_->reducer->wait(stream_);  // watching the other ranks' health where NCCL reports it
  } else {
    NT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  if (streamer_) streamer_->end_chunk();
  for (int64_t i = 0; i < head_total; ++i) {
    const size_t entry = size_t(row_entries_[size_t(i < rows ? head_rows[i] : m + (i - rows))]);
    const Output output = batch.entries[entry].output;
    if (output == Output::None) continue;  // a stepwise row that feeds the cache only
    const size_t slot = size_t(out.index[entry]);
    const float* row = act_.logits + i * vocab;
    switch (output) {
      case Output::Logits:
        NT_CUDA_CHECK(cudaMemcpy(out.logits.data() + slot * size_t(vocab), row, size_t(vocab) * 4, cudaMemcpyDeviceToHost));
        break;
      case Output::Argmax: out.argmax[slot] = picks[i]; break;
      case Output::Top: {
        if (!top_logits_fits(vocab, batch.top_k)) {
          top_row_.resize(size_t(vocab));
          NT_CUDA_CHECK(cudaMemcpy(top_row_.data(), row, size_t(vocab) * 4, cudaMemcpyDeviceToHost));
          top_candidates_.assign(top_row_, batch.top_k);
          out.top[slot].assign(top_candidates_.view().begin(), top_candidates_.view().end());
          break;
        }
        top_logits(row, vocab, act_.top_k, act_.top, act_.top_poisoned, act_.top_scratch, stream_);
        std::vector<TopLogit> top(static_cast<size_t>(batch.top_k));
        int32_t poisoned = -1;
        NT_CUDA_CHECK(cudaMemcpyAsync(top.data(), act_.top, top.size() * sizeof(TopLogit), cudaMemcpyDeviceToHost, stream_));
        NT_CUDA_CHECK(cudaMemcpyAsync(&poisoned, act_.top_poisoned, 4, cudaMemcpyDeviceToHost, stream_));
        NT_CUDA_CHECK(cudaStreamSynchronize(stream_));
        if (poisoned >= 0) fail_unsampleable(poisoned, batch.top_k);
        out.top[slot].resize(top.size());
        for (size_t j = 0; j < top.size(); ++j) out.top[slot][j] = {top[j].logit, top[j].id};
        break;
      }
      case Output::None: break;
    }
  }
}

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(const GgufFile& file, int64_t context, const CudaRunnerOptions& options) {
  return std::make_unique<CudaLlamaRunner>(file, context, options);
}

std::unique_ptr<PipelineStage> make_pipeline_stage(const GgufFile& file, int64_t context, const CudaRunnerOptions& options) {
  if (!options.stage) fail("make_pipeline_stage: the options name no stage (CudaRunnerOptions::stage)");
  return std::make_unique<CudaLlamaRunner>(file, context, options);
}

}  // namespace nt
