#include "model/synthetic_model.h"

#include "core/byte_size.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include "core/error.h"
#include "core/progress.h"
#include "gguf/gguf_writer.h"
#include "model/arch/layer_roles.h"
#include "model/rope.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/vocab_writer.h"

namespace nt {
namespace {

// splitmix64: a fast, well-mixed generator; seeds are derived per tensor and row.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  float gaussian() {
    const double u1 = std::max(uniform(), 1e-300), u2 = uniform();
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.141592653589793 * u2));
  }
};

// Distinct quantized rows a matrix is tiled from: quantizing every row of a
// 70B model would take many minutes, tiling a pool writes at disk speed.
struct RowPool {
  std::vector<uint8_t> bytes;
  size_t row_bytes = 0;
  int64_t rows = 0;
};

// Adds a planned structure to row `row` of a matrix before it is quantized (--router-skew).
using RowShift = std::function<void(int64_t row, float* values)>;

// Rows [0, rows) of gaussian values of `stddev` (row r seeded by seed and r),
// each shifted and quantized.
std::vector<uint8_t> draw_rows(TensorType type, int64_t cols, float stddev, int64_t rows, uint64_t seed, const RowShift& shift) {
  const size_t bytes_per_row = row_bytes(type, cols);
  std::vector<uint8_t> bytes(bytes_per_row * size_t(rows));
  const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n_threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = t; r < rows; r += n_threads) {
        Rng rng{seed * 0x100000001b3ull + uint64_t(r)};
        for (auto& x : row) x = stddev * rng.gaussian();
        if (shift) shift(r, row.data());
        quantize_row(type, row.data(), bytes.data() + size_t(r) * bytes_per_row, cols);
      }
    });
  }
  for (auto& th : threads) th.join();
  return bytes;
}

RowPool make_pool(TensorType type, int64_t cols, float stddev, int64_t rows, uint64_t seed, const RowShift& shift) {
  RowPool pool;
  pool.row_bytes = row_bytes(type, cols);
  pool.rows = rows;
  pool.bytes = draw_rows(type, cols, stddev, rows, seed, shift);
  return pool;
}

struct PlannedTensor {
  std::string name;
  std::vector<int64_t> shape;  // GGUF order
  TensorType type;
  float stddev;       // matrices: weight scale; vectors: spread around `center`
  float center = 0.0f;
  const std::vector<float>* values = nullptr;  // fixed contents (rope_freqs)
  // Every row drawn on its own instead of tiled from a pool: the routers, and
  // the expert stacks small enough, so that no two experts share weights.
  bool distinct_rows = false;
  RowShift shift = nullptr;  // added to each row (of the pool when tiled)
};

// Stacks of experts up to this many weights are drawn row by row (distinct_rows).
constexpr int64_t kDistinctExpertWeights = int64_t(1) << 24;
// Router weights' scale over the other matrices' (write_synthetic_model's comment).
constexpr float kRouterScale = 4.0f;
// Clamped-SwiGLU experts' gate and up weights' scale over the other matrices': their
// values spread with this deviation, so that a few pass the clamp at 7 and it shapes
// the output (their down weights shrink by its square to keep the residual O(1)).
constexpr float kClampReach = 2.5f;
// Attention sinks are drawn in [-kSinkSpread, kSinkSpread]: logits of the size of
// the scores, so that a sink takes a clear share of its head's attention.
constexpr float kSinkSpread = 2.0f;

// The shared direction of --router-skew: a random unit vector.
std::vector<float> skew_direction(int64_t dim, uint64_t seed) {
  Rng rng{seed ^ 0x5bd1e995u};
  std::vector<float> u(static_cast<size_t>(dim));
  double norm = 0.0;
  for (float& x : u) {
    x = rng.gaussian();
    norm += double(x) * x;
  }
  for (float& x : u) x = float(x / std::sqrt(norm));
  return u;
}

// --router-skew's parts: embedding rows (1 +- 1/2) sqrt(dim) u, alternating;
// router rows with their u component replaced by skew * exp(-e / k) * scale u.
RowShift embedding_skew(const std::vector<float>& u) {
  return [&u](int64_t row, float* values) {
    const float along = (row % 2 == 0 ? 1.5f : 0.5f) * std::sqrt(float(u.size()));
    for (size_t i = 0; i < u.size(); ++i) values[i] += along * u[i];
  };
}

