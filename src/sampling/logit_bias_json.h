// A request's logit_bias as OpenAI writes it, {"token id": bias, ...} with
// biases from -100 to 100, for the server and `batch` lines alike. The ids
// are checked against the vocabulary when the request's sampler is made.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace nt {

// `bad(field, message)` reports a malformed entry and must not return:
// ("logit_bias.hello", "a key must be a token id, a non-negative integer").
std::vector<LogitBias> logit_bias_from_json(const nlohmann::json& j,
                                            const std::function<void(const std::string&, const std::string&)>& bad);

}  // namespace nt
