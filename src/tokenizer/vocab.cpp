#include "tokenizer/vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "gguf/gguf_file.h"

namespace nt {
namespace {

constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";

// Pre-tokenizers whose reference implementations add BOS unless told otherwise.
bool pre_adds_bos_by_default(std::string_view pre) {
  return pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "dbrx" || pre == "smaug-bpe";
}

// "<｜end▁of▁sentence｜>" (DeepSeek), spelled in UTF-8.
constexpr std::string_view kDeepSeekEnd = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";

// End-of-turn markers, tried in this order for EOT when the file names none.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",      "<|endoftext|>", "<|end_of_text|>",
    "<EOT>",      "_<EOT>",     "[EOT]",   kDeepSeekEnd, "<end_of_utterance>",
};

// Tokens that end generation wherever they appear (llama.cpp's list): ends of turns and
// texts, and the fill-in-the-middle padding, repository and file-separator markers.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",  "<|im_end|>",   "<|end|>",       "<|return|>",      "<|call|>",         "<|flush|>",
    "<|calls|>",   "<end_of_turn>", "<|endoftext|>", "</s>",            "<|eom_id|>",       "<EOT>",
    "_<EOT>",      "[EOT]",        "[EOS]",         "<|end_of_text|>", "<end_of_utterance>", "<eos>",
    "<turn|>",     "<|tool_response>", kDeepSeekEnd, "[e~[",
    "<|fim_pad|>", "<fim-pad>",    "<fim_pad>",     "<PAD>",           "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",  "<REPO>",          "<reponame>",       "<|file_sep|>",
};

std::string what(std::string_view source, std::string_view key) {
  return fmt::format("{}: metadata '{}'", source, key);
}

const std::vector<GgufValue>* find_array(const GgufHeader& h, std::string_view key, std::string_view source) {
  const GgufValue* v = h.find(key);
  return v ? &v->as_array(what(source, key)) : nullptr;
}

std::optional<int32_t> find_id(const GgufHeader& h, std::string_view key, std::string_view source) {
  const GgufValue* v = h.find(key);
  if (!v) return std::nullopt;
  int64_t id = v->as_int(what(source, key));
  // Some converters write -1 (as u32 0xFFFFFFFF or i32 -1) for "no such token".
  if (id < 0 || id == 0xFFFFFFFFll) return std::nullopt;
  if (id > INT32_MAX) fail("{}: token id {} is out of range", what(source, key), id);
  return int32_t(id);
}

std::optional<bool> find_flag(const GgufHeader& h, std::string_view key, std::string_view source) {
  const GgufValue* v = h.find(key);
  if (!v) return std::nullopt;
  return v->as_bool(what(source, key));
}

}  // namespace

VocabSpec read_vocab_spec(const GgufHeader& h, std::string_view source) {
  VocabSpec spec;
  const GgufValue* model = h.find("tokenizer.ggml.model");
  if (!model) fail("{}: missing metadata key 'tokenizer.ggml.model' (the file has no tokenizer)", source);
  spec.model = model->as_string(what(source, "tokenizer.ggml.model"));
  if (const GgufValue* pre = h.find("tokenizer.ggml.pre")) {
    spec.pre = pre->as_string(what(source, "tokenizer.ggml.pre"));
  }

  const auto* tokens = find_array(h, kTokensKey, source);
  if (!tokens) fail("{}: missing metadata key '{}'", source, kTokensKey);
  spec.tokens.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    spec.tokens.push_back((*tokens)[i].as_string(fmt::format("{}[{}]", what(source, kTokensKey), i)));
  }
  if (const auto* scores = find_array(h, kScoresKey, source)) {
    spec.scores.reserve(scores->size());
    for (size_t i = 0; i < scores->size(); ++i) {
      spec.scores.push_back(float((*scores)[i].as_float(fmt::format("{}[{}]", what(source, kScoresKey), i))));
    }
  }
  if (const auto* types = find_array(h, kTypesKey, source)) {
    spec.token_types.reserve(types->size());
    for (size_t i = 0; i < types->size(); ++i) {
      int64_t t = (*types)[i].as_int(fmt::format("{}[{}]", what(source, kTypesKey), i));
      spec.token_types.push_back(int32_t(std::clamp<int64_t>(t, INT32_MIN, INT32_MAX)));
    }
  }
  if (const auto* merges = find_array(h, kMergesKey, source)) {
    spec.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      spec.merges.push_back((*merges)[i].as_string(fmt::format("{}[{}]", what(source, kMergesKey), i)));
    }
  }
  spec.bos_id = find_id(h, "tokenizer.ggml.bos_token_id", source);
  spec.eos_id = find_id(h, "tokenizer.ggml.eos_token_id", source);
  spec.eot_id = find_id(h, "tokenizer.ggml.eot_token_id", source);
  spec.eom_id = find_id(h, "tokenizer.ggml.eom_token_id", source);
  spec.pad_id = find_id(h, "tokenizer.ggml.padding_token_id", source);
  spec.unk_id = find_id(h, "tokenizer.ggml.unknown_token_id", source);
  spec.add_bos = find_flag(h, "tokenizer.ggml.add_bos_token", source);
  spec.add_eos = find_flag(h, "tokenizer.ggml.add_eos_token", source);
  spec.add_space_prefix = find_flag(h, "tokenizer.ggml.add_space_prefix", source);
  if (const GgufValue* t = h.find("tokenizer.chat_template")) {
    spec.chat_template = t->as_string(what(source, "tokenizer.chat_template"));
  }
  return spec;
}

