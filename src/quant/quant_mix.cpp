#include "quant/quant_mix.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <string>

#include "core/error.h"

namespace nt {
namespace {

using S = QuantScheme;
using T = TensorType;

constexpr std::array kSchemes = {
    QuantSchemeInfo{S::F32, "F32", T::F32, false, 0},
    QuantSchemeInfo{S::F16, "F16", T::F16, false, 1},
    QuantSchemeInfo{S::BF16, "BF16", T::BF16, false, 32},
    QuantSchemeInfo{S::Q4_0, "Q4_0", T::Q4_0, true, 2},
    QuantSchemeInfo{S::Q4_1, "Q4_1", T::Q4_1, true, 3},
    QuantSchemeInfo{S::Q5_0, "Q5_0", T::Q5_0, true, 8},
    QuantSchemeInfo{S::Q5_1, "Q5_1", T::Q5_1, true, 9},
    QuantSchemeInfo{S::Q8_0, "Q8_0", T::Q8_0, true, 7},
    QuantSchemeInfo{S::Q2_K, "Q2_K", T::Q2_K, false, 10},
    QuantSchemeInfo{S::Q3_K, "Q3_K", T::Q3_K, false, 12},
    QuantSchemeInfo{S::Q4_K, "Q4_K", T::Q4_K, false, 15},
    QuantSchemeInfo{S::Q5_K, "Q5_K", T::Q5_K, false, 17},
    QuantSchemeInfo{S::Q3_K_S, "Q3_K_S", T::Q3_K, true, 11},
    QuantSchemeInfo{S::Q3_K_M, "Q3_K_M", T::Q3_K, true, 12},
    QuantSchemeInfo{S::Q3_K_L, "Q3_K_L", T::Q3_K, true, 13},
    QuantSchemeInfo{S::Q4_K_S, "Q4_K_S", T::Q4_K, true, 14},
    QuantSchemeInfo{S::Q4_K_M, "Q4_K_M", T::Q4_K, true, 15},
    QuantSchemeInfo{S::Q5_K_S, "Q5_K_S", T::Q5_K, true, 16},
    QuantSchemeInfo{S::Q5_K_M, "Q5_K_M", T::Q5_K, true, 17},
    QuantSchemeInfo{S::Q6_K, "Q6_K", T::Q6_K, false, 18},
};

// "blk.12.ffn_down.weight" -> layer 12, role "ffn_down"; "output.weight" -> role "output".
struct TensorRole {
  std::optional<int64_t> layer;
  std::string_view role;
};

TensorRole parse_role(std::string_view name) {
  constexpr std::string_view kWeight = ".weight";
  TensorRole out;
  if (name.ends_with(kWeight)) name.remove_suffix(kWeight.size());
  if (name.starts_with("blk.")) {
    name.remove_prefix(4);
    int64_t layer = 0;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
    if (ec == std::errc() && end < name.data() + name.size() && *end == '.') {
      out.layer = layer;
      name.remove_prefix(size_t(end - name.data()) + 1);
    }
  }
  out.role = name;
  return out;
}

// Trailing dimensions of 1 do not count, as in GGUF: [4096, 1] is a vector.
bool is_matrix(std::span<const int64_t> shape) {
  return shape.size() >= 2 && std::any_of(shape.begin() + 1, shape.end(), [](int64_t d) { return d > 1; });
}

// The first and last eighth of the layers, and every third layer in between.
bool more_bits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

bool divides(TensorType type, int64_t width) { return width % tensor_type_info(type).block_elems == 0; }

TensorType output_type(TensorType base, int64_t width) {
  if (!divides(base, width)) return T::Q8_0;
  return base == T::Q8_0 ? T::Q8_0 : T::Q6_K;
}

// The 70B Llama shape: 80 layers sharing each KV head among several query heads.
bool is_70b_shape(const TensorPlacementInfo& t) { return t.n_layers == 80 && t.n_gqa > 1; }

TensorType attn_v_type(S scheme, TensorType base, int64_t layer, const TensorPlacementInfo& t) {
  TensorType type = base;
  switch (scheme) {
    case S::Q3_K_M: type = layer < 2 ? T::Q5_K : T::Q4_K; break;
    case S::Q3_K_L: type = T::Q5_K; break;
    case S::Q4_K_S: if (layer < 4) type = T::Q5_K; break;
    case S::Q4_K_M:
    case S::Q5_K_M: if (more_bits(layer, t.n_layers)) type = T::Q6_K; break;
    default: break;
  }
  if (is_70b_shape(t) && (type == T::Q3_K || type == T::Q4_K)) type = T::Q5_K;
  return type;
}

TensorType ffn_down_type(S scheme, TensorType base, int64_t layer, int64_t n_layers) {
  switch (scheme) {
    case S::Q3_K_M: return layer < n_layers / 16 ? T::Q5_K : T::Q4_K;
    case S::Q3_K_L: return T::Q5_K;
    case S::Q4_K_S: return layer < n_layers / 8 ? T::Q5_K : base;
    case S::Q4_K_M:
    case S::Q5_K_M: return more_bits(layer, n_layers) ? T::Q6_K : base;
    default: return base;
  }
}

TensorType attn_output_type(S scheme, TensorType base) {
  switch (scheme) {
    case S::Q3_K_M: return T::Q4_K;
    case S::Q3_K_L: return T::Q5_K;
    default: return base;
  }
}

// A type whose block does not divide the row width gives way to a legacy type
// of about the same size, and that to F16.
TensorType fit_row_width(TensorType type, int64_t width) {
  if (divides(type, width)) return type;
  switch (type) {
    case T::Q2_K:
    case T::Q3_K: type = T::Q4_0; break;
    case T::Q4_K: type = T::Q5_0; break;
    case T::Q5_K: type = T::Q5_1; break;
    case T::Q6_K: type = T::Q8_0; break;
    default: break;
  }
  return divides(type, width) ? type : T::F16;
}

}  // namespace

std::span<const QuantSchemeInfo> quant_schemes() { return kSchemes; }

const QuantSchemeInfo& quant_scheme_info(QuantScheme scheme) {
  for (const auto& info : kSchemes) {
    if (info.scheme == scheme) return info;
  }
  fail("internal: quant scheme {} missing from the scheme table", int(scheme));
}

std::optional<QuantScheme> quant_scheme_from_name(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  for (const auto& info : kSchemes) {
    if (info.name == upper) return info.scheme;
  }
  return std::nullopt;
}

TensorType choose_tensor_type(QuantScheme scheme, const TensorPlacementInfo& t) {
  if (!is_matrix(t.shape) || t.name.ends_with("_norm.weight") || t.name.ends_with("ffn_gate_inp.weight")) return T::F32;
  const auto& info = quant_scheme_info(scheme);
  const TensorType base = info.base_type;
  if (base == T::F32 || base == T::F16 || base == T::BF16) return base;

  const int64_t width = t.shape[0];
  const TensorRole role = parse_role(t.name);
  if (role.layer && (*role.layer < 0 || *role.layer >= t.n_layers)) {
    fail("tensor {}: layer {} is outside the model's {} layers", t.name, *role.layer, t.n_layers);
  }

  TensorType type = base;
  if (!info.mix) {
    // Single-type schemes: nothing but the row-width fallback.
  } else if (role.role == "output" || (role.role == "token_embd" && !t.has_output)) {
    type = output_type(base, width);
  } else if (role.layer && role.role == "attn_v") {
    type = attn_v_type(scheme, base, *role.layer, t);
  } else if (role.layer && role.role == "ffn_down") {
    type = ffn_down_type(scheme, base, *role.layer, t.n_layers);
  } else if (role.layer && role.role == "attn_output") {
    type = attn_output_type(scheme, base);
  }
  return fit_row_width(type, width);
}

}  // namespace nt
