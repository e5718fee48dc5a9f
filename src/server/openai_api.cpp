#include "server/openai_api.h"

#include <fmt/format.h>

#include <algorithm>

#include "sampling/logit_bias_json.h"
#include "sampling/setting_limits.h"
#include "server/json_fields.h"
#include "server/logprobs_json.h"

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

std::vector<ChatToolCall> tool_calls(const json& calls, const std::string& param);

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
    ChatMessage message{std::move(role), {}};
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (message.role != "assistant") bad(at + ".tool_calls", at + ".tool_calls: only an assistant's message makes calls");
      message.tool_calls = tool_calls(m["tool_calls"], at + ".tool_calls");
    }
    if (!m.contains("content") && message.tool_calls.empty()) bad(at + ".content", at + ".content: missing");
    message.content = content_text(m.value("content", json()), at + ".content");
    if (message.role == "tool") {
      if (!m.contains("tool_call_id")) bad(at + ".tool_call_id", at + ".tool_call_id: missing (the call this answers)");
      message.tool_call_id = text_field(m["tool_call_id"], at + ".tool_call_id");
    }
    if (m.contains("name") && !m["name"].is_null()) message.name = text_field(m["name"], at + ".name");
    if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
      message.reasoning = text_field(m["reasoning_content"], at + ".reasoning_content");
    }
    out.push_back(std::move(message));
  }
  return out;
}

// An assistant message's calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
std::vector<ChatToolCall> tool_calls(const json& calls, const std::string& param) {
  if (!calls.is_array()) bad(param, fmt::format("{}: expected a list of calls, got {}", param, shown(calls)));
  std::vector<ChatToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", param, i);
    const json& c = calls[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) {
      bad(at, fmt::format("{}: expected {{\"id\", \"type\": \"function\", \"function\": {{\"name\", "
                          "\"arguments\"}}}}, got {}",
                          at, shown(c)));
    }
    if (c.contains("type") && c["type"] != "function") {
      bad(at + ".type", fmt::format("{}.type: only function calls are supported, got {}", at, shown(c["type"])));
    }
    const json& f = c["function"];
    if (!f.contains("name")) bad(at + ".function.name", at + ".function.name: missing");
    ChatToolCall call;
    call.id = c.contains("id") && !c["id"].is_null() ? text_field(c["id"], at + ".id") : std::string();
    call.name = text_field(f["name"], at + ".function.name");
    const json arguments = f.value("arguments", json::object());
    if (arguments.is_string()) {
      call.arguments = arguments.get<std::string>();
    } else if (arguments.is_object()) {
      call.arguments = arguments.dump();
    } else {
      bad(at + ".function.arguments",
          fmt::format("{}.function.arguments: expected the arguments as JSON text, got {}", at, shown(arguments)));
    }
    out.push_back(std::move(call));
  }
  return out;
}

bool is_token_list(const json& value) {
  return value.is_array() && !value.empty() && value[0].is_number();
}

std::vector<int32_t> token_list(const json& value, const std::string& at) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < value.size(); ++i) {
    const json& id = value[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      bad("prompt", fmt::format("{}[{}]: expected a token id, got {}", at, i, shown(id)));
    }
    ids.push_back(int32_t(id.get<int64_t>()));
  }
  return ids;
}

// OpenAI's forms of one prompt: a text, token ids, or a list of one of either.
void read_completion_prompt(const json& j, EngineRequest& r) {
  if (!j.contains("prompt")) bad("prompt", "prompt: missing");
  const json& prompt = j["prompt"];
  if (is_token_list(prompt)) {
    r.prompt_ids = token_list(prompt, "prompt");
  } else if (prompt.is_array()) {
    if (prompt.size() != 1) bad("prompt", "prompt: give one prompt per request (a text or token ids, or a list of one)");
    if (is_token_list(prompt[0])) {
      r.prompt_ids = token_list(prompt[0], "prompt[0]");
    } else {
      r.prompt = text_field(prompt[0], "prompt[0]");
    }
  } else {
    r.prompt = text_field(prompt, "prompt");
  }
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

// The likeliest tokens' count of top_logprobs, or of a legacy completion's logprobs.
int32_t top_logprobs_field(const json& value, const std::string& param) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxTopLogprobs) {
    bad(param, fmt::format("{}: expected an integer from 0 to {}, got {}", param, kMaxTopLogprobs, shown(value)));
  }
  return int32_t(value.get<int64_t>());
}

// logprobs and top_logprobs of a chat request; a completion's logprobs: N.
std::optional<int32_t> logprobs_request(Endpoint endpoint, const json& j) {
  const auto given = [&](const char* field) { return j.contains(field) && !j[field].is_null(); };
  if (endpoint == Endpoint::Completions) {
    if (given("top_logprobs")) {
      bad("top_logprobs", "top_logprobs: a chat field; /v1/completions takes logprobs: N (the likeliest tokens' count)");
    }
    if (!given("logprobs")) return std::nullopt;
    return top_logprobs_field(j["logprobs"], "logprobs");
  }
  const bool wanted = given("logprobs") && bool_field(j["logprobs"], "logprobs");
  if (!given("top_logprobs")) return wanted ? std::optional<int32_t>(0) : std::nullopt;
  const int32_t top = top_logprobs_field(j["top_logprobs"], "top_logprobs");
  if (!wanted) bad("top_logprobs", "top_logprobs: needs logprobs: true");
  return top;
}

