#include "planning/device_memory_plan.h"

#include <algorithm>

#include "core/byte_size.h"
#include "core/error.h"
#include "runtime/kernel_shapes.h"
#include "runtime/kv_pages.h"

namespace nt {

ActivationLayout layout_activations(const ModelSpec& c, int64_t batch, int64_t context, int multiprocessors, bool head) {
  const uint64_t b = uint64_t(batch);
  const uint64_t max_input = uint64_t(std::max({c.dim, c.q_dim(), c.ffn_dim}));
  ActivationLayout a{};
  // The partials of the widest key split any chunk length, or decode step of n sequences, uses.
  for (int64_t n = 1; n <= batch; ++n) {
    const int splits = attention_splits(n, int(c.n_heads), int(c.n_kv_heads), int(c.head_dim), context, multiprocessors);
    a.partial_floats = std::max<uint64_t>(a.partial_floats, attention_partials_floats(n, int(c.n_heads), int(c.head_dim), splits));
    const int seq_splits =
        attention_sequence_splits(n, int(c.n_heads), int(c.n_kv_heads), int(c.head_dim), context, multiprocessors);
    if (seq_splits > 1) {
      const int64_t stride = attention_sequence_partials_stride(int(c.n_heads), int(c.head_dim), seq_splits);
      a.partial_floats = std::max<uint64_t>(a.partial_floats, uint64_t(n * stride));
    }
  }
  ArenaPlan plan;
  a.inputs = plan.reserve(4 * uint64_t(batch_input_words(batch)));
  a.x = plan.reserve(4 * b * uint64_t(c.dim));
  a.xn = plan.reserve(4 * b * max_input);
  a.qkv = plan.reserve(4 * b * uint64_t(c.q_dim() + 2 * c.kv_dim()));
  a.att = plan.reserve(4 * b * uint64_t(c.q_dim()));
  a.gate = plan.reserve(4 * b * uint64_t(c.ffn_dim));
  a.up = plan.reserve(4 * b * uint64_t(c.ffn_dim));
  a.h = plan.reserve(4 * b * uint64_t(c.ffn_dim));
  a.logits = plan.reserve(head ? 4 * b * uint64_t(c.vocab_size) : 0);
  a.partials = plan.reserve(4 * a.partial_floats);
  a.q8 = plan.reserve(b * max_input);
  a.q8_scales = plan.reserve(8 * b * max_input / 32);
  a.f16 = plan.reserve(2 * b * max_input);
  // The folded norms' inputs, a row per token: a stepwise run folds them for each of its tokens.
  a.norm_q8 = plan.reserve(b * uint64_t(c.dim));
  a.norm_q8_scales = plan.reserve(8 * b * uint64_t(c.dim) / 32);
  a.norm_sumsq = plan.reserve(4 * b * uint64_t(c.dim) / 32);
  a.argmax = plan.reserve(4 * b);
  a.argmax_scratch = plan.reserve(argmax_scratch_bytes(int64_t(b), c.vocab_size));
  a.head_rows = plan.reserve(4 * b);
  a.top = plan.reserve(sizeof(TopLogit) * kMaxTopLogits + 4);  // then the poisoned index
  a.top_scratch = plan.reserve(top_logits_scratch_bytes(c.vocab_size));
  a.total = plan.size();
  return a;
}

std::vector<std::vector<const WeightRef*>> layer_matrix_groups(const LayerWeights& lw) {
  using enum LayerRole;
  std::vector<std::vector<const WeightRef*>> g;
  const WeightRef &q = lw[AttnQ], &k = lw[AttnK], &v = lw[AttnV];
  if (q.type == k.type && q.type == v.type) {
    g.push_back({&q, &k, &v});
  } else {
    g.push_back({&q});
    g.push_back({&k});
    g.push_back({&v});
  }
  for (size_t r = 0; r < kLayerRoleCount; ++r) {
    const auto role = LayerRole(r);
    if (role == AttnQ || role == AttnK || role == AttnV || !lw.has(role) || role_info(role).kind != RoleKind::Matrix) continue;
    g.push_back({&lw[role]});
  }
  return g;
}

uint64_t group_device_bytes(const std::vector<const WeightRef*>& parts) {
  int64_t rows = 0;
  for (const WeightRef* p : parts) rows += p->rows;
  // The CUDA backend has no MXFP4 layout yet: a plan of a model with MXFP4
  // weights (which runs on the CPU, as its note says) takes them at their size in the file.
  if (parts[0]->type == TensorType::MXFP4) return align_device(uint64_t(rows) * row_bytes(TensorType::MXFP4, parts[0]->cols));
  return device_matrix_bytes(parts[0]->type, rows, parts[0]->cols);  // throws for unsupported formats
}

uint64_t page_table_bytes(int64_t sequences, int64_t width) { return align_device(4 * uint64_t(sequences) * uint64_t(width)); }

uint64_t cache_bytes_per_position(const ModelSpec& c) { return 2 * uint64_t(c.n_layers) * uint64_t(c.kv_dim()) * 2; }

KvWindowPlan device_kv_window(const ModelSpec& c, int64_t cache_context, int max_sequences, int64_t kv_pool,
                              int64_t max_batch, bool windowed) {
  const int64_t full_pages = KvPages::pool_pages(kv_pool, max_sequences, cache_context, kKvTile);
  return plan_kv_window(c, full_pages, max_sequences, max_batch, kKvTile, !windowed);
}

RunnerBuffers runner_buffers(const ModelSpec& c, const ModelWeights& w, int64_t context, int64_t cache_context,
                             int64_t max_batch, int max_sequences, int multiprocessors, int64_t kv_pool, bool windowed) {
  return stage_buffers(c, w, context, cache_context, max_batch, max_sequences, multiprocessors, c.n_layers, true, kv_pool,
                       windowed);
}

RunnerBuffers stage_buffers(const ModelSpec& c, const ModelWeights& w, int64_t context, int64_t cache_context,
                            int64_t max_batch, int max_sequences, int multiprocessors, int64_t layers, bool head,
                            int64_t kv_pool, bool windowed) {
  uint64_t largest = uint64_t(w.token_embd.rows) * uint64_t(w.token_embd.cols);
  if (!c.tied_embeddings) largest = std::max(largest, uint64_t(w.output.rows) * uint64_t(w.output.cols));
  for (const LayerWeights& lw : w.layers) {
    for (const auto& g : layer_matrix_groups(lw)) {
      int64_t rows = 0;
      for (const WeightRef* p : g) rows += p->rows;
      largest = std::max(largest, uint64_t(rows) * uint64_t(g[0]->cols));
    }
  }
  RunnerBuffers b;
  const int64_t pool_positions = KvPages::pool_pages(kv_pool, max_sequences, cache_context, kKvTile) * kKvTile;
  const uint64_t layer_position = cache_bytes_per_position(c) / uint64_t(c.n_layers);
  // A stage of a split holds a whole context in every layer.
  const KvWindowPlan window = device_kv_window(c, cache_context, max_sequences, kv_pool, max_batch, windowed && layers == c.n_layers);
  const int64_t full_layers = window.window > 0 ? window.full_layers : layers;
  b.window_kv = layer_position * uint64_t(window.window_layers) * uint64_t(window.pages * kKvTile);
  b.kv = layer_position * uint64_t(full_layers) * uint64_t(pool_positions) + b.window_kv;
  b.page_table = page_table_bytes(max_sequences, cache_context / kKvTile) * (window.window > 0 ? 2 : 1);
  b.gemm = std::min(kGemmScratchMaxBytes, largest * 2);
  const ActivationLayout a = layout_activations(c, max_batch, context, multiprocessors, head);
  b.activations = a.total;
  b.logits = a.partials - a.logits;  // the logits rows as reserved: up to the next buffer
  return b;
}

ModelFootprint device_footprint(const ModelSpec& c, const ModelWeights& w, const std::vector<LayerRead>& reads) {
  if (reads.size() != w.layers.size()) fail("the file has tensors for {} layers but block_count says {}", reads.size(), w.layers.size());
  ModelFootprint m;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    uint64_t bytes = 0;
    for (const auto& g : layer_matrix_groups(w.layers[l])) bytes += group_device_bytes(g);
    m.layers.push_back({bytes, reads[l].file_bytes, reads[l].staging_bytes});
  }
  m.tied_embeddings = c.tied_embeddings;
  m.output_head_bytes = group_device_bytes({c.tied_embeddings ? &w.token_embd : &w.output});
  m.resident_embedding_bytes = group_device_bytes({&w.token_embd});
  // Every layer's vectors (norms, biases: F32) stay resident, streamed or not.
  uint64_t vectors = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (const LayerRole role : layer_roles(c, l)) {
      const RoleShape shape = role_shape(c, role, l);
      if (role_info(role).kind == RoleKind::Vector) vectors += align_device(4 * uint64_t(shape.cols * std::max<int64_t>(1, shape.experts)));
    }
  }
  m.small_bytes = vectors + 2 * align_device(4 * uint64_t(c.dim)) + (c.tied_embeddings ? 0 : m.resident_embedding_bytes);
  return m;
}

