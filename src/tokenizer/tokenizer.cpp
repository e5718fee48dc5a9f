#include "tokenizer/tokenizer.h"

#include <charconv>
#include <unordered_map>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/spm_encoder.h"

namespace nt {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space

std::string escape_spaces(std::string_view text, bool add_prefix) {
  std::string out;
  out.reserve(text.size() + 8);
  if (add_prefix) out += kSpaceMarker;
  for (char c : text) {
    if (c == ' ') {
      out += kSpaceMarker;
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_spaces(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t pos = 0; pos < piece.size();) {
    if (piece.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
      out += ' ';
      pos += kSpaceMarker.size();
    } else {
      out += piece[pos++];
    }
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(VocabSpec spec, std::string_view source) : vocab_(std::move(spec), source), specials_(vocab_) {
  if (vocab_.model() == VocabModel::ByteLevelBpe) {
    pre_ = std::make_unique<PreTokenizer>(vocab_.pre());
    if (!pre_->warning().empty()) warnings_.push_back(fmt::format("{}: {}", source, pre_->warning()));
    bpe_ = std::make_unique<ByteLevelBpeEncoder>(vocab_, pre_->ignore_merges());
  }
}

// The BPE encoder points at vocab_, so a move rebuilds it against the new address.
Tokenizer::Tokenizer(Tokenizer&& other) noexcept
    : vocab_(std::move(other.vocab_)),
      specials_(vocab_),
      pre_(std::move(other.pre_)),
      warnings_(std::move(other.warnings_)) {
  if (pre_) bpe_ = std::make_unique<ByteLevelBpeEncoder>(vocab_, pre_->ignore_merges());
}

Tokenizer Tokenizer::from_gguf(const GgufHeader& header, std::string_view source) {
  return Tokenizer(read_vocab_spec(header, source), source);
}

void Tokenizer::encode_text(std::string_view text, bool at_text_start, std::vector<int32_t>& out) const {
  if (vocab_.model() == VocabModel::SentencePiece) {
    // Like HF's Metaspace(prepend_scheme="first"): only the start of the input gets the
    // dummy-prefix space, not text that follows a special token.
    encode_sentencepiece(vocab_, escape_spaces(text, vocab_.add_space_prefix() && at_text_start), out);
    return;
  }
  std::vector<std::string_view> pieces;
  pre_->split(text, pieces);
  // Natural text repeats words a lot; reuse each distinct piece's ids within this call.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> seen;
  for (std::string_view piece : pieces) {
    auto [it, inserted] = seen.try_emplace(piece);
    if (!inserted) {
      auto [begin, count] = it->second;
      for (size_t i = 0; i < count; ++i) out.push_back(out[begin + i]);
      continue;
    }
    size_t begin = out.size();
    bpe_->encode(piece, out);
    it->second = {begin, out.size() - begin};
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos());
  std::vector<TextFragment> fragments;
  specials_.split(text, parse_special, fragments);
  for (const TextFragment& f : fragments) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
    } else {
      encode_text(f.text, f.text.data() == text.data(), out);
    }
  }
  if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos());
  return out;
}

bool Tokenizer::is_special(int32_t id) const {
  TokenKind kind = vocab_.kind(id);
  return kind == TokenKind::Control || kind == TokenKind::Unknown;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (!vocab_.contains(id)) fail("token id {} is outside the vocabulary ({} tokens)", id, vocab_.size());
  const std::string& text = vocab_.text(id);
  TokenKind kind = vocab_.kind(id);
  if (kind == TokenKind::Control || kind == TokenKind::Unknown) return text;
  if (vocab_.model() == VocabModel::SentencePiece) {
    unsigned byte = 0;
    if (kind == TokenKind::Byte && text.size() == 6 && text.starts_with("<0x") && text[5] == '>' &&
        std::from_chars(text.data() + 3, text.data() + 5, byte, 16).ptr == text.data() + 5) {
      return std::string(1, char(byte));
    }
    return unescape_spaces(text);
  }
  // Added tokens may be stored verbatim rather than in the byte alphabet; keep those as is.
  std::optional<std::string> bytes = byte_level::decode(text);
  return bytes ? *bytes : text;
}

std::string Tokenizer::piece_bytes(int32_t id, bool first_piece) const {
  std::string bytes = token_bytes(id);
  if (first_piece && vocab_.model() == VocabModel::SentencePiece && vocab_.add_space_prefix() && !bytes.empty() &&
      bytes[0] == ' ' && vocab_.kind(id) != TokenKind::Byte) {
    bytes.erase(0, 1);
  }
  return bytes;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (skip_special && vocab_.contains(id) && is_special(id)) continue;
    out += piece_bytes(id, first);
    first = false;
  }
  return out;
}

}  // namespace nt
