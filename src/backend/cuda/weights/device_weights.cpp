#include "backend/cuda/weights/device_weights.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/runner/expert_ffn.h"
#include "backend/cuda/runner/runner_memory.h"
#include "backend/cuda/weights/weight_upload.h"
#include "core/align.h"
#include "core/error.h"
#include "model/rope.h"
#include "planning/hybrid_plan.h"
#include "quant/matrix_shard.h"
#include "storage/page_cache.h"

namespace nt {
namespace {

// The reader of the resident weights' upload. An explicit --io is used as
// given. Otherwise a file mostly in the page cache (written or read recently)
// is copied out of its mapping by a pool of threads, which runs at memory
// speed, and a cold one is read with O_DIRECT, which is faster from storage
// than page faults (docs/PERFORMANCE.md, load times).
OpenedReader open_upload_reader(const std::string& path, const CudaRunnerOptions& o) {
  constexpr double kWarm = 0.9;
  ReaderOptions ro;
  ro.backend = o.io;
  if (ro.backend == IoBackend::Auto && page_cache_fraction(path) >= kWarm) ro.backend = IoBackend::Mmap;
  ro.threads = 8;
  return open_file_reader(path, ro);
}

double gib(uint64_t bytes) { return double(bytes) / double(1ull << 30); }

}  // namespace

const float** LayerOnDevice::vector(LayerRole role) {
  using enum LayerRole;
  switch (role) {
    case AttnNorm: return &attn_norm;
    case FfnNorm: case FfnNormNamedPostAttention: return &ffn_norm;
    case AttnQBias: return &q_bias;
    case AttnKBias: return &k_bias;
    case AttnVBias: return &v_bias;
    case AttnQNorm: return &q_norm;
    case AttnKNorm: return &k_norm;
    case PostAttnNorm: return &post_attn_norm;
    case PostFfnNorm: return &post_ffn_norm;
    case AttnSinks: return &sinks;
    case AttnOutputBias: return &o_bias;
    case FfnRouterBias: return &router_bias;
    case FfnGateExpertsBias: return &gate_exps_bias;
    case FfnUpExpertsBias: return &up_exps_bias;
    case FfnDownExpertsBias: return &down_exps_bias;
    default: fail("layer role {} is a matrix, not a vector", role_info(role).gguf_part);
  }
}

LayerOnDevice LayerOnDevice::in_slot(uint64_t bytes) const {
  LayerOnDevice l = *this;
  for (MatrixPart& part : l.qkv) part.m = offset_device_matrix(part.m, bytes);
  for (DeviceMatrix* m : {&l.wo, &l.gate, &l.up, &l.down, &l.router}) *m = offset_device_matrix(*m, bytes);
  return l;
}

DeviceWeights::DeviceWeights(const GgufFile& file, const ModelSpec& c, const ModelWeights& w, int64_t context,
                             const RunnerBuffers& buffers, LayerRange range, const CudaDeviceInfo& device,
                             const CudaRunnerOptions& options)
    : config_(c), range_(range) {
  const std::string gpu = fmt::format("GPU {} ({})", device.index, device.name);
  const TensorRank* tensor = options.stage && options.stage->tensor ? &*options.stage->tensor : nullptr;
  // A tensor split's ranks all run every layer; rank 0 holds the ends.
  const bool ends = !tensor || tensor->rank == 0;
  const bool embeds = range.first == 0 && ends, has_head = range.end == c.n_layers && ends;
  OpenedReader opened = open_layer_reader(file.path(), options);
  reads_ = plan_layer_reads(file.header(), opened.reader->alignment(), file.path());
  size_t free_bytes = 0, total_bytes = 0;
  NT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  CudaPlacement placement;
  const bool moe = c.has_experts();
  if (moe) {
    // Every layer's attention, norms and router resident; the experts are the ExpertStore's.
    if (options.stage) {
      fail("{}: the layer and tensor splits run dense models only so far; run this mixture of experts on one GPU",
           file.path());
    }
    if (options.cpu_layers > 0) {
      fail("{}: --cpu-layers {}: the hybrid split computes whole layers; a mixture of experts keeps its layers on the GPU "
           "and its experts in VRAM or pinned RAM (use --cpu-layers 0)",
           file.path(), options.cpu_layers);
    }
    placement.plan.layer_tier.assign(size_t(range.count()), Tier::Vram);
    if (!options.draft_model.empty()) placement.draft = draft_model_vram(context, device.multiprocessors, options);
  } else if (options.stage) {
    placement.plan.layer_tier = options.stage->tiers;  // the multi-GPU plan placed the stage
  } else {
    try {
      placement = place_layers(c, w, reads_, buffers, context, device.multiprocessors, options);
    } catch (const Error& e) {
      fail("{}: does not fit on {}: {} ({:.2f} GiB of {:.2f} GiB are free); lower -c or use a smaller model",
           file.path(), gpu, e.what(), gib(free_bytes), gib(total_bytes));
    }
  }
  tiers_ = placement.plan.layer_tier;
  if (tensor && std::count(tiers_.begin(), tiers_.end(), Tier::Disk) > 0) {
    fail("{}: the tensor split's rank {} streams its cuts from pinned RAM only, but its plan reads {} of {} layers from "
         "storage (raise --ram-budget, or use --split layer)",
         gpu, tensor->rank, std::count(tiers_.begin(), tiers_.end(), Tier::Disk), tiers_.size());
  }
  options.cpu_passes.check(options.cpu_layers);
  if (moe) {
    on_cpu_.assign(tiers_.size(), false);
  } else {
    for (const Path p : spread_cpu_paths(placement.plan, options.cpu_layers)) on_cpu_.push_back(p == Path::Cpu);
  }

  ArenaPlan plan;  // resident weights
  // A matrix's source: the tensor's rows, or the columns or rows of it a tensor-split rank holds.
  struct Source {
    const WeightRef* ref;
    MatrixShard cut;
    int64_t rows() const { return cut.axis == ShardAxis::Rows ? cut.count : ref->rows; }
    int64_t cols() const { return cut.axis == ShardAxis::Rows ? ref->cols : cut.count; }
  };
  const ModelSpec full = tensor ? read_model_spec(file.header(), file.path()) : c;
  const auto source = [&](const WeightRef* ref, LayerMatrix kind) {
    if (!tensor) return Source{ref, {ShardAxis::Rows, 0, ref->rows}};
    const MatrixShard cut = layer_matrix_shard(full, tensor->shard, kind);
    check_shard(ref->type, ref->rows, ref->cols, cut, ref->info->name);
    return Source{ref, cut};
  };
  struct Pending {
    DeviceMatrix* target;
    uint64_t offset;
    std::vector<Source> parts;  // stacked row-wise
    int streamed = -1;          // streamed index: offset is inside its GPU slot
  };
  std::vector<Pending> matrices;
  struct PendingVector {
    const float** target;
    uint64_t offset;
    const void* data;
    uint64_t bytes;
  };
  std::vector<PendingVector> vectors;
  std::vector<ArenaPlan> slot_plans;  // per streamed layer

  auto add_matrix = [&](DeviceMatrix* target, std::vector<Source> parts, int streamed) {
    int64_t rows = 0;
    for (const Source& p : parts) rows += p.rows();
    target->type = parts[0].ref->type;
    target->rows = rows;
    target->cols = parts[0].cols();
    const uint64_t bytes = device_matrix_bytes(target->type, rows, target->cols);  // throws for unsupported formats
    ArenaPlan& arena = streamed < 0 ? plan : slot_plans[size_t(streamed)];
    matrices.push_back({target, arena.reserve(bytes), std::move(parts), streamed});
  };
  auto whole = [&](const WeightRef* ref) { return std::vector<Source>{{ref, {ShardAxis::Rows, 0, ref->rows}}}; };
  auto add_vector = [&](const float** target, const void* data, uint64_t bytes) {
    vectors.push_back({target, plan.reserve(bytes), data, bytes});
  };

  std::vector<int64_t> streamed_layers;
  std::vector<std::vector<const float**>> layer_tables;  // per RoPE table: the layers' pointers to it
  rope_tables_.reserve(size_t(range.count()));
  inv_freq_host_.reserve(size_t(range.count()));  // the uploads read them where they are
  layers_.resize(size_t(c.n_layers));
  for (int64_t l = range.first; l < range.end; ++l) {
    const LayerWeights& lw = w.layers[size_t(l)];
    LayerOnDevice& ld = layers_[size_t(l)];
    int streamed = -1;
    if (tier(l) != Tier::Vram) {
      streamed = int(streamed_layers.size());
      streamed_layers.push_back(l);
      slot_plans.emplace_back();
    }
    for (const LayerRole role : layer_roles(c, l)) {
      if (role_info(role).kind == RoleKind::Vector) add_vector(ld.vector(role), lw[role].data, lw[role].bytes());
    }
    // Llama 3.1's factors belong to the model's table; a layer with a table
    // of its own (Gemma 3's local layers) takes none, as on the CPU.
    const RopeSpec& rope = c.layers[size_t(l)].attention.rope;
    const auto table = std::find(rope_tables_.begin(), rope_tables_.end(), rope);
    const size_t t = size_t(table - rope_tables_.begin());
    if (table == rope_tables_.end()) {
      const float* factors = c.has_rope_freqs_tensor && rope == c.rope() ? reinterpret_cast<const float*>(w.rope_freqs.data) : nullptr;
      rope_tables_.push_back(rope);
      inv_freq_host_.push_back(rope_inv_freqs(rope, c.rope_dim, factors));
      layer_tables.emplace_back();
    }
    layer_tables[t].push_back(&ld.inv_freq);
    const Source q = source(&lw[LayerRole::AttnQ], LayerMatrix::Q), k = source(&lw[LayerRole::AttnK], LayerMatrix::K), v = source(&lw[LayerRole::AttnV], LayerMatrix::V);
    const bool fused = layer_matrix_groups(lw).size() == 5;
    ld.qkv.resize(fused ? 1 : 3);
    if (fused) {
      add_matrix(&ld.qkv[0].m, {q, k, v}, streamed);
    } else {
      add_matrix(&ld.qkv[0].m, {q}, streamed);
      add_matrix(&ld.qkv[1].m, {k}, streamed);
      add_matrix(&ld.qkv[2].m, {v}, streamed);
      ld.qkv[1].out_offset = c.q_dim();
      ld.qkv[2].out_offset = c.q_dim() + c.kv_dim();
    }
    add_matrix(&ld.wo, {source(&lw[LayerRole::AttnOutput], LayerMatrix::Output)}, streamed);
    if (c.layers[size_t(l)].has_experts()) {
      add_matrix(&ld.router, whole(&lw[LayerRole::FfnRouter]), streamed);
    } else {
      add_matrix(&ld.gate, {source(&lw[LayerRole::FfnGate], LayerMatrix::Gate)}, streamed);
      add_matrix(&ld.up, {source(&lw[LayerRole::FfnUp], LayerMatrix::Up)}, streamed);
      add_matrix(&ld.down, {source(&lw[LayerRole::FfnDown], LayerMatrix::Down)}, streamed);
    }
    if (c.layers[size_t(l)].has_experts()) {  // the k of n experts a token reads
      const MoeSpec& m = c.layers[size_t(l)].moe;
      uint64_t experts = 0;
      for (const LayerRole role : {LayerRole::FfnGateExperts, LayerRole::FfnUpExperts, LayerRole::FfnDownExperts}) {
        experts += lw[role].bytes();
      }
      bytes_per_token_ += lw.bytes() - experts + experts / uint64_t(m.n_experts) * uint64_t(m.n_experts_used);
    } else if (tensor) {  // the norms and the rank's cuts
      bytes_per_token_ += lw[LayerRole::AttnNorm].bytes() + lw[LayerRole::FfnNorm].bytes();
      for (const Pending& m : std::span(matrices).last(fused ? 5 : 7)) {
        for (const Source& p : m.parts) bytes_per_token_ += uint64_t(p.rows()) * row_bytes(p.ref->type, p.cols());
      }
    } else {
      bytes_per_token_ += lw.bytes();
    }
  }
  if (embeds || (has_head && c.tied_embeddings)) add_matrix(&token_embd_, whole(&w.token_embd), -1);
  if (has_head) {
    if (!c.tied_embeddings) add_matrix(&output_, whole(&w.output), -1);
    bytes_per_token_ += w.output.bytes() + w.output_norm.bytes();
    add_vector(&output_norm_, w.output_norm.data, w.output_norm.bytes());
  }
  for (size_t t = 0; t < inv_freq_host_.size(); ++t) {
    add_vector(layer_tables[t][0], inv_freq_host_[t].data(), inv_freq_host_[t].size() * sizeof(float));
  }

  // GPU slots of the streamed layers and their H2D landing buffer.
  uint64_t landing_bytes = 0;
  for (size_t j = 0; j < slot_plans.size(); ++j) {
    slot_bytes_ = std::max(slot_bytes_, slot_plans[j].size());
    landing_bytes = std::max(landing_bytes, kLandingBuffers * reads_[size_t(streamed_layers[j])].staging_bytes);
  }
  const int slots = streamed_layers.empty() ? 0 : options.ring_slots;
  const uint64_t ring_bytes = uint64_t(slots) * slot_bytes_;

  // Everything the runner allocates, and the draft model loaded after it,
  // checked against free memory before uploading.
  const uint64_t needed =
      plan.size() + ring_bytes + landing_bytes + buffers.kv + buffers.page_table + buffers.gemm + buffers.activations +
      kUploadStagingBytes;
  const uint64_t draft_bytes = placement.draft.total();
  if (needed + draft_bytes + kMemoryMarginBytes > free_bytes) {
    fail("{}: does not fit on {}: {:.2f} GiB needed (weights {:.2f}, layer ring {:.2f}, KV cache {:.2f} for {} tokens, "
         "scratch {:.2f}){} plus a {:.2f} GiB margin, but {:.2f} GiB of {:.2f} GiB are free; lower -c, use a smaller "
         "model or a smaller --vram-budget",
         file.path(), gpu, gib(needed), gib(plan.size()), gib(ring_bytes + landing_bytes), gib(buffers.kv + buffers.page_table), context,
         gib(buffers.gemm + buffers.activations),
         draft_bytes ? fmt::format(" and {:.2f} GiB for --draft-model {}", gib(draft_bytes), placement.draft.path) : "",
         gib(kMemoryMarginBytes), gib(free_bytes), gib(total_bytes));
  }
  device_bytes_ = plan.size() + ring_bytes + landing_bytes;
  if (moe) {  // the experts take what the budget leaves
    const uint64_t usable = free_bytes > kMemoryMarginBytes ? free_bytes - kMemoryMarginBytes : 0;
    const uint64_t budget = std::min(options.vram_budget.value_or(usable), usable);
    const uint64_t taken = needed + draft_bytes + ExpertFfn::scratch_bytes(c, options.max_batch);
    const ExpertPlan plan = plan_experts(c, w, budget > taken ? budget - taken : 0, options.max_vram_experts);
    experts_ = std::make_unique<ExpertStore>(c, w, plan, options.expert_counts, options.on_load_progress);
    device_bytes_ += experts_->device_bytes();
  }

  weights_ = DeviceBuffer(plan.size(), "the model weights");
  if (ring_bytes) ring_ = DeviceBuffer(ring_bytes, "the streamed-layer ring");
  auto* base = weights_.as<uint8_t>();
  for (const PendingVector& v : vectors) {
    NT_CUDA_CHECK(cudaMemcpy(base + v.offset, v.data, v.bytes, cudaMemcpyHostToDevice));
    *v.target = reinterpret_cast<const float*>(base + v.offset);
  }
  for (const auto& layers : layer_tables) {  // the layers sharing a table point at its one copy
    for (const float** target : layers) *target = *layers[0];
  }
  std::vector<StreamedLayer> streamed(streamed_layers.size());
  std::map<const GgufTensorInfo*, uint64_t> staging_offset;
  for (size_t j = 0; j < streamed.size(); ++j) {
    const int64_t l = streamed_layers[j];
    streamed[j].layer = l;
    streamed[j].tier = tier(l);
    streamed[j].read = reads_[size_t(l)];
    for (const LayerRead::Tensor& t : reads_[size_t(l)].tensors) staging_offset[t.info] = t.staging_offset;
  }
  // A tensor-split rank's streamed layers: its cuts packed into a pinned image
  // of their own (the rank streams only what it computes), each cut at an
  // aligned offset, gathered from the file's mapping at load.
  struct PackedCut {
    Source source;
    uint64_t offset;
  };
  std::vector<std::vector<PackedCut>> packed(streamed.size());
  std::vector<uint64_t> packed_bytes(streamed.size(), 0);
  constexpr uint64_t kCutAlignment = 256;
  std::vector<UploadPart> uploads;
  // A tensor-split rank's column cuts: each row's run of blocks, gathered on
  // the host and uploaded after the rest (a read a row would be 16,384 reads
  // a 70B layer).
  std::vector<std::pair<DeviceMatrix, Source>> column_cuts;
  uint64_t column_bytes = 0;
  for (const Pending& p : matrices) {
    if (p.streamed >= 0) {
      *p.target = place_device_matrix(p.target->type, p.target->rows, p.target->cols, ring_.as<uint8_t>() + p.offset);
      StreamedMatrix m{*p.target, {}};
      int64_t row = 0;
      for (const Source& part : p.parts) {
        if (tensor) {
          uint64_t& end = packed_bytes[size_t(p.streamed)];
          end = align_up(end, kCutAlignment);
          packed[size_t(p.streamed)].push_back({part, end});
          m.parts.push_back({end, row, part.rows()});
          end += uint64_t(part.rows()) * row_bytes(part.ref->type, part.cols());
        } else {
          m.parts.push_back({staging_offset.at(part.ref->info), row, part.ref->rows});
        }
        row += part.rows();
      }
      streamed[size_t(p.streamed)].matrices.push_back(std::move(m));
      continue;
    }
    *p.target = place_device_matrix(p.target->type, p.target->rows, p.target->cols, base + p.offset);
    int64_t row = 0;
    for (const Source& part : p.parts) {
      const uint64_t start = file.header().data_offset + part.ref->info->offset;
      const uint64_t file_row = part.ref->row_stride();
      if (part.cut.axis == ShardAxis::Rows) {
        uploads.push_back({*p.target, row, part.cut.count, start + uint64_t(part.cut.first) * file_row});
      } else {  // attn_output's and ffn_down's cuts: matrices of one part
        column_cuts.emplace_back(*p.target, part);
        column_bytes += uint64_t(part.rows()) * row_bytes(part.ref->type, part.cols());
      }
      row += part.rows();
    }
  }
  for (size_t j = 0; j < streamed.size() && tensor; ++j) {
    streamed[j].read.runs.clear();  // nothing of the file is read as it lies
    streamed[j].read.staging_bytes = streamed[j].read.file_bytes = packed_bytes[j];
    streamed[j].fill = [cuts = std::move(packed[j])](uint8_t* image) {
      for (const auto& [source, offset] : cuts) {
        const WeightRef& ref = *source.ref;
        if (source.cut.axis == ShardAxis::Rows) {  // contiguous in the file: one copy
          std::memcpy(image + offset, ref.data + uint64_t(source.cut.first) * ref.row_stride(),
                      uint64_t(source.cut.count) * ref.row_stride());
          continue;
        }
        const std::vector<uint8_t> bytes = extract_shard(ref.type, ref.data, ref.rows, ref.cols, source.cut, ref.info->name);
        std::memcpy(image + offset, bytes.data(), bytes.size());
      }
    };
  }
  // Progress counts the resident weights' upload, then the RAM tier's reads.
  uint64_t ram_tier_bytes = 0;
  for (const StreamedLayer& l : streamed) ram_tier_bytes += l.tier == Tier::Ram ? l.read.file_bytes : 0;
  const uint64_t resident_upload = upload_bytes(uploads) + column_bytes, load_total = resident_upload + ram_tier_bytes;
  auto report_from = [&](uint64_t before) -> std::function<void(uint64_t, uint64_t)> {
    if (!options.on_load_progress) return {};
    return [progress = options.on_load_progress, before, load_total](uint64_t done, uint64_t) {
      progress(before + done, load_total);
    };
  };
  const OpenedReader load = open_upload_reader(file.path(), options);
  UploadOptions upload;
  upload.slot_bytes = kUploadStagingBytes;
  upload_weights(*load.reader, uploads, upload, report_from(0));
  if (!column_cuts.empty()) {
    const DeviceBuffer staging(kUploadStagingBytes, "the column-cut upload staging");
    const auto progress = report_from(resident_upload - column_bytes);
    uint64_t done = 0;
    for (const auto& [target, cut] : column_cuts) {
      const std::vector<uint8_t> bytes =
          extract_shard(cut.ref->type, cut.ref->data, cut.ref->rows, cut.ref->cols, cut.cut, cut.ref->info->name);
      upload_matrix_rows(target, 0, target.rows, bytes.data(), staging.get(), staging.size());
      done += bytes.size();
      if (progress) progress(done, column_bytes);
    }
  }
  if (has_head && c.tied_embeddings) output_ = token_embd_;
  if (!streamed.empty()) {
    LayerStreamOptions so;
    so.device = device.index;
    so.gpu_slots = options.ring_slots;
    so.slot_bytes = slot_bytes_;
    so.staging_slots = options.ring_slots;
    so.run_ahead = options.stream_run_ahead;
    so.trace_path = options.trace_path;
    so.load_reader = load.reader.get();
    so.on_load_progress = report_from(resident_upload);
    streamer_ = std::make_unique<LayerStreamer>(std::move(opened.reader), std::move(streamed), so);
  }
}

DeviceWeights::~DeviceWeights() {
  if (streamer_) std::fprintf(stderr, "%s\n", streamer_->summary().c_str());
  if (experts_ && !experts_->all_resident()) std::fprintf(stderr, "%s\n", experts_->summary().c_str());
}

std::unique_ptr<HostLayers> DeviceWeights::make_host_layers(const ModelWeights& weights, int64_t pages,
                                                            const KvRowsParams& kv, int64_t max_rows, int threads) const {
  std::vector<int64_t> layers;
  std::vector<const uint8_t*> pinned;
  for (int64_t l = range_.first; l < range_.end; ++l) {
    if (!on_cpu_[size_t(l - range_.first)]) continue;
    layers.push_back(l);
    pinned.push_back(streamer_->pinned_bytes(l));
  }
  if (layers.empty()) return nullptr;
  return std::make_unique<HostLayers>(config_, weights, layers, pinned, reads_, weights.rope_freqs.info ? weights.rope_freqs.f32() : nullptr, pages, kv, max_rows, threads);
}

}  // namespace nt
