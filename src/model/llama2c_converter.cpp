#include "model/llama2c_converter.h"

#include <fmt/core.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/output_file.h"
#include "gguf/gguf_writer.h"
#include "model/tensor_names.h"

namespace nt {
namespace {

// SentencePiece token types as GGUF stores them.
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6 };

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open '{}'", path);
  return {std::istreambuf_iterator<char>(f), {}};
}

struct Vocab {
  std::vector<GgufValue> tokens, scores, types;
};

// llama2.c stores pieces with "▁" turned back into spaces and BOS/EOS wrapped in
// newlines; undo both so the vocabulary is plain SentencePiece again.
Vocab read_llama2c_tokenizer(const std::string& path, int32_t vocab_size) {
  const auto bytes = read_file(path);
  size_t at = 4;  // skip max_token_length
  if (bytes.size() < at) fail("{}: truncated tokenizer header", path);
  Vocab v;
  for (int32_t i = 0; i < vocab_size; ++i) {
    float score;
    int32_t len;
    if (at + 8 > bytes.size()) fail("{}: truncated at byte {} reading token {} of {}", path, at, i, vocab_size);
    std::memcpy(&score, bytes.data() + at, 4);
    std::memcpy(&len, bytes.data() + at + 4, 4);
    at += 8;
    if (len < 0 || at + size_t(len) > bytes.size()) fail("{}: token {} at byte {} has bad length {}", path, i, at - 4, len);
    std::string piece(bytes.data() + at, size_t(len));
    at += size_t(len);

    int32_t type = kNormal;
    if (i == 0) {
      type = kUnknown;
    } else if (i == 1 || i == 2) {
      type = kControl;
      piece = i == 1 ? "<s>" : "</s>";
    } else if (piece.size() == 6 && piece.starts_with("<0x") && piece.back() == '>') {
      type = kByte;
    } else {
      std::string escaped;
      for (char c : piece) escaped += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
      piece = escaped;
    }
    v.tokens.push_back(GgufValue::of_string(piece));
    v.scores.push_back(GgufValue::of_f32(score));
    v.types.push_back(GgufValue::of_i32(type));
  }
  if (at != bytes.size()) fail("{}: {} trailing bytes after {} tokens (vocab size mismatch?)", path, bytes.size() - at, vocab_size);
  return v;
}

}  // namespace

