#include "tokenizer/token_stream_decoder.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace nt {

TokenStreamDecoder::TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

bool TokenStreamDecoder::skipped(int32_t id) const {
  return skip_special_ && tokenizer_->vocab().contains(id) && tokenizer_->is_special(id) &&
         !std::binary_search(kept_.begin(), kept_.end(), id);
}

void TokenStreamDecoder::keep_special(std::span<const int32_t> ids) {
  kept_.assign(ids.begin(), ids.end());
  std::sort(kept_.begin(), kept_.end());
}

void TokenStreamDecoder::continue_after(std::span<const int32_t> context) {
  for (int32_t id : context) {
    if (!skipped(id)) at_start_ = false;
  }
}

std::string TokenStreamDecoder::push(int32_t id) {
  if (skipped(id)) return {};
  pending_ += tokenizer_->piece_bytes(id, at_start_);
  at_start_ = false;
  std::string out;
  size_t consumed = utf8::append_valid(pending_, out, /*keep_truncated_tail=*/true);
  pending_.erase(0, consumed);
  return out;
}

std::string TokenStreamDecoder::flush() {
  std::string out = utf8::to_valid(pending_);
  reset();
  return out;
}

void TokenStreamDecoder::reset() {
  pending_.clear();
  at_start_ = true;
}

}  // namespace nt