// What the engine cannot do yet is refused by name rather than ignored.
void refuse_unsupported(const json& j) {
  for (const char* legacy : {"functions", "function_call"}) {
    if (j.contains(legacy) && !j[legacy].is_null()) {
      bad(legacy, fmt::format("{}: the legacy function fields are not supported; give tools and tool_choice", legacy));
    }
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

// tools, tool_choice, parallel_tool_calls: the tools as the client wrote them
// (`ordered`, the body with its keys in order, is what the template shows).
ToolRequest tool_request(const json& j, const nlohmann::ordered_json& ordered) {
  ToolRequest t;
  std::vector<std::string> names;
  if (j.contains("tools") && !j["tools"].is_null()) {
    const json& tools = j["tools"];
    if (!tools.is_array()) bad("tools", fmt::format("tools: expected a list of tools, got {}", shown(tools)));
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string at = fmt::format("tools[{}]", i);
      const json& tool = tools[i];
      if (!tool.is_object() || tool.value("type", "") != "function") {
        bad(at + ".type", fmt::format("{}.type: only {{\"type\": \"function\", \"function\": {{...}}}} tools are "
                                      "supported, got {}",
                                      at, shown(tool)));
      }
      if (!tool.contains("function") || !tool["function"].is_object()) bad(at + ".function", at + ".function: missing");
      const json& f = tool["function"];
      if (!f.contains("name")) bad(at + ".function.name", at + ".function.name: missing");
      const std::string name = text_field(f["name"], at + ".function.name");
      if (!valid_function_name(name)) {
        bad(at + ".function.name",
            fmt::format("{}.function.name: '{}' is not a function name (letters, digits, '_' and '-', at most 64)", at, name));
      }
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        bad(at + ".function.name", fmt::format("{}.function.name: '{}' is named twice", at, name));
      }
      if (f.contains("description") && !f["description"].is_null()) text_field(f["description"], at + ".function.description");
      if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object()) {
        bad(at + ".function.parameters",
            fmt::format("{}.function.parameters: expected a JSON Schema object, got {}", at, shown(f["parameters"])));
      }
      names.push_back(name);
      t.tools.push_back(ordered["tools"][i]);
    }
  }
  if (j.contains("tool_choice") && !j["tool_choice"].is_null()) {
    const json& choice = j["tool_choice"];
    if (choice == "auto") {
      t.choice = ToolRequest::Choice::Auto;
    } else if (choice == "none") {
      t.choice = ToolRequest::Choice::None;
    } else if (choice == "required") {
      t.choice = ToolRequest::Choice::Required;
    } else if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("function") &&
               choice["function"].is_object() && choice["function"].contains("name")) {
      t.choice = ToolRequest::Choice::Named;
      t.function = text_field(choice["function"]["name"], "tool_choice.function.name");
      if (std::find(names.begin(), names.end(), t.function) == names.end()) {
        bad("tool_choice", fmt::format("tool_choice: no tool is named '{}'", t.function));
      }
    } else {
      bad("tool_choice", fmt::format("tool_choice: expected 'auto', 'none', 'required' or {{\"type\": \"function\", "
                                     "\"function\": {{\"name\"}}}}, got {}",
                                     shown(choice)));
    }
    if (t.choice == ToolRequest::Choice::Required && names.empty()) bad("tool_choice", "tool_choice: 'required' needs tools");
  }
  if (j.contains("parallel_tool_calls") && !j["parallel_tool_calls"].is_null()) {
    t.parallel = bool_field(j["parallel_tool_calls"], "parallel_tool_calls");
  }
  read_reasoning_fields(j, t);
  return t;
}

