// `ntransformer batch` input: one JSON object per line, checked field by
// field, so that a bad line gets an error naming its field while the other
// lines still run.
//   {"id": ..., "prompt": "..."}                 raw completion
//   {"id": ..., "messages": [{"role": ..., "content": ...}, ...]}   chat template
// plus optional max_tokens, temperature, top_k, top_p, min_p, seed,
// repeat_penalty, repeat_last_n, frequency_penalty, presence_penalty,
// logit_bias ({"token id": bias}, as OpenAI's) and stop (a string or a list
// of them), which override the command line's, and
// prediction (a string, or OpenAI's {"type": "content", "content": "..."}):
// text the output is expected to resemble, which a lookup draft reads. Any
// other field is an error: a misspelt one would otherwise change nothing
// without a word.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"

namespace nt::cli {

// What a line gets for the fields it leaves out.
struct BatchDefaults {
  SamplingParams sampling;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;
};

struct BatchLine {
  nlohmann::ordered_json id;           // echoed back; null when absent
  std::optional<std::string> prompt;   // a raw completion, or
  std::vector<ChatMessage> messages;   // a conversation
  SamplingParams sampling;
  int64_t max_tokens = 0;
  std::vector<std::string> stop;
  std::string prediction;  // empty: none
  // When the line is bad: what is wrong, and the field at fault ("" for the whole line).
  std::string error;
  std::string field;
};

BatchLine parse_batch_line(std::string_view text, const BatchDefaults& defaults);

}  // namespace nt::cli