Vocabulary::Vocabulary(VocabSpec spec, std::string_view source) : spec_(std::move(spec)) {
  if (spec_.model == "llama") {
    model_ = VocabModel::SentencePiece;
  } else if (spec_.model == "gpt2") {
    model_ = VocabModel::ByteLevelBpe;
  } else {
    fail(
        "{}: tokenizer.ggml.model '{}' is not supported (supported: 'llama' for SentencePiece, 'gpt2' for "
        "byte-level BPE)",
        source, spec_.model);
  }
  index_tokens(source);
  if (model_ == VocabModel::ByteLevelBpe) index_merges(source);
  resolve_specials(source);
  collect_end_of_generation();
}

TokenKind Vocabulary::kind(int32_t id) const {
  if (spec_.token_types.empty()) return TokenKind::Normal;
  return TokenKind(spec_.token_types[size_t(id)]);
}

int32_t Vocabulary::find(std::string_view text) const {
  auto it = ids_.find(text);
  return it == ids_.end() ? kNoToken : it->second;
}

std::optional<Vocabulary::Merge> Vocabulary::merge(int32_t left, int32_t right) const {
  auto it = merges_.find((uint64_t(uint32_t(left)) << 32) | uint32_t(right));
  if (it == merges_.end()) return std::nullopt;
  return it->second;
}

void Vocabulary::index_tokens(std::string_view source) {
  const size_t n = spec_.tokens.size();
  if (n == 0) fail("{}: metadata '{}' is empty", source, kTokensKey);
  if (n > size_t(INT32_MAX)) fail("{}: metadata '{}' has {} entries, too many", source, kTokensKey, n);
  if (!spec_.scores.empty() && spec_.scores.size() != n) {
    fail("{}: metadata '{}' has {} entries but '{}' has {}", source, kScoresKey, spec_.scores.size(), kTokensKey, n);
  }
  if (!spec_.token_types.empty() && spec_.token_types.size() != n) {
    fail("{}: metadata '{}' has {} entries but '{}' has {}", source, kTypesKey, spec_.token_types.size(), kTokensKey,
         n);
  }
  for (size_t i = 0; i < spec_.token_types.size(); ++i) {
    int32_t t = spec_.token_types[i];
    if (t < 0 || t > int32_t(TokenKind::Byte)) {
      fail("{}: metadata '{}'[{}] = {} is not a token type (0..6)", source, kTypesKey, i, t);
    }
  }
  ids_.reserve(n);
  // A repeated token string resolves to its last id, as in the reference tokenizers.
  for (size_t i = 0; i < n; ++i) ids_.insert_or_assign(spec_.tokens[i], int32_t(i));

  std::fill(std::begin(byte_tokens_), std::end(byte_tokens_), kNoToken);
  if (model_ == VocabModel::SentencePiece) {
    for (int b = 0; b < 256; ++b) byte_tokens_[b] = find(fmt::format("<0x{:02X}>", b));
  }
}

