#include "planning/multi_gpu_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/align.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "model/tensor_names.h"
#include "quant/tensor_type.h"

namespace nt {
namespace {

bool part_is(std::string_view name, std::string_view part) {
  return name.find(std::string(".") + std::string(part) + ".") != std::string_view::npos;
}

// Counts of `total` units in proportion to `weights`, by cumulative rounding
// (so they sum to total); a GPU left with none is an error naming it and `what`.
std::vector<int64_t> share_out(int64_t total, const std::vector<GpuResources>& gpus, const std::string& what) {
  double sum = 0;
  for (const auto& g : gpus) sum += double(g.vram_budget);
  std::vector<int64_t> counts;
  double cumulative = 0;
  int64_t given = 0;
  for (const auto& g : gpus) {
    cumulative += double(g.vram_budget);
    const int64_t upto = &g == &gpus.back() ? total : std::llround(double(total) * cumulative / sum);
    counts.push_back(upto - given);
    given = upto;
    if (counts.back() <= 0) {
      fail("tensor split over {} GPUs: GPU {} (VRAM budget {}) gets none of the {} {}", gpus.size(), g.id,
           format_size(g.vram_budget), total, what);
    }
  }
  return counts;
}

// Where a column cut of a tensor may fall: between its blocks, and for the
// float types between the GPU mat-vec's loads of 4 (F32) or 8 (F16, BF16).
int64_t column_cut_unit(TensorType type) {
  if (type == TensorType::F32) return 4;
  if (type == TensorType::F16 || type == TensorType::BF16) return 8;
  return tensor_type_info(type).block_elems;
}

bool shares_a_gpu(const MultiGpuPlan& plan) {
  std::set<int> ids;
  for (const GpuPlacement& g : plan.gpus) ids.insert(g.gpu.id);
  return ids.size() < plan.gpus.size();
}

// A layer's shard on one GPU: the replicated part and its shares of the rest.
LayerFootprint scaled(const LayerFootprint& l, double fraction) {
  auto part = [&](uint64_t bytes) { return uint64_t(std::ceil(double(bytes) * fraction)); };
  return {part(l.resident_bytes), part(l.streamed_bytes), part(l.staging_bytes)};
}

struct GpuModel {
  ModelFootprint model;
  VramReserve reserve;
};

PlacementPlan place_on_gpu(const GpuModel& m, const MultiGpuRequest& request, const GpuResources& gpu) {
  PlanRequest r;
  r.vram_budget = gpu.vram_budget;
  r.ram_budget = std::numeric_limits<uint64_t>::max();  // the shared RAM is assigned afterwards
  r.reserve = m.reserve;
  r.ring_slots = request.ring_slots;
  r.staging_slots = request.staging_slots;
  r.disk_to_device = request.disk_to_device;
  try {
    return plan_placement(m.model, r);
  } catch (const Error& e) {
    fail("GPU {}: {}", gpu.id, e.what());
  }
}

// One streamed layer (or shard) of one GPU, in the order RAM is handed out.
struct Streamed {
  size_t gpu;
  size_t index;  // in that GPU's plan
};

// The shared pinned RAM: streamed layers in `order` take it while it lasts
// (each GPU reading storage also needs its staging buffers), as
// plan_placement does for one GPU. Rewrites the plans' RAM and disk fields.
uint64_t assign_shared_ram(std::vector<GpuPlacement>& gpus, const std::vector<GpuModel>& models,
                           const std::vector<Streamed>& order, const MultiGpuRequest& request) {
  auto layer = [&](const Streamed& s) -> const LayerFootprint& { return models[s.gpu].model.layers[s.index]; };
  auto ram_needed = [&](size_t in_ram) {
    uint64_t bytes = 0;
    std::vector<uint64_t> staging(gpus.size(), 0);
    for (size_t k = 0; k < order.size(); ++k) {
      if (k < in_ram) {
        bytes += layer(order[k]).staging_bytes;
      } else {
        staging[order[k].gpu] = std::max(staging[order[k].gpu], layer(order[k]).staging_bytes);
      }
    }
    if (!request.disk_to_device) {
      for (uint64_t s : staging) bytes += uint64_t(request.staging_slots) * s;
    }
    return bytes;
  };
  size_t in_ram = order.size() + 1;
  for (size_t j = order.size() + 1; j-- > 0;) {
    if (ram_needed(j) <= request.ram_budget) {
      in_ram = j;
      break;
    }
  }
  if (in_ram > order.size()) {
    fail("RAM budget {} is too small: the GPUs' storage staging buffers alone need {}", format_size(request.ram_budget),
         format_size(ram_needed(0)));
  }
  for (auto& g : gpus) {
    PlacementPlan& p = g.plan;
    p.ram_layers = p.ram_staging = p.ram_slot_bytes = p.streamed_from_ram = p.streamed_from_disk = 0;
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const LayerFootprint& l = layer(order[k]);
    PlacementPlan& p = gpus[order[k].gpu].plan;
    if (k < in_ram) {
      p.layer_tier[order[k].index] = Tier::Ram;
      p.ram_layers += l.staging_bytes;
      p.streamed_from_ram += l.streamed_bytes;
    } else {
      p.layer_tier[order[k].index] = Tier::Disk;
      p.streamed_from_disk += l.streamed_bytes;
      if (!request.disk_to_device) p.ram_slot_bytes = std::max(p.ram_slot_bytes, l.staging_bytes);
    }
  }
  uint64_t total = 0;
  for (auto& g : gpus) {
    g.plan.ram_staging = uint64_t(request.staging_slots) * g.plan.ram_slot_bytes;
    total += g.plan.ram_total();
  }
  return total;
}

void check_placement_request(const ModelFootprint& model, const MultiGpuRequest& request, Split split) {
  if (request.gpus.empty()) fail("a multi-GPU plan needs at least one GPU");
  // A GPU listed twice in a layer split holds two stages, and one GPU listed
  // for every rank of a tensor split holds all the shards: how one GPU tests
  // either. Otherwise a tensor split's ranks need GPUs of their own.
  std::set<int> seen;
  for (const auto& g : request.gpus) {
    if (!seen.insert(g.id).second && split == Split::Tensor &&
        std::any_of(request.gpus.begin(), request.gpus.end(), [&](const GpuResources& o) { return o.id != g.id; })) {
      fail("GPU {} is listed twice: a tensor split needs distinct GPUs, or one GPU for every rank", g.id);
    }
  }
  if (model.layers.size() < request.gpus.size()) {
    fail("{} layers cannot be shared among {} GPUs", model.layers.size(), request.gpus.size());
  }
}

void check_rates(const MultiGpuRequest& request) {
  for (const auto& g : request.gpus) {
    if (g.gpu_gbps <= 0) fail("GPU {}: a compute rate is needed to predict a pass", g.id);
  }
  if (request.gpus.size() > 1 && request.peer_gbps <= 0) fail("a GPU-to-GPU speed is needed to predict several GPUs");
}

// The small tensors GPU g of G holds in the layer split: the last GPU the
// norms and the rest of small_bytes, the first the token embedding, which a
// device footprint counts in small_bytes (or as the head, when tied).
uint64_t stage_small_bytes(const ModelFootprint& model, size_t g, size_t G) {
  if (G == 1) return model.small_bytes;
  const bool first = g == 0, last = g + 1 == G;
  uint64_t bytes = first ? model.resident_embedding_bytes : 0;
  if (last) bytes += model.small_bytes - (model.tied_embeddings ? 0 : model.resident_embedding_bytes);
  return bytes;
}

// The layer split's ranges: cumulative layer cost (weights and KV cache)
// follows the GPUs' cumulative capacity for layers.
std::vector<int64_t> layer_boundaries(const ModelFootprint& model, const MultiGpuRequest& request, uint64_t kv_per_layer) {
  const auto& gpus = request.gpus;
  const VramReserve& r = request.reserve;
  std::vector<double> capacity;
  for (size_t g = 0; g < gpus.size(); ++g) {
    uint64_t fixed = r.activations + r.gemm_scratch + r.staging + stage_small_bytes(model, g, gpus.size());
    if (g + 1 == gpus.size()) fixed += r.logits + model.output_head_bytes;
    if (gpus[g].vram_budget <= fixed) {
      fail("GPU {}: VRAM budget {} holds no layer: its buffers besides layers need {}", gpus[g].id,
           format_size(gpus[g].vram_budget), format_size(fixed));
    }
    capacity.push_back(double(gpus[g].vram_budget - fixed));
  }
  const size_t n = model.layers.size(), G = gpus.size();
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + double(model.layers[i].resident_bytes + kv_per_layer);
  double total_capacity = 0;
  for (double c : capacity) total_capacity += c;
  std::vector<int64_t> end;
  double cumulative = 0;
  size_t previous = 0;
  for (size_t g = 0; g + 1 < G; ++g) {
    cumulative += capacity[g];
    const double target = prefix[n] * cumulative / total_capacity;
    size_t best = previous + 1;  // every GPU runs at least one layer
    for (size_t k = previous + 1; k <= n - (G - 1 - g); ++k) {
      if (std::fabs(prefix[k] - target) < std::fabs(prefix[best] - target)) best = k;
    }
    end.push_back(int64_t(best));
    previous = best;
  }
  end.push_back(int64_t(n));
  return end;
}

void plan_layer_split(const ModelFootprint& model, const MultiGpuRequest& request, MultiGpuPlan& plan,
                      std::vector<GpuModel>& models) {
  const size_t G = request.gpus.size();
  const uint64_t kv_per_layer = request.reserve.kv_cache / model.layers.size();
  const std::vector<int64_t> end = layer_boundaries(model, request, kv_per_layer);
  for (size_t g = 0; g < G; ++g) {
    GpuPlacement p;
    p.gpu = request.gpus[g];
    p.first_layer = g == 0 ? 0 : end[g - 1];
    p.end_layer = end[g];
    p.kv_heads = request.shape.n_kv_heads;
    p.ffn_columns = request.shape.ffn_dim;
    GpuModel m;
    m.model.layers.assign(model.layers.begin() + p.first_layer, model.layers.begin() + p.end_layer);
    const bool first = g == 0, last = g + 1 == G;
    m.model.tied_embeddings = G == 1 && model.tied_embeddings;
    m.model.token_embd_bytes = first ? model.token_embd_bytes : 0;
    m.model.output_head_bytes = last ? model.output_head_bytes : 0;
    m.model.small_bytes = stage_small_bytes(model, g, G);
    m.reserve = request.reserve;
    m.reserve.kv_cache = kv_per_layer * uint64_t(p.end_layer - p.first_layer);
    if (!last) m.reserve.logits = 0;
    p.plan = place_on_gpu(m, request, p.gpu);
    plan.gpus.push_back(std::move(p));
    models.push_back(std::move(m));
  }
}

void plan_tensor_split(const ModelFootprint& model, const MultiGpuRequest& request, MultiGpuPlan& plan,
                       std::vector<GpuModel>& models) {
  const TensorSplitShape& s = request.shape;
  const size_t G = request.gpus.size();
  if (s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0 || s.head_dim <= 0 || s.ffn_dim <= 0) {
    fail("tensor split: the head geometry ({} heads, {} KV heads, head size {}, FFN {}) cannot be cut", s.n_heads,
         s.n_kv_heads, s.head_dim, s.ffn_dim);
  }
  // attn_output may be cut only where its columns fall on a block boundary:
  // after every `unit` KV-head groups.
  const int64_t group_columns = s.n_heads / s.n_kv_heads * s.head_dim;
  int64_t unit = 1;
  while ((unit * group_columns) % s.attn_output_block != 0) ++unit;
  const int64_t attention_pieces = ceil_div(s.n_kv_heads, unit);
  if (attention_pieces < int64_t(G)) {
    fail("tensor split over {} GPUs: attn_output ({} columns a KV-head group, blocks of {}) can be cut only into {} "
         "piece{} of {} KV-head group{}",
         G, group_columns, s.attn_output_block, attention_pieces, attention_pieces == 1 ? "" : "s", unit,
         unit == 1 ? "" : "s");
  }
  if (s.ffn_dim % s.ffn_down_block != 0) {
    fail("tensor split: ffn_down's {} columns are not whole blocks of {}", s.ffn_dim, s.ffn_down_block);
  }
  const auto pieces = share_out(attention_pieces, request.gpus, "attention pieces (KV-head groups)");
  const auto ffn_blocks = share_out(s.ffn_dim / s.ffn_down_block, request.gpus,
                                    fmt::format("blocks of {} ffn_down columns", s.ffn_down_block));
  const double replicated = std::max(0.0, 1.0 - s.attention_fraction - s.ffn_fraction);
  int64_t kv_head = 0, ffn_column = 0;
  for (size_t g = 0; g < G; ++g) {
    GpuPlacement p;
    p.gpu = request.gpus[g];
    p.end_layer = int64_t(model.layers.size());
    p.first_kv_head = kv_head;
    p.kv_heads = std::min(pieces[g] * unit, s.n_kv_heads - kv_head);
    p.first_ffn_column = ffn_column;
    p.ffn_columns = ffn_blocks[g] * s.ffn_down_block;
    kv_head += p.kv_heads;
    ffn_column += p.ffn_columns;
    const double heads = double(p.kv_heads) / double(s.n_kv_heads);
    const double fraction =
        replicated + s.attention_fraction * heads + s.ffn_fraction * double(p.ffn_columns) / double(s.ffn_dim);
    GpuModel m;
    for (const auto& l : model.layers) m.model.layers.push_back(scaled(l, fraction));
    const bool first = g == 0;
    m.model.tied_embeddings = first && model.tied_embeddings;
    m.model.token_embd_bytes = first ? model.token_embd_bytes : 0;
    m.model.output_head_bytes = first ? model.output_head_bytes : 0;
    m.model.small_bytes = model.small_bytes;  // norms on every GPU
    m.reserve = request.reserve;
    m.reserve.kv_cache = uint64_t(std::ceil(double(request.reserve.kv_cache) * heads));
    if (!first) m.reserve.logits = 0;
    p.plan = place_on_gpu(m, request, p.gpu);
    plan.gpus.push_back(std::move(p));
    models.push_back(std::move(m));
  }
}

GpuStage predict_stage(const GpuPlacement& p, const ModelFootprint& model, const MultiGpuRequest& request,
                       uint64_t disk_bytes) {
  uint64_t resident = model.output_head_bytes, streamed_resident = 0;
  for (size_t i = 0; i < p.plan.layer_tier.size(); ++i) {
    (p.plan.layer_tier[i] == Tier::Vram ? resident : streamed_resident) += model.layers[i].resident_bytes;
  }
  const uint64_t streamed = p.plan.streamed_from_ram + p.plan.streamed_from_disk;
  if (streamed > 0 && p.gpu.h2d_gbps <= 0) fail("GPU {}: a host-to-device speed is needed to predict streaming", p.gpu.id);
  if (disk_bytes > 0 && request.disk_gbps <= 0) fail("a storage read speed is needed to predict disk layers");
  GpuStage s;
  s.resident = double(resident) / (p.gpu.gpu_gbps * 1e9);
  s.streamed = double(streamed_resident) / (p.gpu.gpu_gbps * 1e9);
  s.link = streamed > 0 ? double(streamed) / (p.gpu.h2d_gbps * 1e9) : 0;
  s.disk = disk_bytes > 0 ? double(disk_bytes) / (request.disk_gbps * 1e9) : 0;
  return s;
}

// The placement, and each GPU's own footprint for the prediction.
MultiGpuPlan place(const ModelFootprint& model, const MultiGpuRequest& request, Split split, std::vector<GpuModel>& models) {
  check_placement_request(model, request, split);
  MultiGpuPlan plan;
  plan.split = split;
  if (split == Split::Layer) {
    plan_layer_split(model, request, plan, models);
  } else {
    plan_tensor_split(model, request, plan, models);
  }

  // Streamed layers take the shared RAM in layer order (shards of a layer by GPU).
  std::vector<Streamed> order;
  for (size_t layer = 0; layer < model.layers.size(); ++layer) {
    for (size_t g = 0; g < plan.gpus.size(); ++g) {
      const GpuPlacement& p = plan.gpus[g];
      if (int64_t(layer) < p.first_layer || int64_t(layer) >= p.end_layer) continue;
      const size_t index = layer - size_t(p.first_layer);
      if (p.plan.layer_tier[index] != Tier::Vram) order.push_back({g, index});
    }
  }
  plan.ram_total = assign_shared_ram(plan.gpus, models, order, request);
  return plan;
}

}  // namespace

std::string_view split_name(Split split) { return split == Split::Layer ? "layer" : "tensor"; }

double GpuStage::seconds() const { return resident + std::max({link, disk, streamed}); }

TensorSplitShape tensor_split_shape(const GgufHeader& header, const ModelSpec& config) {
  TensorSplitShape s;
  s.n_heads = config.n_heads;
  s.n_kv_heads = config.n_kv_heads;
  s.head_dim = config.head_dim;
  s.ffn_dim = config.ffn_dim;
  uint64_t attention = 0, ffn = 0, all = 0;
  for (const auto& t : header.tensors) {
    if (!layer_of_tensor(t.name)) continue;
    all += t.n_bytes;
    const int64_t block = column_cut_unit(t.type);
    if (part_is(t.name, "attn_output")) s.attn_output_block = std::max(s.attn_output_block, block);
    if (part_is(t.name, "ffn_down")) s.ffn_down_block = std::max(s.ffn_down_block, block);
    for (std::string_view part : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
      if (part_is(t.name, part)) attention += t.n_bytes;
    }
    for (std::string_view part : {"ffn_gate", "ffn_up", "ffn_down"}) {
      if (part_is(t.name, part)) ffn += t.n_bytes;
    }
  }
  if (all > 0) {
    s.attention_fraction = double(attention) / double(all);
    s.ffn_fraction = double(ffn) / double(all);
  }
  return s;
}

MultiGpuPlan place_multi_gpu(const ModelFootprint& model, const MultiGpuRequest& request, Split split) {
  std::vector<GpuModel> models;
  return place(model, request, split, models);
}

MultiGpuPlan plan_multi_gpu(const ModelFootprint& model, const MultiGpuRequest& request, Split split) {
  std::vector<GpuModel> models;
  MultiGpuPlan plan = place(model, request, split, models);
  check_rates(request);
  uint64_t all_disk = 0;
  for (const auto& p : plan.gpus) all_disk += p.plan.streamed_from_disk;
  const double G = double(plan.gpus.size()), T = double(std::max<int64_t>(request.tokens, 1));
  const double copy = G > 1 ? double(request.hidden_bytes_per_token) * T / (request.peer_gbps * 1e9) : 0;
  double slowest = 0, sum = 0;
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    GpuPlacement& p = plan.gpus[g];
    p.stage = predict_stage(p, models[g].model, request, split == Split::Layer ? p.plan.streamed_from_disk : all_disk);
    slowest = std::max(slowest, p.stage.seconds());
    sum += p.stage.seconds();
  }
  if (split == Split::Layer) {
    plan.communication = (G - 1) * (request.peer_latency_s + copy);
    plan.seconds = sum + plan.communication;
  } else {
    plan.communication =
        G > 1 ? 2.0 * double(model.layers.size()) * (request.peer_latency_s + 2.0 * (G - 1) / G * copy) : 0;
    plan.seconds = slowest + plan.communication;
  }
  return plan;
}