VramReserve vram_reserve(const RunnerBuffers& buffers, const ModelFootprint& model) {
  uint64_t max_staging = 0;
  for (const LayerFootprint& l : model.layers) max_staging = std::max(max_staging, l.staging_bytes);
  VramReserve r;
  r.kv_cache = buffers.kv;
  r.page_table = buffers.page_table;
  r.gemm_scratch = buffers.gemm;
  r.logits = buffers.logits;
  r.activations = buffers.activations - buffers.logits;
  r.staging = kUploadStagingBytes + kStreamLandingBuffers * max_staging;
  return r;
}

DraftVram draft_vram(const std::string& path, const ModelSpec& c, const ModelWeights& w, const std::vector<LayerRead>& reads,
                     int64_t context, int sequences, int multiprocessors, int64_t kv_pool) {
  const RunnerBuffers buffers =
      runner_buffers(c, w, context, kv_cache_context(context), kDefaultMaxBatch, sequences, multiprocessors, kv_pool);
  const ModelFootprint model = device_footprint(c, w, reads);
  const VramReserve reserve = vram_reserve(buffers, model);
  DraftVram d;
  d.path = path;
  for (const LayerFootprint& l : model.layers) d.weights += l.resident_bytes;
  d.weights += model.output_head_bytes + model.small_bytes;  // small_bytes holds an untied token embedding
  d.kv_cache = reserve.kv_cache + reserve.page_table;
  d.buffers = reserve.total() - d.kv_cache;
  return d;
}

