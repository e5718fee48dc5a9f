#include "cli/batch_lines.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/completion.h"
#include "sampling/logit_bias_json.h"
#include "sampling/setting_limits.h"

namespace nt::cli {
namespace {

using nlohmann::json;

constexpr std::string_view kFields[] = {"id",           "prompt",         "messages",          "max_tokens",
                                        "temperature",  "top_k",          "top_p",             "min_p",
                                        "seed",         "repeat_penalty", "repeat_last_n",     "frequency_penalty",
                                        "presence_penalty", "stop",       "prediction",        "logit_bias"};

constexpr std::string_view kRoles[] = {"system", "user", "assistant", "tool"};

// An error message quotes at most this much of the line (the JSON library's
// "last read" can be all of a 10 MB line).
constexpr size_t kMaxQuoted = 200;

struct FieldError {
  std::string field, message;
};

// No request nests deeper; the bound also keeps dump() and the field checks,
// which recurse, off the end of the stack on a line of a million brackets.
constexpr int kMaxNesting = 32;
struct TooDeep {};

[[noreturn]] void bad(std::string field, std::string message) { throw FieldError{std::move(field), std::move(message)}; }

// The value as the line wrote it, cut short when long.
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

// A field of the shared table (sampling/setting_limits.h), as the flags check it.
double setting(const json& value, const SettingLimit& limit) {
  const std::string field(limit.field);
  if (limit.integer ? !value.is_number_integer() : !value.is_number()) {
    bad(field, fmt::format("expected {}, got {}", limit.integer ? "an integer" : "a number", shown(value)));
  }
  const double v = value.get<double>();
  if (std::string error = check_limit(limit, v); !error.empty()) bad(field, error);
  return v;
}

std::string text(const json& value, const std::string& field) {
  if (!value.is_string()) bad(field, fmt::format("expected a string, got {}", shown(value)));
  return value.get<std::string>();
}

std::vector<std::string> stop_strings(const json& value) {
  std::vector<std::string> stops;
  if (value.is_string()) {
    stops.push_back(value.get<std::string>());
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) stops.push_back(text(value[i], fmt::format("stop[{}]", i)));
  } else {
    bad("stop", fmt::format("expected a string or a list of strings, got {}", shown(value)));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) bad(value.is_array() ? fmt::format("stop[{}]", i) : "stop", "a stop string must not be empty");
  }
  return stops;
}

// A string, or OpenAI's {"type": "content", "content": "..."}.
std::string prediction(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_object()) {
    bad("prediction", fmt::format("expected a string or a {{\"type\": \"content\", \"content\"}} object, got {}",
                                  shown(value)));
  }
  if (!value.contains("type") || value["type"] != "content") {
    bad("prediction.type", fmt::format("expected \"content\", got {}", value.contains("type") ? shown(value["type"]) : "nothing"));
  }
  if (!value.contains("content")) bad("prediction.content", "missing");
  return text(value["content"], "prediction.content");
}

std::vector<ChatMessage> chat_messages(const json& value) {
  if (!value.is_array() || value.empty()) {
    bad("messages", fmt::format("expected a non-empty list of {{\"role\", \"content\"}} objects, got {}", shown(value)));
  }
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string at = fmt::format("messages[{}]", i);
    const json& m = value[i];
    if (!m.is_object()) bad(at, fmt::format("expected a {{\"role\", \"content\"}} object, got {}", shown(m)));
    for (const char* key : {"role", "content"}) {
      if (!m.contains(key)) bad(at + "." + key, "missing");
    }
    std::string role = text(m["role"], at + ".role");
    if (std::find(std::begin(kRoles), std::end(kRoles), role) == std::end(kRoles)) {
      bad(at + ".role", fmt::format("{} is not a chat role (system, user, assistant or tool)", shown(m["role"])));
    }
    messages.push_back({std::move(role), text(m["content"], at + ".content")});
  }
  return messages;
}

