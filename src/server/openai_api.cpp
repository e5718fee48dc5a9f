#include "server/openai_api.h"

#include <fmt/format.h>

#include <algorithm>

#include "sampling/setting_limits.h"
#include "server/json_fields.h"

namespace nt::server {
namespace {

using nlohmann::json;

constexpr int kMaxChoices = 8;
constexpr std::string_view kRoles[] = {"system", "developer", "user", "assistant", "tool"};

[[noreturn]] void bad(const std::string& param, const std::string& message) { bad_field(param, message); }

// A message's content: a string, a list of {"type": "text", "text"} parts, or null.
std::string content_text(const json& content, const std::string& param) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, fmt::format("{}: expected a string or a list of parts, got {}", param, shown(content)));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", param, i);
    const json& part = content[i];
    if (!part.is_object() || !part.contains("type")) bad(at, at + ": expected a {\"type\": \"text\", \"text\"} part");
    if (part["type"] != "text") {
      bad(at + ".type", fmt::format("{}.type: {} parts are not supported; only text", at, shown(part["type"])));
    }
    text += text_field(part.value("text", json()), at + ".text");
  }
  return text;
}

std::vector<ChatMessage> chat_messages(const json& j) {
  if (!j.contains("messages")) bad("messages", "messages: missing");
  const json& messages = j["messages"];
  if (!messages.is_array() || messages.empty()) {
    bad("messages", fmt::format("messages: expected a non-empty list of messages, got {}", shown(messages)));
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string at = fmt::format("messages[{}]", i);
    const json& m = messages[i];
    if (!m.is_object()) bad(at, fmt::format("{}: expected a {{\"role\", \"content\"}} object, got {}", at, shown(m)));
    if (!m.contains("role")) bad(at + ".role", at + ".role: missing");
    std::string role = text_field(m["role"], at + ".role");
    if (std::find(std::begin(kRoles), std::end(kRoles), role) == std::end(kRoles)) {
      bad(at + ".role", fmt::format("{}.role: '{}' is not a chat role (system, developer, user, assistant or tool)", at, role));
    }
    if (role == "developer") role = "system";  // OpenAI's newer name for the system message
    if (m.contains("tool_calls") && !m["tool_calls"].empty()) {
      bad(at + ".tool_calls", at + ".tool_calls: tool calls are not supported yet");
    }
    if (!m.contains("content")) bad(at + ".content", at + ".content: missing");
    out.push_back({std::move(role), content_text(m["content"], at + ".content")});
  }
  return out;
}

std::string completion_prompt(const json& j) {
  if (!j.contains("prompt")) bad("prompt", "prompt: missing");
  const json& prompt = j["prompt"];
  if (prompt.is_array()) {
    if (prompt.size() != 1) bad("prompt", "prompt: give one prompt per request (a string, or a list of one string)");
    return text_field(prompt[0], "prompt[0]");
  }
  return text_field(prompt, "prompt");
}

std::vector<std::string> stop_strings(const json& value) {
  if (value.is_null()) return {};
  std::vector<std::string> stops;
  if (value.is_string()) {
    stops.push_back(value.get<std::string>());
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) stops.push_back(text_field(value[i], fmt::format("stop[{}]", i)));
  } else {
    bad("stop", fmt::format("stop: expected a string or a list of strings, got {}", shown(value)));
  }
  if (std::find(stops.begin(), stops.end(), "") != stops.end()) bad("stop", "stop: a stop string must not be empty");
  return stops;
}

// What the engine cannot do yet is refused by name rather than ignored.
void refuse_unsupported(const json& j) {
  if (j.contains("logprobs") && !j["logprobs"].is_null() && j["logprobs"] != false && j["logprobs"] != 0) {
    bad("logprobs", "logprobs: log probabilities are not supported yet");
  }
  if (j.contains("top_logprobs") && !j["top_logprobs"].is_null()) {
    bad("top_logprobs", "top_logprobs: log probabilities are not supported yet");
  }
  if (j.contains("tools") && !j["tools"].is_null() && !j["tools"].empty()) bad("tools", "tools: tool calls are not supported yet");
  if (j.contains("logit_bias") && !j["logit_bias"].is_null() && !j["logit_bias"].empty()) {
    bad("logit_bias", "logit_bias: not supported yet");
  }
  if (j.contains("response_format") && !j["response_format"].is_null()) {
    const json& format = j["response_format"];
    if (!format.is_object() || format.value("type", "") != "text") {
      bad("response_format", fmt::format("response_format: only {{\"type\": \"text\"}} is supported (constrained output "
                                         "is not), got {}",
                                         shown(format)));
    }
  }
}

}  // namespace

json error_body(int status, const std::string& message, const std::string& param, const std::string& type) {
  return {{"error",
           {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)}, {"code", status}}}};
}