RowShift router_skew_shift(const std::vector<float>& u, float skew, int64_t experts_used, float router_std) {
  return [&u, skew, experts_used, router_std](int64_t expert, float* values) {
    double along = 0.0;
    for (size_t i = 0; i < u.size(); ++i) along += double(values[i]) * u[i];
    const double target = skew * std::exp(-double(expert) / double(experts_used)) * router_std;
    for (size_t i = 0; i < u.size(); ++i) values[i] += float((target - along) * u[i]);
  };
}

std::vector<float> llama31_rope_factors(const ModelSpec& c) {
  ModelSpec unscaled = c;
  unscaled.rope_scaling = {};
  unscaled.has_rope_freqs_tensor = false;
  ModelSpec scaled = c;
  scaled.has_rope_freqs_tensor = false;
  const auto base = rope_inv_freqs(unscaled, nullptr);
  const auto target = rope_inv_freqs(scaled, nullptr);
  std::vector<float> factors(base.size());
  for (size_t i = 0; i < base.size(); ++i) factors[i] = base[i] / target[i];
  return factors;
}

}  // namespace

void write_synthetic_model(const ModelPreset& preset, QuantScheme scheme, uint64_t seed, const std::string& path,
                           bool dry_run, float router_skew) {
  const auto& c = preset.config;
  if (router_skew < 0.0f) fail("--router-skew {}: must not be negative", router_skew);
  if (router_skew > 0.0f && !c.has_experts()) fail("--router-skew: preset '{}' has no mixture of experts", preset.name);
  const float in_std = 1.0f / std::sqrt(float(c.dim));
  // Output projections add into the residual stream once per layer: shrink them
  // so its norm stays O(1) through every layer.
  const float residual_std = in_std / std::sqrt(2.0f * float(c.n_layers));
  const auto down_std_of = [&](int64_t width) { return 1.0f / std::sqrt(float(width)) / std::sqrt(2.0f * float(c.n_layers)); };
  const float down_std = down_std_of(c.ffn_dim);
  const float router_std = kRouterScale * in_std;
  const auto rope_factors = c.has_rope_freqs_tensor ? llama31_rope_factors(c) : std::vector<float>{};
  const auto skew_u = router_skew > 0.0f ? skew_direction(c.dim, seed) : std::vector<float>{};

  std::vector<PlannedTensor> plan;
  // A matrix, or a stack of `experts` matrices (GGUF shape [cols, rows, experts]).
  auto matrix = [&](std::string name, int64_t rows, int64_t cols, float stddev, int64_t experts = 0) -> PlannedTensor& {
    std::vector<int64_t> shape{cols, rows};
    if (experts > 0) shape.push_back(experts);
    const TensorPlacementInfo info{name, shape, c.n_layers, c.n_heads / c.n_kv_heads, !c.tied_embeddings};
    const TensorType type = experts > 0 && preset.expert_type ? *preset.expert_type : choose_tensor_type(scheme, info);
    return plan.emplace_back(PlannedTensor{std::move(name), shape, type, stddev});
  };
  // Norm weights spread around 1, biases around 0.
  auto vector = [&](std::string name, int64_t n, float center) {
    plan.push_back({std::move(name), {n}, TensorType::F32, 0.1f, center});
  };
  // The scale of each role's weights.
  auto role_std = [&](LayerRole role, const LayerSpec& layer) {
    const float clamp_reach = layer.activation == FfnActivation::SwigluOai ? kClampReach : 1.0f;
    switch (role) {
      case LayerRole::AttnOutput: return residual_std;
      case LayerRole::FfnDown: return down_std;
      case LayerRole::FfnGateExperts: case LayerRole::FfnUpExperts: return clamp_reach * in_std;
      case LayerRole::FfnDownExperts: return down_std_of(layer.moe.expert_ffn_dim) / (clamp_reach * clamp_reach);
      case LayerRole::FfnRouter: return router_std;
      case LayerRole::AttnQBias: case LayerRole::AttnKBias: case LayerRole::AttnVBias: case LayerRole::FfnRouterBias:
      case LayerRole::FfnGateExpertsBias: case LayerRole::FfnUpExpertsBias: return 0.5f;
      case LayerRole::AttnOutputBias: case LayerRole::FfnDownExpertsBias: return 0.1f;
      case LayerRole::AttnSinks: return kSinkSpread;
      default: return in_std;
    }
  };

  // Embeddings of RMS 1, after the family's scaling (Gemma multiplies them by sqrt(dim)).
  PlannedTensor& embeddings = matrix("token_embd.weight", c.vocab_size, c.dim, 1.0f / c.embedding_scale);
  if (router_skew > 0.0f) embeddings.shift = embedding_skew(skew_u);
  if (c.has_rope_freqs_tensor) {
    plan.push_back({"rope_freqs.weight", {c.rope_dim / 2}, TensorType::F32, 0.0f, 0.0f, &rope_factors});
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerSpec& layer = c.layers[size_t(l)];
    for (LayerRole role : layer_roles(c, l)) {
      const RoleShape shape = role_shape(c, role, l);
      const std::string name = role_tensor_name(l, role);
      if (role_info(role).kind == RoleKind::Matrix) {
        PlannedTensor& t = matrix(name, shape.rows, shape.cols, role_std(role, layer), shape.experts);
        if (role == LayerRole::FfnRouter) {
          t.distinct_rows = true;
          if (router_skew > 0.0f) t.shift = router_skew_shift(skew_u, router_skew, layer.moe.n_experts_used, router_std);
        }
        if (shape.experts > 0) t.distinct_rows = shape.experts * shape.rows * shape.cols <= kDistinctExpertWeights;
      } else if (shape.experts > 0) {  // a bias per expert, each row drawn on its own
        PlannedTensor& t = plan.emplace_back(PlannedTensor{name, {shape.cols, shape.experts}, TensorType::F32, role_std(role, layer)});
        t.distinct_rows = true;
      } else if (role_info(role).gguf_suffix == "bias" || role == LayerRole::AttnSinks) {
        plan.push_back({name, {shape.cols}, TensorType::F32, role_std(role, layer), 0.0f});
      } else {
        vector(name, shape.cols, 1.0f);
      }
    }
  }
  vector("output_norm.weight", c.dim, 1.0f);
  if (!c.tied_embeddings) matrix("output.weight", c.vocab_size, c.dim, in_std);

  GgufWriter w(dry_run ? "" : path);
  const std::string p = c.architecture + ".";
  w.add_metadata("general.architecture", GgufValue::of_string(c.architecture));
  w.add_metadata("general.name", GgufValue::of_string(fmt::format("{} (random weights, seed {})", preset.name, seed)));
  w.add_metadata("general.file_type", GgufValue::of_u32(quant_scheme_info(scheme).file_type));
  w.add_metadata(p + "context_length", GgufValue::of_u32(uint32_t(c.context_length)));
  w.add_metadata(p + "embedding_length", GgufValue::of_u32(uint32_t(c.dim)));
  w.add_metadata(p + "block_count", GgufValue::of_u32(uint32_t(c.n_layers)));
  w.add_metadata(p + "feed_forward_length", GgufValue::of_u32(uint32_t(c.ffn_dim)));
  w.add_metadata(p + "attention.head_count", GgufValue::of_u32(uint32_t(c.n_heads)));
  w.add_metadata(p + "attention.head_count_kv", GgufValue::of_u32(uint32_t(c.n_kv_heads)));
  w.add_metadata(p + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(c.rms_eps));
  w.add_metadata(p + "rope.dimension_count", GgufValue::of_u32(uint32_t(c.rope_dim)));
  w.add_metadata(p + "rope.freq_base", GgufValue::of_f32(c.rope_theta));
  w.add_metadata(p + "vocab_size", GgufValue::of_u32(uint32_t(c.vocab_size)));
  if (c.head_dim != c.dim / c.n_heads) {
    w.add_metadata(p + "attention.key_length", GgufValue::of_u32(uint32_t(c.head_dim)));
    w.add_metadata(p + "attention.value_length", GgufValue::of_u32(uint32_t(c.head_dim)));
  }
  // Llama 3.1's scaling travels as the rope_freqs tensor; linear scaling and YaRN as keys.
  if (c.rope_scaling.kind == RopeScaling::Kind::Linear) {
    w.add_metadata(p + "rope.scaling.type", GgufValue::of_string("linear"));
    w.add_metadata(p + "rope.scaling.factor", GgufValue::of_f32(c.rope_scaling.factor));
  }
  if (c.rope_scaling.kind == RopeScaling::Kind::Yarn) {
    w.add_metadata(p + "rope.scaling.type", GgufValue::of_string("yarn"));
    w.add_metadata(p + "rope.scaling.factor", GgufValue::of_f32(c.rope_scaling.factor));
    w.add_metadata(p + "rope.scaling.original_context_length", GgufValue::of_u32(uint32_t(c.rope_scaling.original_context)));
    // gpt-oss's converter copies these from its config; the reference engine takes them fixed.
    w.add_metadata(p + "rope.scaling.yarn_beta_fast", GgufValue::of_f32(32.0f));
    w.add_metadata(p + "rope.scaling.yarn_beta_slow", GgufValue::of_f32(1.0f));
  }
  if (c.has_experts()) {
    // Every preset's mixture is the same in every layer.
    const MoeSpec& moe = c.layers[0].moe;
    w.add_metadata(p + "expert_count", GgufValue::of_u32(uint32_t(moe.n_experts)));
    w.add_metadata(p + "expert_used_count", GgufValue::of_u32(uint32_t(moe.n_experts_used)));
    // Mixtral's experts are feed_forward_length wide; Qwen3-MoE's say their width.
    if (c.architecture != "llama") {
      w.add_metadata(p + "expert_feed_forward_length", GgufValue::of_u32(uint32_t(moe.expert_ffn_dim)));
    }
  }
  for (const LayerSpec& layer : c.layers) {
    if (layer.attention.window > 0) {
      w.add_metadata(p + "attention.sliding_window", GgufValue::of_u32(uint32_t(layer.attention.window)));
      if (layer.attention.rope.theta != c.rope_theta) {
        w.add_metadata(p + "rope.freq_base_swa", GgufValue::of_f32(layer.attention.rope.theta));
      }
      break;
    }
  }
  add_vocab_metadata(w, make_synthetic_vocab(int32_t(c.vocab_size), preset.vocab));
  for (const auto& t : plan) w.add_tensor(t.name, t.type, t.shape);
  if (dry_run) {
    for (const auto& t : w.tensors()) {
      std::string dims;
      for (int64_t d : t.shape) dims += (dims.empty() ? "" : " x ") + std::to_string(d);
      fmt::print("{:<32} {:<5} {:>22} {:>14}\n", t.name, tensor_type_name(t.type), dims, t.n_bytes);
    }
    fmt::print("file size {} bytes ({})\n", w.total_bytes(), format_size(w.total_bytes()));
    return;
  }

  ProgressLine progress(fmt::format("writing {} {}", preset.name, quant_scheme_info(scheme).name));
  std::map<std::tuple<TensorType, int64_t, float, bool>, RowPool> pools;
  std::vector<uint8_t> chunk;
  uint64_t tensor_index = 0;
  for (const auto& t : plan) {
    ++tensor_index;
    if (t.shape.size() == 1) {
      std::vector<float> v(static_cast<size_t>(t.shape[0]));
      if (t.values) {
        v = *t.values;
      } else {
        Rng rng{seed ^ (tensor_index * 0x2545f4914f6cdd1dull)};
        for (auto& x : v) x = t.center + t.stddev * float(rng.uniform() * 2.0 - 1.0);
      }
      w.write_tensor_data({reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4});
      continue;
    }
    const int64_t cols = t.shape[0];
    int64_t rows = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) rows *= t.shape[d];
    if (t.distinct_rows) {
      w.write_tensor_data(draw_rows(t.type, cols, t.stddev, rows, seed ^ (tensor_index * 0xd6e8feb86659fd93ull), t.shift));
      progress.update(w.bytes_written(), w.total_bytes());
      continue;
    }
    // A shifted pool is the one tensor's own.
    auto key = std::make_tuple(t.type, cols, t.stddev, bool(t.shift));
    auto it = pools.find(key);
    if (it == pools.end()) {
      const int64_t pool_rows = std::min<int64_t>(rows, 512);
      it = pools.emplace(key, make_pool(t.type, cols, t.stddev, pool_rows, seed + pools.size(), t.shift)).first;
    }
    const RowPool& pool = it->second;
    // Rotate through the pool from a per-tensor offset so layers differ.
    Rng pick{seed ^ (tensor_index * 0x9e3779b97f4a7c15ull)};
    const int64_t offset = int64_t(pick.next() % uint64_t(pool.rows));
    const size_t rows_per_chunk = std::max<size_t>(1, (size_t(64) << 20) / pool.row_bytes);
    for (int64_t r = 0; r < rows;) {
      const int64_t n = std::min<int64_t>(rows - r, int64_t(rows_per_chunk));
      chunk.resize(size_t(n) * pool.row_bytes);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t src = (r + i + offset) % pool.rows;
        std::copy_n(pool.bytes.data() + size_t(src) * pool.row_bytes, pool.row_bytes, chunk.data() + size_t(i) * pool.row_bytes);
      }
      w.write_tensor_data(chunk);
      r += n;
      progress.update(w.bytes_written(), w.total_bytes());
    }
  }
  w.finish();
  progress.update(w.bytes_written(), w.total_bytes());
  progress.finish();
}

}  // namespace nt
