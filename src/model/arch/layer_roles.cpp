#include "model/arch/layer_roles.h"

#include <fmt/format.h>

namespace nt {
namespace {

using enum LayerRole;

constexpr RoleInfo kRoles[kLayerRoleCount] = {
    {AttnNorm, "attn_norm", "weight", RoleKind::Vector},
    {AttnQ, "attn_q", "weight", RoleKind::Matrix},
    {AttnK, "attn_k", "weight", RoleKind::Matrix},
    {AttnV, "attn_v", "weight", RoleKind::Matrix},
    {AttnQBias, "attn_q", "bias", RoleKind::Vector},
    {AttnKBias, "attn_k", "bias", RoleKind::Vector},
    {AttnVBias, "attn_v", "bias", RoleKind::Vector},
    {AttnQNorm, "attn_q_norm", "weight", RoleKind::Vector},
    {AttnKNorm, "attn_k_norm", "weight", RoleKind::Vector},
    {AttnSinks, "attn_sinks", "weight", RoleKind::Vector},
    {AttnOutput, "attn_output", "weight", RoleKind::Matrix},
    {AttnOutputBias, "attn_output", "bias", RoleKind::Vector},
    {PostAttnNorm, "post_attention_norm", "weight", RoleKind::Vector},
    {FfnNorm, "ffn_norm", "weight", RoleKind::Vector},
    {FfnNormNamedPostAttention, "post_attention_norm", "weight", RoleKind::Vector},
    {FfnGate, "ffn_gate", "weight", RoleKind::Matrix},
    {FfnUp, "ffn_up", "weight", RoleKind::Matrix},
    {FfnDown, "ffn_down", "weight", RoleKind::Matrix},
    {PostFfnNorm, "post_ffw_norm", "weight", RoleKind::Vector},
    {FfnRouter, "ffn_gate_inp", "weight", RoleKind::Matrix},
    {FfnGateExperts, "ffn_gate_exps", "weight", RoleKind::Matrix},
    {FfnUpExperts, "ffn_up_exps", "weight", RoleKind::Matrix},
    {FfnDownExperts, "ffn_down_exps", "weight", RoleKind::Matrix},
    {FfnRouterBias, "ffn_gate_inp", "bias", RoleKind::Vector},
    {FfnGateExpertsBias, "ffn_gate_exps", "bias", RoleKind::Vector},
    {FfnUpExpertsBias, "ffn_up_exps", "bias", RoleKind::Vector},
    {FfnDownExpertsBias, "ffn_down_exps", "bias", RoleKind::Vector},
};

constexpr bool roles_in_order() {
  for (size_t i = 0; i < kLayerRoleCount; ++i) {
    if (size_t(kRoles[i].role) != i) return false;
  }
  return true;
}
static_assert(roles_in_order(), "kRoles must list the roles in LayerRole's order");

}  // namespace

const RoleInfo& role_info(LayerRole role) { return kRoles[size_t(role)]; }

std::vector<LayerRole> layer_roles(const ModelSpec& spec, int64_t layer) {
  const LayerSpec& l = spec.layers[size_t(layer)];
  std::vector<LayerRole> roles{AttnNorm, AttnQ, AttnK, AttnV};
  if (l.attention.qkv_bias) roles.insert(roles.end(), {AttnQBias, AttnKBias, AttnVBias});
  if (l.attention.qk_norm) roles.insert(roles.end(), {AttnQNorm, AttnKNorm});
  if (l.attention.sinks) roles.push_back(AttnSinks);
  roles.push_back(AttnOutput);
  if (l.attention.output_bias) roles.push_back(AttnOutputBias);
  if (l.post_attention_norm) roles.push_back(PostAttnNorm);
  roles.push_back(ffn_norm_role(l));
  if (l.has_experts()) {
    roles.insert(roles.end(), {FfnRouter, FfnGateExperts, FfnUpExperts, FfnDownExperts});
    if (l.moe.biases) roles.insert(roles.end(), {FfnRouterBias, FfnGateExpertsBias, FfnUpExpertsBias, FfnDownExpertsBias});
  } else {
    roles.insert(roles.end(), {FfnGate, FfnUp, FfnDown});
  }
  if (l.post_ffn_norm) roles.push_back(PostFfnNorm);
  return roles;
}

RoleShape role_shape(const ModelSpec& c, LayerRole role, int64_t layer) {
  const MoeSpec moe = c.layers.empty() ? MoeSpec{} : c.layers[size_t(layer)].moe;
  switch (role) {
    case AttnNorm: case PostAttnNorm: case FfnNorm: case FfnNormNamedPostAttention: case PostFfnNorm:
    case AttnOutputBias: return {1, c.dim};
    case AttnSinks: return {1, c.n_heads};
    case AttnQ: return {c.q_dim(), c.dim};
    case AttnK: case AttnV: return {c.kv_dim(), c.dim};
    case AttnQBias: return {1, c.q_dim()};
    case AttnKBias: case AttnVBias: return {1, c.kv_dim()};
    case AttnQNorm: case AttnKNorm: return {1, c.head_dim};
    case AttnOutput: return {c.dim, c.q_dim()};
    case FfnGate: case FfnUp: return {c.ffn_dim, c.dim};
    case FfnDown: return {c.dim, c.ffn_dim};
    case FfnRouter: return {moe.n_experts, c.dim};
    case FfnGateExperts: case FfnUpExperts: return {moe.expert_ffn_dim, c.dim, moe.n_experts};
    case FfnDownExperts: return {c.dim, moe.expert_ffn_dim, moe.n_experts};
    case FfnRouterBias: return {1, moe.n_experts};
    case FfnGateExpertsBias: case FfnUpExpertsBias: return {1, moe.expert_ffn_dim, moe.n_experts};
    case FfnDownExpertsBias: return {1, c.dim, moe.n_experts};
  }
  return {};
}

LayerRole ffn_norm_role(const LayerSpec& layer) {
  return layer.ffn_norm_named_post_attention ? FfnNormNamedPostAttention : FfnNorm;
}

std::string role_tensor_name(int64_t layer, LayerRole role) {
  const RoleInfo& r = role_info(role);
  return fmt::format("blk.{}.{}.{}", layer, r.gguf_part, r.gguf_suffix);
}

}  // namespace nt
