#include "model/llama_weights.h"

#include "core/error.h"
#include "model/tensor_names.h"

namespace nt {
namespace {

class Locator {
 public:
  explicit Locator(const GgufFile& file) : file_(file) {}

  // A matrix of `rows` outputs by `cols` inputs, in any weight format.
  WeightRef matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const auto& t = require(name);
    if (t.shape.size() != 2 || t.shape[0] != cols || t.shape[1] != rows) {
      fail("{}: tensor '{}' has shape {} but the config implies [{}, {}]", file_.path(), name, shape_of(t), cols, rows);
    }
    if (!tensor_type_info(t.type).weight_format) {
      fail("{}: tensor '{}' has type {}, which is not a supported weight format", file_.path(), name, tensor_type_name(t.type));
    }
    return ref(t, rows, cols);
  }

  // A norm or factor vector, which must be F32.
  WeightRef vector(const std::string& name, int64_t n) const {
    const auto& t = require(name);
    if (t.shape.size() != 1 || t.shape[0] != n) {
      fail("{}: tensor '{}' has shape {} but the config implies [{}]", file_.path(), name, shape_of(t), n);
    }
    if (t.type != TensorType::F32) fail("{}: tensor '{}' must be F32, found {}", file_.path(), name, tensor_type_name(t.type));
    return ref(t, 1, n);
  }

  bool has(const std::string& name) const { return file_.header().find_tensor(name) != nullptr; }

 private:
  const GgufTensorInfo& require(const std::string& name) const {
    const auto* t = file_.header().find_tensor(name);
    if (!t) fail("{}: missing tensor '{}'", file_.path(), name);
    return *t;
  }
  static std::string shape_of(const GgufTensorInfo& t) {
    std::string s = "[";
    for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
    return s + "]";
  }
  WeightRef ref(const GgufTensorInfo& t, int64_t rows, int64_t cols) const {
    return WeightRef{&t, file_.data(t), t.type, rows, cols};
  }
  const GgufFile& file_;
};

}  // namespace

uint64_t LlamaLayerWeights::bytes() const {
  return attn_norm.bytes() + wq.bytes() + wk.bytes() + wv.bytes() + wo.bytes() + ffn_norm.bytes() + w_gate.bytes() +
         w_up.bytes() + w_down.bytes();
}

LlamaWeights load_llama_weights(const GgufFile& file, const LlamaConfig& c) {
  const Locator at(file);
  LlamaWeights w;
  w.token_embd = at.matrix("token_embd.weight", c.vocab_size, c.dim);
  w.output_norm = at.vector("output_norm.weight", c.dim);
  w.output = c.tied_embeddings ? w.token_embd : at.matrix("output.weight", c.vocab_size, c.dim);
  if (c.has_rope_freqs_tensor) w.rope_freqs = at.vector("rope_freqs.weight", c.rope_dim / 2);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto name = [&](const char* part) { return layer_tensor_name(l, part); };
    LlamaLayerWeights lw;
    lw.attn_norm = at.vector(name("attn_norm"), c.dim);
    lw.wq = at.matrix(name("attn_q"), c.q_dim(), c.dim);
    lw.wk = at.matrix(name("attn_k"), c.kv_dim(), c.dim);
    lw.wv = at.matrix(name("attn_v"), c.kv_dim(), c.dim);
    lw.wo = at.matrix(name("attn_output"), c.dim, c.q_dim());
    lw.ffn_norm = at.vector(name("ffn_norm"), c.dim);
    lw.w_gate = at.matrix(name("ffn_gate"), c.ffn_dim, c.dim);
    lw.w_up = at.matrix(name("ffn_up"), c.ffn_dim, c.dim);
    lw.w_down = at.matrix(name("ffn_down"), c.dim, c.ffn_dim);
    w.layers.push_back(lw);
  }
  return w;
}

}  // namespace nt
