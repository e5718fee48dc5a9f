// The logits of every position of a token sequence, a chunk of positions at a
// time, so that memory stays a few rows however long the sequence and however
// large the vocabulary (128K floats a row for Llama 3).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "runtime/model_runner.h"

namespace nt {

// Runs `tokens` from position 0 (replacing the runner's cache) and calls
// on_row(position, logits) for each position from `first` on, in order.
// The positions before `first` are evaluated in one pass without their rows.
void for_each_logit_row(ModelRunner& runner, std::span<const int32_t> tokens, int64_t first,
                        const std::function<void(int64_t, std::span<const float>)>& on_row);

}  // namespace nt