// A chat choice's message: the text as it is, or read for tool calls and reasoning.
json chat_message(const ApiRequest& api, const std::string& text, bool* called) {
  json message = {{"role", "assistant"}};
  if (!api.reading) {
    message["content"] = text;
    *called = false;
    return message;
  }
  const chat::Reply reply = api.reading->read(text);
  *called = !reply.tool_calls.empty();
  message["content"] = reply.content.empty() && *called ? json() : json(reply.content);
  if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
  if (*called) {
    json calls = json::array();
    for (const chat::ToolCall& c : reply.tool_calls) {
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  return message;
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
    read_completion_prompt(j, r);
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
  if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
    s.logit_bias = logit_bias_from_json(j["logit_bias"], [](const std::string& field, const std::string& message) {
      bad(field, fmt::format("{}: {}", field, message));
    });
  }
  // llama-server's extension, for benchmarks that need replies of a set length.
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) r.ignore_eos = bool_field(j["ignore_eos"], "ignore_eos");
  r.logprobs = logprobs_request(endpoint, j);
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
  if (endpoint == Endpoint::ChatCompletions) {
    const bool ordered = j.contains("tools") && !j["tools"].is_null();
    a.tools = tool_request(j, ordered ? nlohmann::ordered_json::parse(body) : nlohmann::ordered_json());
  } else {
    for (const char* field : {"tools", "tool_choice"}) {
      if (j.contains(field) && !j[field].is_null()) bad(field, fmt::format("{}: tools are for /v1/chat/completions", field));
    }
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

std::string finish_reason(StopReason stop, bool called) {
  if (stop == StopReason::TokenLimit || stop == StopReason::ContextFull) return "length";
  return called ? "tool_calls" : "stop";
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json completion_body(const ApiRequest& api, const std::string& id, int64_t created,
                     const std::vector<GenerationResult>& results, const Tokenizer& tokenizer) {
  const bool chat = api.endpoint == Endpoint::ChatCompletions;
  json choices = json::array();
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerationResult& r = results[i];
    json choice = {{"index", i}};
    bool called = false;
    if (chat) {
      choice["message"] = chat_message(api, r.text, &called);
      choice["logprobs"] = api.request.logprobs
                               ? json{{"content", chat_logprobs_content(tokenizer, r.logprobs)}, {"refusal", nullptr}}
                               : json();
    } else {
      choice["text"] = r.text;
      choice["logprobs"] = api.request.logprobs ? completion_logprobs(tokenizer, r.logprobs) : json();
    }
    choice["finish_reason"] = finish_reason(r.stop, called);
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

ChoiceStream::ChoiceStream(const ApiRequest& api, std::string id, int64_t created, int index, const Tokenizer& tokenizer)
    : tokenizer_(tokenizer),
      chat_(api.endpoint == Endpoint::ChatCompletions),
      model_(api.model),
      id_(std::move(id)),
      created_(created),
      index_(index) {
  if (chat_ && api.reading) parser_.emplace(api.reading->start(&prefilled_));
}

// `delta`: a chat delta's fields, or a completion's text as a JSON string.
json ChoiceStream::chunk(json delta, const std::optional<std::string>& finish) {
  json choice = {{"index", index_}, {"finish_reason", finish ? json(*finish) : json()}};
  if (chat_) {
    if (!started_) delta["role"] = "assistant";
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = delta.is_string() ? delta : json("");
  }
  choice["logprobs"] = nullptr;
  started_ = true;
  return {{"id", id_},
          {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array({std::move(choice)})}};
}

void ChoiceStream::add(std::vector<chat::ReplyEvent> events, std::vector<json>& out) {
  if (!prefilled_.empty()) {
    events.insert(events.begin(), std::make_move_iterator(prefilled_.begin()), std::make_move_iterator(prefilled_.end()));
    prefilled_.clear();
  }
  for (chat::ReplyEvent& e : events) {
    using Kind = chat::ReplyEvent::Kind;
    json delta;
    switch (e.kind) {
      case Kind::Content: delta["content"] = std::move(e.text); break;
      case Kind::Reasoning: delta["reasoning_content"] = std::move(e.text); break;
      case Kind::ToolCallStart:
        called_ = true;
        delta["tool_calls"] = json::array({{{"index", e.index},
                                            {"id", std::move(e.id)},
                                            {"type", "function"},
                                            {"function", {{"name", std::move(e.text)}, {"arguments", ""}}}}});
        break;
      case Kind::ToolCallArguments:
        delta["tool_calls"] = json::array({{{"index", e.index}, {"function", {{"arguments", std::move(e.text)}}}}});
        break;
    }
    out.push_back(chunk(std::move(delta), std::nullopt));
  }
}

std::vector<json> ChoiceStream::text(std::string_view piece, std::span<const TokenLogprobs> logprobs) {
  unsent_logprobs_.insert(unsent_logprobs_.end(), logprobs.begin(), logprobs.end());
  std::vector<json> out;
  if (parser_) {
    add(parser_->feed(piece), out);
  } else if (!piece.empty()) {
    out.push_back(chunk(chat_ ? json{{"content", std::string(piece)}} : json(std::string(piece)), std::nullopt));
  }
  attach_logprobs(out);
  return out;
}

std::vector<json> ChoiceStream::finish(const GenerationResult& result) {
  std::vector<json> out;
  if (parser_) add(parser_->finish(), out);
  if (!started_) out.push_back(chunk(chat_ ? json{{"content", ""}} : json(""), std::nullopt));
  const std::string reason = result.error.empty() ? finish_reason(result.stop, called_) : "error";
  out.push_back(chunk(chat_ ? json::object() : json(""), reason));
  attach_logprobs(out);
  return out;
}

void ChoiceStream::attach_logprobs(std::vector<json>& chunks) {
  if (unsent_logprobs_.empty() || chunks.empty()) return;
  json& choice = chunks.back()["choices"][0];
  choice["logprobs"] = chat_ ? json{{"content", chat_logprobs_content(tokenizer_, unsent_logprobs_)}, {"refusal", nullptr}}
                             : completion_logprobs(tokenizer_, unsent_logprobs_);
  unsent_logprobs_.clear();
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