std::vector<SplitCandidate> split_candidates(const ModelFootprint& model, const MultiGpuRequest& request, bool predict) {
  std::vector<SplitCandidate> all;
  for (Split split : {Split::Layer, Split::Tensor}) {
    SplitCandidate c;
    c.split = split;
    try {
      c.plan = predict ? plan_multi_gpu(model, request, split) : place_multi_gpu(model, request, split);
    } catch (const Error& e) {
      c.error = e.what();
    }
    all.push_back(std::move(c));
  }
  return all;
}

const SplitCandidate& fastest_split(const std::vector<SplitCandidate>& candidates) {
  const SplitCandidate* best = nullptr;
  std::string reasons;
  for (const auto& c : candidates) {
    if (!c.plan) {
      reasons += fmt::format("{}{} split: {}", reasons.empty() ? "" : "; ", split_name(c.split), c.error);
    } else if (c.split == Split::Tensor && shares_a_gpu(*c.plan)) {
      reasons += fmt::format("{}tensor split: its ranks share a GPU, which only tests it (--split tensor)",
                             reasons.empty() ? "" : "; ");
    } else if (!best || c.plan->seconds < best->plan->seconds) {
      best = &c;
    }
  }
  if (!best) fail("no split fits: {}", reasons);
  return *best;
}

}  // namespace nt
