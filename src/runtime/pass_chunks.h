// The chunks a pass runs in, in entry order: at most max_batch entries each
// (what the activations are sized for). A layer-split pipeline also cuts a
// decode step (every run one token) of several sequences into micro-batches,
// so that its stages work on different sequences at once; the pieces then
// take the kernels of their own size, which round differently from the
// whole step's.
#pragma once

#include <cstdint>
#include <vector>

namespace nt {

struct PassChunk {
  int64_t at = 0, n = 0;  // entries [at, at + n)
};

// `micro_batches` near-equal pieces (at most one a sequence) for a decode
// step of up to max_batch entries; otherwise chunks of max_batch.
std::vector<PassChunk> pass_chunks(int64_t entries, bool decode_step, int64_t max_batch, int micro_batches);

}  // namespace nt
