#include "engine/logit_rows.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace nt {

void for_each_logit_row(ModelRunner& runner, std::span<const int32_t> tokens, int64_t first,
                        const std::function<void(int64_t, std::span<const float>)>& on_row) {
  const int64_t n = int64_t(tokens.size());
  if (first < 0 || first >= n) fail("logits from position {} of a sequence of {} tokens", first, n);
  const size_t vocab = size_t(runner.config().vocab_size);
  constexpr int64_t kChunk = 64;  // prefill-sized batches, 64 rows of logits at a time
  std::vector<float> rows(size_t(kChunk) * vocab);
  if (first > 0) runner.forward(tokens.first(size_t(first)), 0, rows.data(), false);
  for (int64_t pos = first; pos < n; pos += kChunk) {
    const int64_t count = std::min(kChunk, n - pos);
    runner.forward(tokens.subspan(size_t(pos), size_t(count)), pos, rows.data(), true);
    for (int64_t i = 0; i < count; ++i) on_row(pos + i, {rows.data() + size_t(i) * vocab, vocab});
  }
}

}  // namespace nt
