// The tensors of a decoder layer by role. A layer's spec says which roles it
// has; the loader, the memory plan, the placement and upload, and the
// synthetic writer loop over them instead of restating one family's list.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch/model_spec.h"

namespace nt {

enum class LayerRole : uint8_t {
  AttnNorm,
  AttnQ, AttnK, AttnV,
  AttnQBias, AttnKBias, AttnVBias,
  AttnQNorm, AttnKNorm,
  AttnSinks,
  AttnOutput, AttnOutputBias,
  PostAttnNorm,
  FfnNorm,
  FfnNormNamedPostAttention,  // FfnNorm where LayerSpec::ffn_norm_named_post_attention
  FfnGate, FfnUp, FfnDown,
  PostFfnNorm,
  // A mixture of experts in place of FfnGate, FfnUp, FfnDown: the router, then
  // every expert's matrices stacked in one 3-D tensor per kind; with
  // MoeSpec::biases, the router's bias and each stack's biases (one row per expert).
  FfnRouter,
  FfnGateExperts, FfnUpExperts, FfnDownExperts,
  FfnRouterBias,
  FfnGateExpertsBias, FfnUpExpertsBias, FfnDownExpertsBias,
};
inline constexpr size_t kLayerRoleCount = size_t(LayerRole::FfnDownExpertsBias) + 1;

enum class RoleKind {
  Matrix,  // rows x cols, any weight format (a stack of such matrices when RoleShape::experts > 0)
  Vector,  // a norm weight, a bias or the sinks, F32 (a row per expert when RoleShape::experts > 0)
};

struct RoleShape {
  int64_t rows = 1;  // 1 for vectors
  int64_t cols = 0;
  // > 0: that many rows x cols matrices stacked, GGUF shape [cols, rows, experts]
  // (vectors: GGUF shape [cols, experts])
  int64_t experts = 0;
};

struct RoleInfo {
  LayerRole role;
  std::string_view gguf_part;    // "attn_q": blk.N.attn_q.weight
  std::string_view gguf_suffix;  // "weight" or "bias"
  RoleKind kind;
};

const RoleInfo& role_info(LayerRole role);

// The roles of layer `layer` of `spec`, in the order the forward pass uses them.
std::vector<LayerRole> layer_roles(const ModelSpec& spec, int64_t layer);

// The shape a role's tensor must have in layer `layer` of `spec` (which
// matters only to the experts' roles).
RoleShape role_shape(const ModelSpec& spec, LayerRole role, int64_t layer = 0);

// "blk.3.attn_q.bias"
std::string role_tensor_name(int64_t layer, LayerRole role);

// The role of the norm before a layer's FFN.
LayerRole ffn_norm_role(const LayerSpec& layer);

}  // namespace nt
