#include "runtime/tensor_shard.h"

#include "core/error.h"

namespace nt {

ModelSpec shard_config(const ModelSpec& full, const TensorShard& s) {
  if (full.n_kv_heads <= 0 || full.n_heads % full.n_kv_heads != 0) {
    fail("tensor split: {} heads do not share {} KV heads evenly", full.n_heads, full.n_kv_heads);
  }
  if (s.kv_heads <= 0 || s.first_kv_head < 0 || s.first_kv_head + s.kv_heads > full.n_kv_heads) {
    fail("tensor split: KV heads [{}, {}) are empty or outside the model's {}", s.first_kv_head,
         s.first_kv_head + s.kv_heads, full.n_kv_heads);
  }
  if (s.ffn_columns <= 0 || s.first_ffn_column < 0 || s.first_ffn_column + s.ffn_columns > full.ffn_dim) {
    fail("tensor split: FFN columns [{}, {}) are empty or outside the model's {}", s.first_ffn_column,
         s.first_ffn_column + s.ffn_columns, full.ffn_dim);
  }
  ModelSpec c = full;
  c.n_heads = s.kv_heads * (full.n_heads / full.n_kv_heads);
  c.n_kv_heads = s.kv_heads;
  c.ffn_dim = s.ffn_columns;
  return c;
}

MatrixShard layer_matrix_shard(const ModelSpec& full, const TensorShard& s, LayerMatrix m) {
  const int64_t group = full.n_heads / full.n_kv_heads * full.head_dim;  // query rows of one KV head
  const MatrixShard q{ShardAxis::Rows, s.first_kv_head * group, s.kv_heads * group};
  const MatrixShard kv{ShardAxis::Rows, s.first_kv_head * full.head_dim, s.kv_heads * full.head_dim};
  const MatrixShard ffn{ShardAxis::Rows, s.first_ffn_column, s.ffn_columns};
  switch (m) {
    case LayerMatrix::Q: return q;
    case LayerMatrix::K:
    case LayerMatrix::V: return kv;
    case LayerMatrix::Output: return {ShardAxis::Columns, q.first, q.count};
    case LayerMatrix::Gate:
    case LayerMatrix::Up: return ffn;
    case LayerMatrix::Down: return {ShardAxis::Columns, ffn.first, ffn.count};
  }
  return q;
}

}  // namespace nt
