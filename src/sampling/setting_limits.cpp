#include "sampling/setting_limits.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"

namespace nt {
namespace {

constexpr double kFloatMax = std::numeric_limits<float>::max();  // past it a float setting would be inf
constexpr double kInt32Max = std::numeric_limits<int32_t>::max();

// A highest end that is only the type's limit is not worth printing.
bool open_ended(const SettingLimit& l) { return l.highest == kFloatMax || l.highest == kInt32Max; }

// Whole numbers in full ("2147483647", not "2.14748e+09"), others as short as they go.
std::string number(double v) {
  return v == std::floor(v) && std::fabs(v) < 1e15 ? fmt::format("{:.0f}", v) : fmt::format("{:g}", v);
}

}  // namespace

namespace limits {
const SettingLimit kTemperature{"--temp", "temperature", 0, kFloatMax, false};
const SettingLimit kTopK{"--top-k", "top_k", 0, kInt32Max, true};
const SettingLimit kTopP{"--top-p", "top_p", 0, 1, false};
const SettingLimit kMinP{"--min-p", "min_p", 0, 1, false};
const SettingLimit kRepeatPenalty{"--repeat-penalty", "repeat_penalty", 0, kFloatMax, false, true};
const SettingLimit kRepeatLastN{"--repeat-last-n", "repeat_last_n", -1, kInt32Max, true};
const SettingLimit kFrequencyPenalty{"--frequency-penalty", "frequency_penalty", -kFloatMax, kFloatMax, false};
const SettingLimit kPresencePenalty{"--presence-penalty", "presence_penalty", -kFloatMax, kFloatMax, false};
const SettingLimit kMaxTokens{"--n-predict", "max_tokens", -1, kInt32Max, true};
const SettingLimit kPromptTokens{"--n-prompt", "prompt_tokens", 0, kInt32Max, true};
}  // namespace limits

std::string describe_limit(const SettingLimit& l) {
  if (l.lowest == -kFloatMax) return "a finite number";
  if (l.lowest_excluded) {
    return open_ended(l) ? fmt::format("more than {}", number(l.lowest))
                         : fmt::format("more than {} and at most {}", number(l.lowest), number(l.highest));
  }
  return open_ended(l) ? fmt::format("{} or more", number(l.lowest))
                       : fmt::format("from {} to {}", number(l.lowest), number(l.highest));
}

std::string check_limit(const SettingLimit& l, double value) {
  if (l.integer && value != std::floor(value)) return fmt::format("must be a whole number, got {}", number(value));
  const bool low_ok = l.lowest_excluded ? value > l.lowest : value >= l.lowest;
  if (low_ok && value <= l.highest) return {};
  if (low_ok && open_ended(l)) return fmt::format("must be at most {}, got {}", number(l.highest), number(value));
  return fmt::format("must be {}, got {}", describe_limit(l), number(value));
}

std::optional<uint64_t> parse_seed(std::string_view text, std::string_view what) {
  if (text == "-1") return std::nullopt;
  uint64_t seed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    fail("{}: expected -1 (random) or an integer from 0 to 18446744073709551615, got '{}'", what, text);
  }
  return seed;
}

uint64_t random_seed() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ device();
}

}  // namespace nt
