// Writes a VocabSpec as the `tokenizer.*` GGUF metadata it was read from
// (the inverse of read_vocab_spec).
#pragma once

#include "gguf/gguf_writer.h"
#include "tokenizer/vocab.h"

namespace nt {

void add_vocab_metadata(GgufWriter& writer, const VocabSpec& spec);

}  // namespace nt
