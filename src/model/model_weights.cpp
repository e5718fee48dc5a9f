#include "model/model_weights.h"

#include "core/error.h"

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
    check_weight_format(t);
    return ref(t, rows, cols);
  }

  // `experts` matrices of `rows` x `cols` stacked in one 3-D tensor.
  WeightRef stack(const std::string& name, int64_t experts, int64_t rows, int64_t cols) const {
    const auto& t = require(name);
    if (t.shape.size() != 3 || t.shape[0] != cols || t.shape[1] != rows || t.shape[2] != experts) {
      fail("{}: tensor '{}' has shape {} but the config implies [{}, {}, {}] ({} experts of {} x {})", file_.path(), name,
           shape_of(t), cols, rows, experts, experts, rows, cols);
    }
    check_weight_format(t);
    WeightRef r = ref(t, experts * rows, cols);
    r.experts = experts;
    return r;
  }

  // A norm or factor vector, which must be F32.
  WeightRef vector(const std::string& name, int64_t n) const {
    const auto& t = require(name);
    if (t.shape.size() != 1 || t.shape[0] != n) {
      fail("{}: tensor '{}' has shape {} but the config implies [{}]", file_.path(), name, shape_of(t), n);
    }
    check_f32(t);
    return ref(t, 1, n);
  }

  // One F32 vector of n per expert: GGUF shape [n, experts], a row per expert.
  WeightRef vector_stack(const std::string& name, int64_t experts, int64_t n) const {
    const auto& t = require(name);
    if (t.shape.size() != 2 || t.shape[0] != n || t.shape[1] != experts) {
      fail("{}: tensor '{}' has shape {} but the config implies [{}, {}] ({} experts' vectors of {})", file_.path(), name,
           shape_of(t), n, experts, experts, n);
    }
    check_f32(t);
    WeightRef r = ref(t, experts, n);
    r.experts = experts;
    return r;
  }

  bool has(const std::string& name) const { return file_.header().find_tensor(name) != nullptr; }

 private:
  const GgufTensorInfo& require(const std::string& name) const {
    const auto* t = file_.header().find_tensor(name);
    if (!t) fail("{}: missing tensor '{}'", file_.path(), name);
    return *t;
  }
  void check_weight_format(const GgufTensorInfo& t) const {
    if (!tensor_type_info(t.type).weight_format) {
      fail("{}: tensor '{}' has type {}, which is not a supported weight format", file_.path(), t.name, tensor_type_name(t.type));
    }
  }
  void check_f32(const GgufTensorInfo& t) const {
    if (t.type != TensorType::F32) fail("{}: tensor '{}' must be F32, found {}", file_.path(), t.name, tensor_type_name(t.type));
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

WeightRef WeightRef::expert(int64_t e) const {
  const int64_t expert_rows = rows / experts;
  WeightRef view = *this;
  view.data = data + size_t(e) * size_t(expert_rows) * row_stride();
  view.rows = expert_rows;
  view.experts = 0;
  return view;
}

uint64_t LayerWeights::bytes() const {
  uint64_t total = 0;
  for (const WeightRef& w : by_role) total += w.bytes();
  return total;
}

ModelWeights load_model_weights(const GgufFile& file, const ModelSpec& c) {
  const Locator at(file);
  ModelWeights w;
  w.token_embd = at.matrix("token_embd.weight", c.vocab_size, c.dim);
  w.output_norm = at.vector("output_norm.weight", c.dim);
  w.output = c.tied_embeddings ? w.token_embd : at.matrix("output.weight", c.vocab_size, c.dim);
  if (c.has_rope_freqs_tensor) w.rope_freqs = at.vector("rope_freqs.weight", c.rope_dim / 2);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers.emplace_back();
    for (LayerRole role : layer_roles(c, l)) {
      const RoleShape shape = role_shape(c, role, l);
      const std::string name = role_tensor_name(l, role);
      const bool matrix = role_info(role).kind == RoleKind::Matrix;
      if (shape.experts > 0) {
        lw[role] = matrix ? at.stack(name, shape.experts, shape.rows, shape.cols) : at.vector_stack(name, shape.experts, shape.cols);
      } else if (matrix) {
        lw[role] = at.matrix(name, shape.rows, shape.cols);
      } else {
        lw[role] = at.vector(name, shape.cols);
      }
    }
  }
  return w;
}

}  // namespace nt