ApiRequest parse_api_request(Endpoint endpoint, const std::string& body, const std::string& model_id,
                             const SamplingParams& defaults, int64_t default_max_tokens) {
  const json j = parse_body(body);
  ApiRequest a;
  a.endpoint = endpoint;
  a.model = served_model(j, model_id);
  refuse_unsupported(j);
  EngineRequest& r = a.request;
  if (endpoint == Endpoint::ChatCompletions) {
    r.messages = chat_messages(j);
  } else {
    r.prompt = completion_prompt(j);
  }
  namespace l = limits;
  r.max_tokens = default_max_tokens;
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    if (j.contains(field) && !j[field].is_null()) {
      const auto max_tokens = int64_t(setting_field(j[field], l::kMaxTokens, field));
      r.max_tokens = max_tokens < 0 ? kNoTokenLimit : max_tokens;
    }
  }
  r.sampling = defaults;
  SamplingParams& s = r.sampling;
  for (const auto& [limit, value] : {std::pair{&l::kTemperature, &s.temperature}, std::pair{&l::kTopP, &s.top_p},
                                     std::pair{&l::kMinP, &s.min_p}, std::pair{&l::kRepeatPenalty, &s.repeat_penalty},
                                     std::pair{&l::kFrequencyPenalty, &s.frequency_penalty},
                                     std::pair{&l::kPresencePenalty, &s.presence_penalty}}) {
    const std::string field(limit->field);
    if (j.contains(field) && !j[field].is_null()) *value = float(setting_field(j[field], *limit, field));
  }
  for (const auto& [limit, value] : {std::pair{&l::kTopK, &s.top_k}, std::pair{&l::kRepeatLastN, &s.repeat_last_n}}) {
    const std::string field(limit->field);
    if (j.contains(field) && !j[field].is_null()) *value = int32_t(setting_field(j[field], *limit, field));
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    const json& seed = j["seed"];
    if (!seed.is_number_integer()) bad("seed", fmt::format("seed: expected an integer, got {}", shown(seed)));
    s.seed = seed.is_number_unsigned() ? seed.get<uint64_t>() : uint64_t(seed.get<int64_t>());
    a.seeded = true;
  } else {
    s.seed = random_seed();
  }
  if (j.contains("stop")) r.stop = stop_strings(j["stop"]);
  if (j.contains("stream") && !j["stream"].is_null()) a.stream = bool_field(j["stream"], "stream");
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const json& options = j["stream_options"];
    if (!options.is_object()) bad("stream_options", "stream_options: expected an object");
    if (options.contains("include_usage")) a.include_usage = bool_field(options["include_usage"], "stream_options.include_usage");
  }
  if (j.contains("n") && !j["n"].is_null()) {
    const json& n = j["n"];
    if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > kMaxChoices) {
      bad("n", fmt::format("n: must be from 1 to {}, got {}", kMaxChoices, shown(n)));
    }
    a.choices = int(n.get<int64_t>());
  }
  if (j.contains("prediction") && !j["prediction"].is_null()) {
    const json& p = j["prediction"];
    if (!p.is_object() || p.value("type", "") != "content" || !p.contains("content")) {
      bad("prediction", "prediction: expected {\"type\": \"content\", \"content\": \"...\"}");
    }
    a.prediction = content_text(p["content"], "prediction.content");
  }
  return a;
}

std::string finish_reason(StopReason stop) {
  return stop == StopReason::TokenLimit || stop == StopReason::ContextFull ? "length" : "stop";
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json completion_body(const ApiRequest& api, const std::string& id, int64_t created,
                     const std::vector<GenerationResult>& results) {
  const bool chat = api.endpoint == Endpoint::ChatCompletions;
  json choices = json::array();
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerationResult& r = results[i];
    json choice = {{"index", i}, {"finish_reason", finish_reason(r.stop)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", r.text}};
    } else {
      choice["text"] = r.text;
      choice["logprobs"] = nullptr;
    }
    choices.push_back(std::move(choice));
    prompt = r.prompt_tokens;  // every choice reads the same prompt
    cached = std::max(cached, r.shared_prompt_tokens);
    completion += r.completion_tokens;
  }
  return {{"id", id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", api.model},
          {"choices", std::move(choices)},
          {"usage", usage_json(prompt, completion, cached)}};
}

json chunk_body(const ApiRequest& api, const std::string& id, int64_t created, int index, const std::string& text,
                const std::optional<std::string>& finish, bool first) {
  const bool chat = api.endpoint == Endpoint::ChatCompletions;
  json choice = {{"index", index}, {"finish_reason", finish ? json(*finish) : json()}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !finish)) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", api.model},
          {"choices", json::array({std::move(choice)})}};
}

json usage_chunk_body(const ApiRequest& api, const std::string& id, int64_t created, const json& usage) {
  const bool chat = api.endpoint == Endpoint::ChatCompletions;
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", api.model},
          {"choices", json::array()},
          {"usage", usage}};
}

}  // namespace nt::server