void convert_llama2c(const std::string& model_path, const std::string& tokenizer_path, const std::string& out_path) {
  refuse_output_over_input(model_path, "the checkpoint", out_path, "the output");
  refuse_output_over_input(tokenizer_path, "the tokenizer", out_path, "the output");
  const auto file = read_file(model_path);
  Llama2cHeader hp;
  if (file.size() < sizeof(hp)) fail("{}: too small for a llama2.c header ({} bytes)", model_path, file.size());
  std::memcpy(&hp, file.data(), sizeof(hp));
  const bool shared_classifier = hp.vocab_size > 0;
  const int64_t vocab = std::abs(int64_t(hp.vocab_size));
  if (hp.dim <= 0 || hp.hidden_dim <= 0 || hp.n_layers <= 0 || hp.n_heads <= 0 || hp.n_kv_heads <= 0 || hp.seq_len <= 0 ||
      hp.dim % hp.n_heads != 0 || hp.n_heads % hp.n_kv_heads != 0) {
    fail("{}: implausible llama2.c header (dim {}, hidden {}, layers {}, heads {}/{}, seq {})", model_path, hp.dim,
         hp.hidden_dim, hp.n_layers, hp.n_heads, hp.n_kv_heads, hp.seq_len);
  }
  const int64_t dim = hp.dim, hidden = hp.hidden_dim, L = hp.n_layers;
  const int64_t head_dim = dim / hp.n_heads, kv_dim = head_dim * hp.n_kv_heads;

  // Tensors in llama2.c file order: (name, shape in GGUF order, layers stacked).
  struct Part {
    std::string name;
    std::vector<int64_t> shape;
    bool per_layer;
  };
  std::vector<Part> parts = {
      {"token_embd", {dim, vocab}, false}, {"attn_norm", {dim}, true},   {"attn_q", {dim, dim}, true},
      {"attn_k", {dim, kv_dim}, true},     {"attn_v", {dim, kv_dim}, true}, {"attn_output", {dim, dim}, true},
      {"ffn_norm", {dim}, true},           {"ffn_gate", {dim, hidden}, true}, {"ffn_down", {hidden, dim}, true},
      {"ffn_up", {dim, hidden}, true},     {"output_norm", {dim}, false},
  };
  auto elements = [](const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (auto d : s) n *= d;
    return n;
  };
  const int64_t freq_cis = int64_t(hp.seq_len) * head_dim;  // real and imag halves, unused
  int64_t expected = 0;
  for (const auto& p : parts) expected += elements(p.shape) * (p.per_layer ? L : 1);
  expected += freq_cis + (shared_classifier ? 0 : vocab * dim);
  const int64_t have = int64_t(file.size() - sizeof(hp)) / 4;
  if (have != expected) {
    fail("{}: holds {} floats after the header but the header implies {} (wrong file or truncated)", model_path, have, expected);
  }

  auto vocab_entries = read_llama2c_tokenizer(tokenizer_path, int32_t(vocab));

  GgufWriter w(out_path);
  w.add_metadata("general.architecture", GgufValue::of_string("llama"));
  w.add_metadata("general.name", GgufValue::of_string(std::filesystem::path(model_path).stem().string()));
  w.add_metadata("general.file_type", GgufValue::of_u32(0));  // all F32
  w.add_metadata("llama.context_length", GgufValue::of_u32(uint32_t(hp.seq_len)));
  w.add_metadata("llama.embedding_length", GgufValue::of_u32(uint32_t(dim)));
  w.add_metadata("llama.block_count", GgufValue::of_u32(uint32_t(L)));
  w.add_metadata("llama.feed_forward_length", GgufValue::of_u32(uint32_t(hidden)));
  w.add_metadata("llama.attention.head_count", GgufValue::of_u32(uint32_t(hp.n_heads)));
  w.add_metadata("llama.attention.head_count_kv", GgufValue::of_u32(uint32_t(hp.n_kv_heads)));
  w.add_metadata("llama.attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-5f));
  w.add_metadata("llama.rope.dimension_count", GgufValue::of_u32(uint32_t(head_dim)));
  w.add_metadata("llama.rope.freq_base", GgufValue::of_f32(10000.0f));
  w.add_metadata("tokenizer.ggml.model", GgufValue::of_string("llama"));
  w.add_metadata("tokenizer.ggml.tokens", GgufValue::of_array(GgufValueType::STRING, std::move(vocab_entries.tokens)));
  w.add_metadata("tokenizer.ggml.scores", GgufValue::of_array(GgufValueType::F32, std::move(vocab_entries.scores)));
  w.add_metadata("tokenizer.ggml.token_type", GgufValue::of_array(GgufValueType::I32, std::move(vocab_entries.types)));
  w.add_metadata("tokenizer.ggml.unknown_token_id", GgufValue::of_u32(0));
  w.add_metadata("tokenizer.ggml.bos_token_id", GgufValue::of_u32(1));
  w.add_metadata("tokenizer.ggml.eos_token_id", GgufValue::of_u32(2));
  w.add_metadata("tokenizer.ggml.add_bos_token", GgufValue::of_bool(true));
  w.add_metadata("tokenizer.ggml.add_eos_token", GgufValue::of_bool(false));

  // Directory in GGUF's conventional order: embeddings, then each layer, then the head.
  struct Slice {
    size_t part;
    int64_t layer;
  };
  std::vector<Slice> order;
  order.push_back({0, -1});
  for (int64_t l = 0; l < L; ++l) {
    for (size_t p = 1; p + 1 < parts.size(); ++p) order.push_back({p, l});
  }
  order.push_back({parts.size() - 1, -1});
  for (const auto& s : order) {
    const auto& p = parts[s.part];
    w.add_tensor(s.layer < 0 ? p.name + ".weight" : layer_tensor_name(s.layer, p.name), TensorType::F32, p.shape);
  }
  const int64_t classifier_offset = expected - (shared_classifier ? 0 : vocab * dim);
  if (!shared_classifier) w.add_tensor("output.weight", TensorType::F32, {dim, vocab});

  // Float offsets (after the header) of each part's stack in the llama2.c file.
  std::vector<int64_t> part_offset(parts.size());
  int64_t offset = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    part_offset[p] = offset;
    offset += elements(parts[p].shape) * (parts[p].per_layer ? L : 1);
  }
  const auto* floats = reinterpret_cast<const uint8_t*>(file.data() + sizeof(hp));
  for (const auto& s : order) {
    const int64_t n = elements(parts[s.part].shape);
    const int64_t start = part_offset[s.part] + (s.layer < 0 ? 0 : s.layer * n);
    w.write_tensor_data({floats + start * 4, size_t(n) * 4});
  }
  if (!shared_classifier) w.write_tensor_data({floats + classifier_offset * 4, size_t(vocab * dim) * 4});
  w.finish();
}

}  // namespace nt