void Vocabulary::index_merges(std::string_view source) {
  merges_.reserve(spec_.merges.size());
  for (size_t rank = 0; rank < spec_.merges.size(); ++rank) {
    const std::string& m = spec_.merges[rank];
    // Byte-level tokens never hold a raw space, so normally only one split is possible;
    // try every space so a token that does contain one still parses.
    int32_t left = kNoToken, right = kNoToken;
    for (size_t sp = m.find(' '); sp != std::string::npos && left == kNoToken; sp = m.find(' ', sp + 1)) {
      int32_t l = find(std::string_view(m).substr(0, sp)), r = find(std::string_view(m).substr(sp + 1));
      if (l != kNoToken && r != kNoToken) left = l, right = r;
    }
    if (left == kNoToken) {
      fail("{}: metadata '{}'[{}] = '{}' is not two tokens of '{}' separated by a space", source, kMergesKey, rank, m,
           kTokensKey);
    }
    int32_t result = find(spec_.tokens[size_t(left)] + spec_.tokens[size_t(right)]);
    if (result == kNoToken) {
      fail("{}: metadata '{}'[{}] = '{}' merges into '{}', which is not in '{}'", source, kMergesKey, rank, m,
           spec_.tokens[size_t(left)] + spec_.tokens[size_t(right)], kTokensKey);
    }
    merges_.try_emplace((uint64_t(uint32_t(left)) << 32) | uint32_t(right), Merge{int32_t(rank), result});
  }
}

void Vocabulary::resolve_specials(std::string_view source) {
  const bool spm = model_ == VocabModel::SentencePiece;
  auto resolve = [&](const std::optional<int32_t>& id, std::string_view key, int32_t fallback) {
    if (!id) return contains(fallback) ? fallback : kNoToken;
    if (!contains(*id)) fail("{}: metadata '{}' = {} is outside the vocabulary ({} tokens)", source, key, *id, size());
    return *id;
  };
  // SentencePiece llama vocabularies put <unk>, <s>, </s> at 0, 1, 2 when the ids are not written.
  unk_ = resolve(spec_.unk_id, "tokenizer.ggml.unknown_token_id", spm ? 0 : kNoToken);
  bos_ = resolve(spec_.bos_id, "tokenizer.ggml.bos_token_id", spm ? 1 : kNoToken);
  eos_ = resolve(spec_.eos_id, "tokenizer.ggml.eos_token_id", spm ? 2 : kNoToken);
  eot_ = resolve(spec_.eot_id, "tokenizer.ggml.eot_token_id", kNoToken);
  for (size_t i = 0; !spec_.eot_id && eot_ == kNoToken && i < std::size(kEndOfTurnTexts); ++i) {
    eot_ = find(kEndOfTurnTexts[i]);
  }
  eom_ = resolve(spec_.eom_id, "tokenizer.ggml.eom_token_id", kNoToken);
  pad_ = resolve(spec_.pad_id, "tokenizer.ggml.padding_token_id", kNoToken);

  // Default flags give way when the token they need is missing; explicit ones must be honoured.
  add_bos_ = spec_.add_bos.value_or((spm || pre_adds_bos_by_default(spec_.pre)) && bos_ != kNoToken);
  add_eos_ = spec_.add_eos.value_or(false);
  add_space_prefix_ = spec_.add_space_prefix.value_or(spm);
  if (add_bos_ && bos_ == kNoToken) {
    fail(
        "{}: metadata 'tokenizer.ggml.add_bos_token' asks for a BOS token but 'tokenizer.ggml.bos_token_id' is "
        "missing",
        source);
  }
  if (add_eos_ && eos_ == kNoToken) {
    fail(
        "{}: metadata 'tokenizer.ggml.add_eos_token' asks for an EOS token but 'tokenizer.ggml.eos_token_id' is "
        "missing",
        source);
  }
}

bool Vocabulary::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

void Vocabulary::collect_end_of_generation() {
  eog_.clear();
  for (std::string_view text : kEndOfGenerationTexts) {
    if (int32_t id = find(text); id != kNoToken) eog_.push_back(id);
  }
  for (int32_t id : {eos_, eot_, eom_}) {
    if (id != kNoToken) eog_.push_back(id);
  }
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
  // Two exceptions llama.cpp makes: "<|end|>" only closes a message where "<|return|>" and
  // "<|call|>" end the turn (gpt-oss, Solar Open), and "</s>" is plain text beside Gemma 4's
  // and PLaMo's own end markers.
  auto has = [&](std::string_view text) { return is_eog(find(text)); };
  auto drop = [&](std::string_view text) { std::erase(eog_, find(text)); };
  const bool calls = has("<|call|>") || has("<|calls|>");
  if ((has("<|return|>") && calls) || (calls && has("<|flush|>"))) drop("<|end|>");
  if (has("<|tool_response>") || has("<|plamo:eos|>")) drop("</s>");
}

}  // namespace nt
