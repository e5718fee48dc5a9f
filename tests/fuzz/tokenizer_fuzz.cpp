// libFuzzer entry over prompt text: any bytes must encode with the synthetic
// vocabularies test models carry (byte-level BPE in SmolLM2's, Llama 3's and
// Qwen3's layouts; SentencePiece with byte fallback in Gemma 3's), with and
// without special-token parsing, into ids of the vocabulary that decode back to
// the same bytes: byte-level BPE and byte fallback lose nothing, except that
// SentencePiece reads a "\u2581" in the text as the space it stands for.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::vector<const nt::Tokenizer*>& tokenizers() {
  static const nt::Tokenizer smol(nt::make_synthetic_vocab(4096, nt::SyntheticVocabStyle::SmolLM2));
  static const nt::Tokenizer llama3(nt::make_synthetic_vocab(4096, nt::SyntheticVocabStyle::Llama3));
  static const nt::Tokenizer qwen3(nt::make_synthetic_vocab(4096, nt::SyntheticVocabStyle::Qwen3));
  static const nt::Tokenizer gemma3(nt::make_synthetic_vocab(4096, nt::SyntheticVocabStyle::Gemma3));
  static const std::vector<const nt::Tokenizer*> all = {&smol, &llama3, &qwen3, &gemma3};
  return all;
}

// The text a SentencePiece vocabulary decodes back: each "\u2581" as a space.
std::string markers_as_spaces(std::string_view text) {
  constexpr std::string_view kMarker = "\xE2\x96\x81";
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, kMarker.size(), kMarker) == 0) {
      out += ' ';
      pos += kMarker.size();
    } else {
      out += text[pos++];
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string spm_text = markers_as_spaces(text);
  for (const nt::Tokenizer* tokenizer : tokenizers()) {
    const bool spm = tokenizer->vocab().model() == nt::VocabModel::SentencePiece;
    for (const bool parse_special : {false, true}) {
      const std::vector<int32_t> ids = tokenizer->encode(text, false, parse_special);
      for (const int32_t id : ids) {
        if (id < 0 || id >= tokenizer->size()) std::abort();
      }
      if (tokenizer->decode(ids, false) != (spm ? std::string_view(spm_text) : text)) std::abort();
    }
  }
  return 0;
}