void read_fields(const json& j, BatchLine& line) {
  if (!j.is_object()) bad("", fmt::format("expected a JSON object, got {}", shown(j)));
  if (j.contains("id")) line.id = j["id"];  // first, so that every error object echoes it
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields)) {
      std::string known;
      for (const std::string_view f : kFields) known += fmt::format("{}{}", known.empty() ? "" : ", ", f);
      bad(key, fmt::format("unknown field (known: {})", known));
    }
  }
  const bool has_prompt = j.contains("prompt"), has_messages = j.contains("messages");
  if (has_prompt == has_messages) {
    bad(has_prompt ? "messages" : "prompt", has_prompt ? "give either prompt or messages, not both"
                                                       : "missing: give a prompt (raw completion) or messages (chat)");
  }
  if (has_prompt) line.prompt = text(j["prompt"], "prompt");
  if (has_messages) line.messages = chat_messages(j["messages"]);
  namespace l = limits;
  if (j.contains("max_tokens")) {
    const int64_t max_tokens = int64_t(setting(j["max_tokens"], l::kMaxTokens));
    line.max_tokens = max_tokens < 0 ? kNoTokenLimit : max_tokens;
  }
  SamplingParams& s = line.sampling;
  for (const auto& [limit, value] : {std::pair{&l::kTemperature, &s.temperature}, std::pair{&l::kTopP, &s.top_p},
                                     std::pair{&l::kMinP, &s.min_p}, std::pair{&l::kRepeatPenalty, &s.repeat_penalty},
                                     std::pair{&l::kFrequencyPenalty, &s.frequency_penalty},
                                     std::pair{&l::kPresencePenalty, &s.presence_penalty}}) {
    if (j.contains(limit->field)) *value = float(setting(j[limit->field], *limit));
  }
  for (const auto& [limit, value] : {std::pair{&l::kTopK, &s.top_k}, std::pair{&l::kRepeatLastN, &s.repeat_last_n}}) {
    if (j.contains(limit->field)) *value = int32_t(setting(j[limit->field], *limit));
  }
  if (j.contains("seed")) {
    const json& seed = j["seed"];
    if (seed.is_number_integer() && seed.get<int64_t>() == -1 && !seed.is_number_unsigned()) {
      s.seed = random_seed();
    } else if (seed.is_number_unsigned()) {
      s.seed = seed.get<uint64_t>();
    } else {
      bad("seed", fmt::format("expected -1 (random) or an integer from 0 to 18446744073709551615, got {}", shown(seed)));
    }
  }
  if (j.contains("stop")) line.stop = stop_strings(j["stop"]);
  if (j.contains("prediction")) line.prediction = prediction(j["prediction"]);
  if (j.contains("logit_bias")) s.logit_bias = logit_bias_from_json(j["logit_bias"], bad);
}

}  // namespace

BatchLine parse_batch_line(std::string_view text, const BatchDefaults& defaults) {
  BatchLine line;
  line.sampling = defaults.sampling;
  line.max_tokens = defaults.max_tokens;
  line.stop = defaults.stop;
  json j;
  try {
    j = json::parse(text, [](int depth, json::parse_event_t, const json&) {
      if (depth > kMaxNesting) throw TooDeep{};
      return true;
    });
  } catch (const TooDeep&) {
    line.error = fmt::format("malformed JSON: nested deeper than {} levels", kMaxNesting);
    return line;
  } catch (const json::exception& e) {  // a syntax error, or a number past a double (out_of_range)
    // Drop the library's "[json.exception.parse_error.101] " tag.
    const std::string what = e.what();
    const size_t tag_end = what.find("] ");
    std::string reason = tag_end == std::string::npos ? what : what.substr(tag_end + 2);
    if (reason.size() > kMaxQuoted) reason = reason.substr(0, kMaxQuoted) + fmt::format("... ({} bytes in all)", reason.size());
    line.error = "malformed JSON: " + reason;
    return line;
  }
  try {
    read_fields(j, line);
  } catch (const FieldError& e) {
    line.field = e.field;
    line.error = e.message;
  }
  return line;
}

}  // namespace nt::cli
