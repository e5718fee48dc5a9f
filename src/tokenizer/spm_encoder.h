// SentencePiece BPE encoding (tokenizer.ggml.model = "llama").
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace nt {

// Encodes text whose spaces are already escaped as "▁". Starting from single
// characters, repeatedly joins the adjacent pair whose concatenation is the
// highest-scoring piece (leftmost on ties); what is left and is not a piece falls
// back to <0xXX> byte tokens, or to <unk> when those are missing.
void encode_sentencepiece(const Vocabulary& vocab, std::string_view text, std::vector<int32_t>& out);

}  // namespace nt
