// One GPU's shard of every layer in the tensor split (Megatron style): a range
// of KV-head groups (a KV head and the query heads that share it) and a range
// of FFN hidden columns. Q/K/V and ffn_gate/up are cut by rows, attn_output
// and ffn_down by columns, so attention and the FFN run on the shard alone and
// only the two column-cut products need adding across GPUs. A shard is then a
// Llama layer of fewer heads and a narrower FFN: shard_config says which.
#pragma once

#include <cstdint>

#include "model/arch/model_spec.h"
#include "quant/matrix_shard.h"

namespace nt {

struct TensorShard {
  int64_t first_kv_head = 0, kv_heads = 0;
  int64_t first_ffn_column = 0, ffn_columns = 0;
};

// The matrices of a layer, as a shard cuts them.
enum class LayerMatrix { Q, K, V, Output, Gate, Up, Down };

// The model a shard computes: its heads and FFN width, everything else as
// `full`. Throws nt::Error when the shard leaves the model's heads or columns.
ModelSpec shard_config(const ModelSpec& full, const TensorShard& shard);

// The rows or columns of matrix `m` (in the file's [out][in] layout) that the shard holds.
MatrixShard layer_matrix_shard(const ModelSpec& full, const TensorShard& shard, LayerMatrix m);

}  // namespace nt