DevicePlacement plan_device_placement(const ModelSpec& c, const ModelWeights& w, const std::vector<LayerRead>& reads,
                                      const RunnerBuffers& buffers, int ring_slots, uint64_t vram_budget,
                                      uint64_t ram_budget, const DraftVram* draft) {
  DevicePlacement p;
  if (draft) p.draft = *draft;
  if (p.draft.total() > vram_budget) {
    fail("--draft-model {}: the draft needs {} of VRAM (weights {}, KV cache {}, buffers {}), more than the whole VRAM "
         "budget of {}; raise --vram-budget or use a smaller draft",
         p.draft.path, format_size(p.draft.total()), format_size(p.draft.weights), format_size(p.draft.kv_cache),
         format_size(p.draft.buffers), format_size(vram_budget));
  }
  p.footprint = device_footprint(c, w, reads);
  p.request.reserve = vram_reserve(buffers, p.footprint);
  p.request.vram_budget = vram_budget - p.draft.total();
  p.request.ram_budget = ram_budget;
  p.request.ring_slots = ring_slots;
  p.request.staging_slots = ring_slots;
  try {
    p.plan = plan_placement(p.footprint, p.request);
  } catch (const Error& e) {
    if (!draft) throw;
    fail("{} (that is what the VRAM budget of {} leaves beside --draft-model {}, which takes {})", e.what(),
         format_size(vram_budget), p.draft.path, format_size(p.draft.total()));
  }
  return p;
}

std::vector<uint64_t> free_vram_budgets(const std::vector<int>& ids, const std::vector<uint64_t>& free_bytes) {
  std::vector<uint64_t> budgets;
  for (size_t g = 0; g < ids.size(); ++g) {
    const uint64_t stages = uint64_t(std::count(ids.begin(), ids.end(), ids[g]));
    const uint64_t margin = stages * kMemoryMarginBytes;
    budgets.push_back(free_bytes[g] > margin ? (free_bytes[g] - margin) / stages : 0);
  }
  return budgets;
}

MultiGpuRequest device_multi_gpu_request(const GgufHeader& header, const ModelSpec& c, const ModelFootprint& model,
                                         const RunnerBuffers& buffers, std::vector<GpuResources> gpus, uint64_t ram_budget,
                                         int ring_slots) {
  MultiGpuRequest r;
  r.gpus = std::move(gpus);
  r.ram_budget = ram_budget;
  r.reserve = vram_reserve(buffers, model);
  r.ring_slots = r.staging_slots = ring_slots;
  r.shape = tensor_split_shape(header, c);
  r.hidden_bytes_per_token = uint64_t(c.dim) * 4;
  return r;
}

}  // namespace nt
