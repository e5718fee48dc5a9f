// Small random Llama models written as GGUF files for the GPU tests: every
// matrix format configurable, weights scaled so activations stay O(1).
#pragma once

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "gpu_test_util.h"
#include "model/tensor_names.h"
#include "quant/quant.h"

namespace nt {

struct TestModel {
  int64_t dim = 256, ffn = 512, layers = 2, heads = 4, kv_heads = 2, vocab = 320;
  TensorType embd = TensorType::Q8_0, output = TensorType::Q8_0;  // output unused when tied
  TensorType wq = TensorType::Q4_K, wk = TensorType::Q4_K, wv = TensorType::Q6_K, wo = TensorType::Q5_K;
  TensorType gate = TensorType::Q4_K, up = TensorType::Q4_K, down = TensorType::Q6_K;
  bool tied = false;
};

inline std::string write_model(const TestModel& s, const std::string& name) {
  const std::string path = (std::filesystem::path(testing::TempDir()) / name).string();
  GgufWriter w(path);
  w.add_metadata("general.architecture", GgufValue::of_string("llama"));
  w.add_metadata("llama.block_count", GgufValue::of_u32(uint32_t(s.layers)));
  w.add_metadata("llama.embedding_length", GgufValue::of_u32(uint32_t(s.dim)));
  w.add_metadata("llama.feed_forward_length", GgufValue::of_u32(uint32_t(s.ffn)));
  w.add_metadata("llama.attention.head_count", GgufValue::of_u32(uint32_t(s.heads)));
  w.add_metadata("llama.attention.head_count_kv", GgufValue::of_u32(uint32_t(s.kv_heads)));
  w.add_metadata("llama.context_length", GgufValue::of_u32(2048));
  w.add_metadata("llama.attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-5f));
  w.add_metadata("llama.rope.freq_base", GgufValue::of_f32(10000.0f));
  struct Tensor {
    std::string name;
    TensorType type;
    int64_t rows, cols;
    float lo, hi;
  };
  std::vector<Tensor> tensors;
  const float a = 1.7f / std::sqrt(float(s.dim)), f = 1.7f / std::sqrt(float(s.ffn));
  tensors.push_back({"token_embd.weight", s.embd, s.vocab, s.dim, -1.0f, 1.0f});
  tensors.push_back({"output_norm.weight", TensorType::F32, 1, s.dim, 0.8f, 1.2f});
  if (!s.tied) tensors.push_back({"output.weight", s.output, s.vocab, s.dim, -a, a});
  const int64_t hd = s.dim / s.heads;
  for (int64_t l = 0; l < s.layers; ++l) {
    auto n = [&](const char* part) { return layer_tensor_name(l, part); };
    tensors.push_back({n("attn_norm"), TensorType::F32, 1, s.dim, 0.8f, 1.2f});
    tensors.push_back({n("attn_q"), s.wq, s.heads * hd, s.dim, -a, a});
    tensors.push_back({n("attn_k"), s.wk, s.kv_heads * hd, s.dim, -a, a});
    tensors.push_back({n("attn_v"), s.wv, s.kv_heads * hd, s.dim, -a, a});
    tensors.push_back({n("attn_output"), s.wo, s.dim, s.heads * hd, -a, a});
    tensors.push_back({n("ffn_norm"), TensorType::F32, 1, s.dim, 0.8f, 1.2f});
    tensors.push_back({n("ffn_gate"), s.gate, s.ffn, s.dim, -a, a});
    tensors.push_back({n("ffn_up"), s.up, s.ffn, s.dim, -a, a});
    tensors.push_back({n("ffn_down"), s.down, s.dim, s.ffn, -f, f});
  }
  for (const Tensor& t : tensors) {
    w.add_tensor(t.name, t.type, t.rows == 1 ? std::vector<int64_t>{t.cols} : std::vector<int64_t>{t.cols, t.rows});
  }
  for (const Tensor& t : tensors) {
    const auto values = test::random_floats(size_t(t.rows * t.cols), t.lo, t.hi);
    std::vector<uint8_t> bytes(row_bytes(t.type, t.cols) * size_t(t.rows));
    quantize_row(t.type, values.data(), bytes.data(), t.rows * t.cols);
    w.write_tensor_data(bytes);
  }
  w.finish();
  return path;
}

}  // namespace nt
