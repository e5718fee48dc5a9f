// `bench --pass-tokens 1,2,4,...`: the time of one forward pass of T tokens
// against a pass of one, which is what speculation's verification pass
// costs: nearly flat in T while the weights stream (one transfer of the
// streamed layers serves every token), growing with T once compute bounds it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model_runner.h"

namespace nt::cli {

// Times `repetitions` passes of each T (after one untimed one) from
// position 0 and prints a table: ms a pass, the ratio to the first T, and
// the tok/s a pass would give if all T tokens were accepted.
void bench_pass_cost(ModelRunner& runner, const std::string& model_name, const std::vector<int64_t>& pass_tokens,
                     int repetitions);

// Fails naming --pass-tokens unless every T is positive and within `context`.
void check_pass_tokens(const std::vector<int64_t>& pass_tokens, int64_t context);

}  // namespace nt::cli
