#include "runtime/pass_chunks.h"

#include <algorithm>

#include "core/error.h"

namespace nt {

std::vector<PassChunk> pass_chunks(int64_t entries, bool decode_step, int64_t max_batch, int micro_batches) {
  if (max_batch < 1 || micro_batches < 1) fail("pass chunks of {} entries in {} micro-batches", max_batch, micro_batches);
  std::vector<PassChunk> chunks;
  if (decode_step && entries <= max_batch && micro_batches > 1) {
    const int64_t pieces = std::min<int64_t>(micro_batches, entries);
    for (int64_t i = 0, at = 0; i < pieces; ++i) {
      const int64_t end = entries * (i + 1) / pieces;
      chunks.push_back({at, end - at});
      at = end;
    }
    return chunks;
  }
  for (int64_t at = 0; at < entries; at += max_batch) chunks.push_back({at, std::min(max_batch, entries - at)});
  return chunks;
}

}  // namespace nt
