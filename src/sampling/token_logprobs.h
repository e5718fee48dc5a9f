// The log-probabilities a request may ask for with each generated token: the
// log-softmax of the row's raw logits, temperature 1, before the penalties and
// the filters of the sampler chain. That is the model's own distribution, the
// same whatever the request samples with (greedy included), as OpenAI reports
// and llama-server does by default.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace nt {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  TokenLogprob chosen;            // the token generated
  std::vector<TokenLogprob> top;  // the likeliest tokens, likeliest first (equal ones by id)
  int64_t text_offset = 0;        // where the chosen token's text begins in the reply's text
};

// The chosen token's and the `top` likeliest tokens' log-probabilities over
// the whole row (0 <= top < the row's length). Computed in double, so a
// large vocabulary's sum loses nothing.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t chosen, int32_t top);

}  // namespace nt
