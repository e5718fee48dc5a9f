// The range of every sampling and generation setting, in one table that the
// command line's flags, `batch`'s JSON fields and the server's request fields
// all check against, before a model loads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nt {

struct SettingLimit {
  std::string_view flag;   // "--top-p"
  std::string_view field;  // "top_p"
  double lowest;
  double highest;
  bool integer;
  bool lowest_excluded = false;  // "more than" rather than "or more"
};

namespace limits {
extern const SettingLimit kTemperature, kTopK, kTopP, kMinP, kRepeatPenalty, kRepeatLastN, kFrequencyPenalty,
    kPresencePenalty, kMaxTokens, kPromptTokens;
}  // namespace limits

// The range in words: "from 0 to 1", "0 or more", "more than 0", "-1 or more".
std::string describe_limit(const SettingLimit& limit);
// Empty when `value` is in range; else "must be from 0 to 1, got 2".
std::string check_limit(const SettingLimit& limit, double value);

// A seed as the reference engine takes it: -1 (random) or 0 to 2^64 - 1.
// nullopt for -1; an nt::Error naming `what` for anything else.
std::optional<uint64_t> parse_seed(std::string_view text, std::string_view what);
// A random seed, for -1 and for the default.
uint64_t random_seed();

}  // namespace nt
