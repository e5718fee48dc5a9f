// GGUF tensor naming for the Llama family ("blk.{i}.attn_q.weight", ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nt {

// "blk.12.ffn_down.weight" -> 12; nullopt for non-layer tensors.
std::optional<int64_t> layer_of_tensor(std::string_view name);

// Name of a per-layer tensor: layer_tensor_name(3, "attn_q") -> "blk.3.attn_q.weight".
std::string layer_tensor_name(int64_t layer, std::string_view part);

}  // namespace nt
