#include "sampling/logit_bias_json.h"

#include <fmt/format.h>

#include <charconv>

namespace nt {

std::vector<LogitBias> logit_bias_from_json(const nlohmann::json& j,
                                            const std::function<void(const std::string&, const std::string&)>& bad) {
  const auto shown = [](const nlohmann::json& value) {
    const std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return text.size() > 40 ? text.substr(0, 37) + "..." : text;
  };
  if (!j.is_object()) bad("logit_bias", fmt::format("expected an object of token ids to biases, got {}", shown(j)));
  std::vector<LogitBias> biases;
  for (const auto& [key, value] : j.items()) {
    const std::string at = "logit_bias." + key;
    int32_t token = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), token);
    if (error != std::errc() || end != key.data() + key.size() || token < 0) {
      bad(at, "a key must be a token id, a non-negative integer");
    }
    if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0)) {
      bad(at, fmt::format("expected a number from -100 to 100, got {}", shown(value)));
    }
    biases.push_back({token, value.get<float>()});
  }
  return biases;
}

}  // namespace nt
