#include "cli/batch_lines.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace nt::cli {
namespace {

using nlohmann::json;

constexpr std::string_view kFields[] = {"id",           "prompt",         "messages",          "max_tokens",
                                        "temperature",  "top_k",          "top_p",             "min_p",
                                        "seed",         "repeat_penalty", "repeat_last_n",     "frequency_penalty",
                                        "presence_penalty", "stop",       "prediction"};

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

int64_t integer(const json& value, const std::string& field, int64_t lo, int64_t hi) {
  if (!value.is_number_integer()) bad(field, fmt::format("expected an integer, got {}", shown(value)));
  const bool in_range = value.is_number_unsigned() ? value.get<uint64_t>() <= uint64_t(hi)
                                                   : value.get<int64_t>() >= lo && value.get<int64_t>() <= hi;
  if (!in_range) bad(field, fmt::format("{} is out of range: {} to {}", shown(value), lo, hi));
  return value.get<int64_t>();
}

float number(const json& value, const std::string& field, double lo, double hi) {
  if (!value.is_number()) bad(field, fmt::format("expected a number, got {}", shown(value)));
  const double v = value.get<double>();
  if (!(v >= lo && v <= hi)) bad(field, fmt::format("{} is out of range: {:g} to {:g}", shown(value), lo, hi));
  return float(v);
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
    messages.push_back({text(m["role"], at + ".role"), text(m["content"], at + ".content")});
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
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  constexpr double kLargestFloat = std::numeric_limits<float>::max();  // past it, a temperature would be inf
  if (j.contains("max_tokens")) line.max_tokens = integer(j["max_tokens"], "max_tokens", 0, kInt32Max);
  if (j.contains("temperature")) line.sampling.temperature = number(j["temperature"], "temperature", 0.0, kLargestFloat);
  if (j.contains("top_k")) line.sampling.top_k = int32_t(integer(j["top_k"], "top_k", 0, kInt32Max));
  if (j.contains("top_p")) line.sampling.top_p = number(j["top_p"], "top_p", 0.0, 1.0);
  if (j.contains("min_p")) line.sampling.min_p = number(j["min_p"], "min_p", 0.0, 1.0);
  if (j.contains("seed")) {
    const json& seed = j["seed"];
    if (!seed.is_number_unsigned()) bad("seed", fmt::format("expected an integer from 0 to 2^64 - 1, got {}", shown(seed)));
    line.sampling.seed = seed.get<uint64_t>();
  }
  // The penalties as the CLI's --repeat-penalty, --repeat-last-n, --frequency-penalty and --presence-penalty.
  if (j.contains("repeat_penalty")) {
    line.sampling.repeat_penalty = number(j["repeat_penalty"], "repeat_penalty", 0.0, kLargestFloat);
    if (line.sampling.repeat_penalty == 0.0f) bad("repeat_penalty", "must be more than 0 (1: off)");
  }
  if (j.contains("repeat_last_n")) line.sampling.repeat_last_n = int32_t(integer(j["repeat_last_n"], "repeat_last_n", -1, kInt32Max));
  for (const auto& [field, value] : {std::pair{"frequency_penalty", &line.sampling.frequency_penalty},
                                     std::pair{"presence_penalty", &line.sampling.presence_penalty}}) {
    if (j.contains(field)) *value = number(j[field], field, -kLargestFloat, kLargestFloat);
  }
  if (j.contains("stop")) line.stop = stop_strings(j["stop"]);
  if (j.contains("prediction")) line.prediction = prediction(j["prediction"]);
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
    line.error = "malformed JSON: " + (tag_end == std::string::npos ? what : what.substr(tag_end + 2));
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
