// SmolLM2 prompts whose greedy continuations several GPU tests decode side
// by side in one batch.
#pragma once

#include <cstdint>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace nt::test {

inline std::vector<std::vector<int32_t>> smollm2_batch_prompts(const Tokenizer& tokenizer) {
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : {"1, 2, 3, 4, 5, 6, 7, 8,", "2, 4, 6, 8, 10, 12,", "101, 102, 103, 104,", "10, 20, 30, 40,",
                           "Monday, Tuesday, Wednesday,", "January, February, March, April,", "a, b, c, d, e, f,",
                           "The capital of France is"}) {
    prompts.push_back(tokenizer.encode(text));
  }
  return prompts;
}

}  // namespace nt::test
