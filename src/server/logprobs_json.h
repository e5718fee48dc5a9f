// Per-token log-probabilities (sampling/token_logprobs.h) in OpenAI's two
// shapes: a chat choice's {"content": [{"token", "logprob", "bytes",
// "top_logprobs"}]}, and a legacy completion's {"tokens", "token_logprobs",
// "top_logprobs", "text_offset"}. A token's text is its raw bytes; a byte
// that is not valid UTF-8 on its own shows as U+FFFD in "token" and as
// itself in "bytes".
#pragma once

#include <nlohmann/json.hpp>

#include <span>

#include "sampling/token_logprobs.h"
#include "tokenizer/tokenizer.h"

namespace nt::server {

// The most likely tokens a request may ask for with each token.
inline constexpr int32_t kMaxTopLogprobs = 20;

// The "content" list of a chat choice's logprobs.
nlohmann::json chat_logprobs_content(const Tokenizer& tokenizer, std::span<const TokenLogprobs> tokens);

// A legacy completion choice's logprobs.
nlohmann::json completion_logprobs(const Tokenizer& tokenizer, std::span<const TokenLogprobs> tokens);

}  // namespace nt::server
