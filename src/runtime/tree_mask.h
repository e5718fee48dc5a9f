// A batch chunk's token trees as bit masks, the form a GPU attention kernel
// reads (AttentionParams::tree_mask): each row of the chunk gets `words`
// 32-bit words, and for a row of a tree run bit j is set when the run's
// entry j is one of its ancestors or itself. Rows of other runs stay zero.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/batch.h"

namespace nt {

// Words a row of entries [at, at + n) takes: enough for the longest tree run
// among them; 0 when none is a tree.
int64_t chunk_tree_words(std::span<const SequenceRun> runs, int64_t at, int64_t n);

// The masks of entries [at, at + n): n * words words at `masks`.
void write_tree_masks(const Batch& batch, std::span<const SequenceRun> runs, int64_t at, int64_t n, int64_t words,
                      uint32_t* masks);

}  // namespace nt
