// libFuzzer entry over prompt text: any bytes must encode with the
// byte-level BPE tokenizers (SmolLM2's and Llama 3's layouts, with and
// without special-token parsing) into ids of the vocabulary that decode back
// to the same bytes, since byte-level BPE loses nothing. The vocabularies are
// the synthetic ones test models carry: real merges' behaviour, no file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::vector<const nt::Tokenizer*>& tokenizers() {
  static const nt::Tokenizer smol(nt::make_synthetic_bpe_vocab(4096, nt::SyntheticVocabStyle::SmolLM2));
  static const nt::Tokenizer llama3(nt::make_synthetic_bpe_vocab(4096, nt::SyntheticVocabStyle::Llama3));
  static const std::vector<const nt::Tokenizer*> all = {&smol, &llama3};
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const nt::Tokenizer* tokenizer : tokenizers()) {
    for (const bool parse_special : {false, true}) {
      const std::vector<int32_t> ids = tokenizer->encode(text, false, parse_special);
      for (const int32_t id : ids) {
        if (id < 0 || id >= tokenizer->size()) std::abort();
      }
      if (tokenizer->decode(ids, false) != text) std::abort();
    }
  }
  return 0;
}
