// A tokenizer vocabulary: the raw `tokenizer.*` GGUF metadata (VocabSpec) and its
// validated, indexed form (Vocabulary) that the encoders look tokens up in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nt {

struct GgufHeader;

// GGUF's `tokenizer.ggml.token_type` values.
enum class TokenKind : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// Which algorithm the vocabulary is for (`tokenizer.ggml.model`).
enum class VocabModel {
  SentencePiece,  // "llama": score-ordered merges, "▁" for spaces, <0xXX> byte fallback
  ByteLevelBpe,   // "gpt2": ranked merges over GPT-2's byte alphabet, regex pre-splitting
};

constexpr int32_t kNoToken = -1;

// The tokenizer metadata exactly as a GGUF file holds it (absent keys stay empty),
// so it can be read from a file or built in memory and written into one.
struct VocabSpec {
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;
  std::vector<float> scores;         // empty when absent
  std::vector<int32_t> token_types;  // empty when absent (all Normal)
  std::vector<std::string> merges;   // "left right", best first; empty when absent
  std::optional<int32_t> bos_id, eos_id, eot_id, eom_id, pad_id, unk_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;  // tokenizer.chat_template ("" when absent)

  bool operator==(const VocabSpec&) const = default;
};

// Reads every `tokenizer.*` key; `source` names the file in errors.
VocabSpec read_vocab_spec(const GgufHeader& header, std::string_view source);

class Vocabulary {
 public:
  // Validates the spec (array lengths, ids in range, merges made of known tokens)
  // and fills in llama.cpp's defaults for absent flags and ids.
  explicit Vocabulary(VocabSpec spec, std::string_view source = "vocabulary");

  VocabModel model() const { return model_; }
  const std::string& model_name() const { return spec_.model; }
  const std::string& pre() const { return spec_.pre; }
  const std::string& chat_template() const { return spec_.chat_template; }
  int32_t size() const { return int32_t(spec_.tokens.size()); }

  const std::string& text(int32_t id) const { return spec_.tokens[size_t(id)]; }
  float score(int32_t id) const { return spec_.scores.empty() ? 0.0f : spec_.scores[size_t(id)]; }
  TokenKind kind(int32_t id) const;
  bool is_control(int32_t id) const { return kind(id) == TokenKind::Control; }
  bool contains(int32_t id) const { return id >= 0 && id < size(); }

  // Exact lookup of a token's stored text; kNoToken when absent.
  int32_t find(std::string_view text) const;

  // BPE merges: the rank of merging `left` with `right` (lower merges first) and the
  // resulting token, or nullopt when the pair is not a merge.
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  std::optional<Merge> merge(int32_t left, int32_t right) const;

  // Special ids resolved with defaults; kNoToken when the vocabulary has none. Without
  // tokenizer.ggml.eot_token_id, EOT is the first token found of "<|eot_id|>", "<|im_end|>",
  // "<|end|>", "<end_of_turn>", "<|endoftext|>", ... (the end-of-turn markers llama.cpp knows).
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t eom() const { return eom_; }
  int32_t pad() const { return pad_; }
  int32_t unk() const { return unk_; }
  // Every token that ends generation, sorted: EOS, EOT, EOM, and the tokens spelled as the
  // end-of-text, end-of-turn and fill-in-the-middle stop markers llama.cpp recognises
  // ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|fim_pad|>", "<|file_sep|>", ...).
  const std::vector<int32_t>& eog() const { return eog_; }
  bool is_eog(int32_t id) const;
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }

  // Byte-fallback token for a raw byte (SentencePiece "<0xXX>"); kNoToken when absent.
  int32_t byte_token(uint8_t byte) const { return byte_tokens_[byte]; }

  const VocabSpec& spec() const { return spec_; }

 private:
  struct TransparentHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  void index_tokens(std::string_view source);
  void index_merges(std::string_view source);
  void resolve_specials(std::string_view source);
  void collect_end_of_generation();

  VocabSpec spec_;
  VocabModel model_ = VocabModel::SentencePiece;
  std::unordered_map<std::string, int32_t, TransparentHash, std::equal_to<>> ids_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_tokens_[256];
  int32_t bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken, pad_ = kNoToken, unk_ = kNoToken;
  std::vector<int32_t> eog_;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
};

}  // namespace nt
