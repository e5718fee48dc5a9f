// The output side of one generation: takes each sampled token, applies the
// stop rules (token limit, stop tokens, stop strings, a full context) and
// releases complete UTF-8 text, holding back what may begin a stop string.
// The Generator and the batch scheduler both run their sequences through it,
// so one sequence stops and reads the same either way.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/stop_strings.h"
#include "tokenizer/token_stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace nt {

// max_tokens for "until end of text or a full context" (-n -1): past any
// context, and far enough from the int64 limit that sums with it stay exact.
inline constexpr int64_t kNoTokenLimit = int64_t(1) << 40;

struct GenerationOptions {
  int64_t max_tokens = 256;
  std::vector<int32_t> stop_tokens;      // EOS, EOT, end of turn
  std::vector<std::string> stop_strings;
  std::vector<int32_t> kept_special;     // special tokens whose text stays in the output
  // Asked before each token is taken: true stops the generation there (Ctrl-C).
  std::function<bool()> interrupted;
};

enum class StopReason { TokenLimit, StopToken, StopString, ContextFull, Interrupted };
std::string_view stop_reason_name(StopReason reason);

using TextSink = std::function<void(std::string_view)>;

class Completion {
 public:
  // `context`: positions the sequence's cache holds at most. `prompt`: the ids
  // the text continues, so that a reply to a prompt with text keeps its first
  // SentencePiece space (TokenStreamDecoder::continue_after).
  Completion(const Tokenizer& tokenizer, GenerationOptions options, int64_t context, std::span<const int32_t> prompt);

  // Takes the token sampled after `cached` positions of the sequence: false
  // when generation stops here, before the token would be evaluated (a stop
  // token is not taken; a token that ends a stop string, fills max_tokens or
  // finds the context full is). A taken token goes to the sampler's history.
  bool take(int32_t token, int64_t cached, Sampler& sampler, const TextSink& on_text);

  // Releases what was held back, unless a stop string ended the text.
  void finish(const TextSink& on_text);

  StopReason stop() const { return stop_; }
  const std::vector<int32_t>& generated() const { return generated_; }

  // How many generated tokens the text released so far accounts for: those
  // whose text is all out (after a stop string, those whose text begins
  // before it; the tokens of the stop string alone never count), and every
  // one once finish() released the rest. A caller reports per-token data
  // (log-probabilities) for these beside the text.
  size_t settled_tokens() const { return settled_; }
  // Where generated token i's text begins in the released text.
  int64_t text_offset(size_t token) const { return token == 0 ? 0 : token_end_[token - 1]; }

 private:
  GenerationOptions options_;
  int64_t context_;
  TokenStreamDecoder decoder_;
  StopStringMatcher stops_;
  std::vector<int32_t> generated_;
  std::vector<int64_t> token_end_;  // per generated token: the decoded bytes up to its end
  int64_t decoded_ = 0;             // bytes the decoder gave out
  int64_t released_ = 0;            // bytes the stop strings let through
  size_t settled_ = 0;
  StopReason stop_ = StopReason::TokenLimit;

  // Advances settled_ over what the released text now accounts for.
  void settle();
};

}  // namespace nt
