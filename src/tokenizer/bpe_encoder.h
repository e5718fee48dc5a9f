// Byte-level BPE encoding of one pre-tokenized piece (tokenizer.ggml.model = "gpt2").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace nt {

class ByteLevelBpeEncoder {
 public:
  // `ignore_merges`: a piece whose byte-level spelling is itself a token is emitted
  // whole without running the merges (Llama 3's tokenizer does this).
  ByteLevelBpeEncoder(const Vocabulary& vocab, bool ignore_merges);

  // Starting from one token per byte, applies the lowest-ranked merge among adjacent
  // pairs (leftmost on ties) until none applies; appends the resulting ids.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  int32_t byte_token(uint8_t byte) const;

  const Vocabulary* vocab_;
  bool ignore_merges_;
  std::array<int32_t, 256> byte_tokens_;  // the token spelling each single byte; kNoToken if absent
};

}  // namespace nt
