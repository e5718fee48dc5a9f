#include "server/anthropic_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "sampling/setting_limits.h"
#include "server/json_fields.h"

namespace nt::server {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) { bad_field(param, message); }

// A string, or a list of {"type": "text", "text"} blocks.
std::string blocks_text(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, fmt::format("{}: expected a string or a list of blocks, got {}", param, shown(content)));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", param, i);
    const json& block = content[i];
    if (!block.is_object() || block.value("type", "") != "text" || !block.contains("text") || !block["text"].is_string()) {
      bad(at, fmt::format("{}: only {{\"type\": \"text\", \"text\": \"...\"}} blocks are supported, got {}", at, shown(block)));
    }
    text += block["text"].get<std::string>();
  }
  return text;
}

std::string event(const std::string& name, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, data.dump(-1, ' ', false, json::error_handler_t::replace));
}

// The body again with its objects' keys in the client's order, for what the template
// shows as written (tool schemas, a call's input); parsed when first needed.
class OrderedBody {
 public:
  explicit OrderedBody(const std::string& body) : body_(body) {}
  const nlohmann::ordered_json& get() {
    if (!parsed_) parsed_ = nlohmann::ordered_json::parse(body_);
    return *parsed_;
  }

 private:
  const std::string& body_;
  std::optional<nlohmann::ordered_json> parsed_;
};

// One message of the conversation, its blocks read into chat messages: an
// assistant's text, thinking and tool_use blocks make one message; a user's
// tool_result blocks each make a tool message, before the user's text.
void read_message(const json& msg, size_t i, OrderedBody& ordered, std::map<std::string, std::string>& call_names,
                  std::vector<ChatMessage>& out) {
  const std::string at = fmt::format("messages[{}]", i);
  if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) bad(at + ".role", at + ".role: missing");
  const std::string role = msg["role"].get<std::string>();
  if (role != "user" && role != "assistant") bad(at + ".role", fmt::format("{}.role: '{}' is not user or assistant", at, role));
  if (!msg.contains("content")) bad(at + ".content", at + ".content: missing");
  const json& content = msg["content"];
  ChatMessage message{role, {}};
  if (content.is_string()) {
    message.content = content.get<std::string>();
    out.push_back(std::move(message));
    return;
  }
  if (!content.is_array()) bad(at + ".content", fmt::format("{}.content: expected a string or a list of blocks, got {}", at, shown(content)));
  std::vector<ChatMessage> results;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string block_at = fmt::format("{}.content[{}]", at, k);
    const json& block = content[k];
    const std::string type = block.is_object() ? block.value("type", "") : "";
    const auto only = [&](const char* who) {
      if (role != who) bad(block_at + ".type", fmt::format("{}.type: a {} block belongs in an {} message", block_at, type, who));
    };
    if (type == "text") {
      message.content += text_field(block.value("text", json()), block_at + ".text");
    } else if (type == "thinking") {
      only("assistant");
      message.reasoning += text_field(block.value("thinking", json()), block_at + ".thinking");
    } else if (type == "redacted_thinking") {
      only("assistant");  // encrypted reasoning of another model: nothing to show this one
    } else if (type == "tool_use") {
      only("assistant");
      ChatToolCall call;
      call.id = text_field(block.value("id", json()), block_at + ".id");
      call.name = text_field(block.value("name", json()), block_at + ".name");
      if (!block.contains("input") || !block["input"].is_object()) {
        bad(block_at + ".input", fmt::format("{}.input: expected an object", block_at));
      }
      call.arguments = ordered.get()["messages"][i]["content"][k]["input"].dump();
      call_names[call.id] = call.name;
      message.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result") {
      if (role != "user") bad(block_at + ".type", fmt::format("{}.type: a tool_result block belongs in a user message", block_at));
      ChatMessage result{"tool", {}};
      result.tool_call_id = text_field(block.value("tool_use_id", json()), block_at + ".tool_use_id");
      if (const auto name = call_names.find(result.tool_call_id); name != call_names.end()) result.name = name->second;
      if (block.contains("content") && !block["content"].is_null()) {
        result.content = blocks_text(block["content"], block_at + ".content");
      }
      results.push_back(std::move(result));
    } else {
      bad(block_at, fmt::format("{}: only text, thinking, tool_use and tool_result blocks are supported, got {}",
                                block_at, shown(block)));
    }
  }
  const bool only_results = !results.empty() && message.content.empty();
  out.insert(out.end(), std::make_move_iterator(results.begin()), std::make_move_iterator(results.end()));
  if (!only_results) out.push_back(std::move(message));
}

// tools: [{"name", "description", "input_schema"}], in the OpenAI shape templates take.
ToolRequest tool_request(const json& j, OrderedBody& ordered) {
  ToolRequest t;
  std::vector<std::string> names;
  if (j.contains("tools") && !j["tools"].is_null()) {
    const json& tools = j["tools"];
    if (!tools.is_array()) bad("tools", fmt::format("tools: expected a list of tools, got {}", shown(tools)));
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string at = fmt::format("tools[{}]", i);
      const json& tool = tools[i];
      if (!tool.is_object()) bad(at, fmt::format("{}: expected {{\"name\", \"description\", \"input_schema\"}}, got {}", at, shown(tool)));
      if (tool.contains("type") && tool["type"] != "custom") {
        bad(at + ".type", fmt::format("{}.type: {} tools run on Anthropic's side and are not supported; give client "
                                      "tools (name, description, input_schema)",
                                      at, shown(tool["type"])));
      }
      const std::string name = text_field(tool.value("name", json()), at + ".name");
      if (!valid_function_name(name)) {
        bad(at + ".name", fmt::format("{}.name: '{}' is not a tool name (letters, digits, '_' and '-', at most 64)", at, name));
      }
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        bad(at + ".name", fmt::format("{}.name: '{}' is named twice", at, name));
      }
      if (!tool.contains("input_schema") || !tool["input_schema"].is_object()) {
        bad(at + ".input_schema", fmt::format("{}.input_schema: expected a JSON Schema object", at));
      }
      const nlohmann::ordered_json& given = ordered.get()["tools"][i];
      nlohmann::ordered_json function = {{"name", name}};
      if (tool.contains("description") && !tool["description"].is_null()) {
        function["description"] = text_field(tool["description"], at + ".description");
      }
      function["parameters"] = given["input_schema"];
      t.tools.push_back({{"type", "function"}, {"function", std::move(function)}});
      names.push_back(name);
    }
  }
  if (j.contains("tool_choice") && !j["tool_choice"].is_null()) {
    const json& choice = j["tool_choice"];
    const std::string type = choice.is_object() ? choice.value("type", "") : "";
    if (type == "auto") {
      t.choice = ToolRequest::Choice::Auto;
    } else if (type == "any") {
      t.choice = ToolRequest::Choice::Required;
    } else if (type == "none") {
      t.choice = ToolRequest::Choice::None;
    } else if (type == "tool") {
      t.choice = ToolRequest::Choice::Named;
      t.function = text_field(choice.value("name", json()), "tool_choice.name");
      if (std::find(names.begin(), names.end(), t.function) == names.end()) {
        bad("tool_choice", fmt::format("tool_choice: no tool is named '{}'", t.function));
      }
    } else {
      bad("tool_choice", fmt::format("tool_choice: expected {{\"type\": \"auto\"}}, {{\"type\": \"any\"}}, {{\"type\": "
                                     "\"none\"}} or {{\"type\": \"tool\", \"name\"}}, got {}",
                                     shown(choice)));
    }
    if (t.choice == ToolRequest::Choice::Required && names.empty()) bad("tool_choice", "tool_choice: 'any' needs tools");
    if (choice.contains("disable_parallel_tool_use")) {
      t.parallel = !bool_field(choice["disable_parallel_tool_use"], "tool_choice.disable_parallel_tool_use");
    }
  }
  read_reasoning_fields(j, t);
  return t;
}

// The input of a tool_use block: the arguments' object ({} when they are not one: a call cut short).
json tool_input(const std::string& arguments) {
  json input = json::parse(arguments, nullptr, false);
  return input.is_object() ? input : json::object();
}

}  // namespace

MessagesRequest parse_messages_request(const std::string& body, const std::string& model_id,
                                       const SamplingParams& defaults) {
  const json j = parse_body(body);
  OrderedBody ordered(body);
  MessagesRequest m;
  m.model = served_model(j, model_id);
  EngineRequest& r = m.request;
  if (!j.contains("max_tokens")) bad("max_tokens", "max_tokens: missing (the Messages API requires it)");
  const auto max_tokens = int64_t(setting_field(j["max_tokens"], limits::kMaxTokens, "max_tokens"));
  r.max_tokens = max_tokens < 0 ? kNoTokenLimit : max_tokens;
  if (j.contains("system") && !j["system"].is_null()) r.messages.push_back({"system", blocks_text(j["system"], "system")});
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty()) {
    bad("messages", "messages: expected a non-empty list of {\"role\", \"content\"} messages");
  }
  const json& messages = j["messages"];
  std::map<std::string, std::string> call_names;  // tool_use ids: which tool each called
  for (size_t i = 0; i < messages.size(); ++i) read_message(messages[i], i, ordered, call_names, r.messages);
  r.sampling = defaults;
  r.sampling.seed = random_seed();
  namespace l = limits;
  if (j.contains("temperature")) r.sampling.temperature = float(setting_field(j["temperature"], l::kTemperature, "temperature"));
  if (j.contains("top_p")) r.sampling.top_p = float(setting_field(j["top_p"], l::kTopP, "top_p"));
  if (j.contains("top_k")) r.sampling.top_k = int32_t(setting_field(j["top_k"], l::kTopK, "top_k"));
  if (j.contains("stop_sequences")) {
    const json& stops = j["stop_sequences"];
    if (!stops.is_array()) bad("stop_sequences", "stop_sequences: expected a list of strings");
    for (size_t i = 0; i < stops.size(); ++i) {
      if (!stops[i].is_string() || stops[i].get<std::string>().empty()) {
        bad(fmt::format("stop_sequences[{}]", i), fmt::format("stop_sequences[{}]: expected a non-empty string", i));
      }
      r.stop.push_back(stops[i].get<std::string>());
    }
  }
  m.tools = tool_request(j, ordered);
  if (j.contains("stream")) m.stream = bool_field(j["stream"], "stream");
  return m;
}

std::string anthropic_stop_reason(const GenerationResult& result, const std::vector<std::string>& stop, bool called,
                                  std::string* stop_sequence) {
  if (result.stop == StopReason::StopString) {
    // The result does not say which of several ended the text; one alone did.
    if (stop_sequence && stop.size() == 1) *stop_sequence = stop.front();
    return "stop_sequence";
  }
  if (result.stop == StopReason::TokenLimit || result.stop == StopReason::ContextFull) return "max_tokens";
  return called ? "tool_use" : "end_turn";
}

json message_body(const MessagesRequest& m, const std::string& id, const GenerationResult& result) {
  json content = json::array();
  bool called = false;
  if (!m.reading) {
    content.push_back({{"type", "text"}, {"text", result.text}});
  } else {
    const chat::Reply reply = m.reading->read(result.text);
    if (!reply.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", reply.reasoning}, {"signature", ""}});
    if (!reply.content.empty() || (reply.tool_calls.empty() && reply.reasoning.empty())) {
      content.push_back({{"type", "text"}, {"text", reply.content}});
    }
    for (const chat::ToolCall& c : reply.tool_calls) {
      content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", tool_input(c.arguments)}});
    }
    called = !reply.tool_calls.empty();
  }
  std::string stop_sequence;
  const std::string reason = anthropic_stop_reason(result, m.request.stop, called, &stop_sequence);
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", m.model},
          {"content", std::move(content)},
          {"stop_reason", reason},
          {"stop_sequence", stop_sequence.empty() ? json() : json(stop_sequence)},
          {"usage", {{"input_tokens", result.prompt_tokens}, {"output_tokens", result.completion_tokens}}}};
}

MessageStream::MessageStream(const MessagesRequest& m, std::string id)
    : model_(m.model), id_(std::move(id)), stop_(m.request.stop) {
  if (m.reading) parser_.emplace(m.reading->start(&prefilled_));
}

std::string MessageStream::start(int64_t input_tokens) {
  const json message = {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model_},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}};
  std::string out = event("message_start", {{"type", "message_start"}, {"message", message}});
  // A reply that is not read is one text block, open from the start.
  if (!parser_) out += open(Block::Text, {{"type", "text"}, {"text", ""}});
  return out;
}

std::string MessageStream::open(Block block, const json& content_block) {
  std::string out = close();
  block_ = block;
  ++index_;
  return out + event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", content_block}});
}

std::string MessageStream::close() {
  if (block_ == Block::None) return {};
  block_ = Block::None;
  return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string MessageStream::add(std::vector<chat::ReplyEvent> events) {
  if (!prefilled_.empty()) {
    events.insert(events.begin(), std::make_move_iterator(prefilled_.begin()), std::make_move_iterator(prefilled_.end()));
    prefilled_.clear();
  }
  std::string out;
  const auto delta = [&](const json& d) {
    out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  };
  for (const chat::ReplyEvent& e : events) {
    using Kind = chat::ReplyEvent::Kind;
    switch (e.kind) {
      case Kind::Content:
        if (block_ != Block::Text) out += open(Block::Text, {{"type", "text"}, {"text", ""}});
        delta({{"type", "text_delta"}, {"text", e.text}});
        break;
      case Kind::Reasoning:
        if (block_ != Block::Thinking) out += open(Block::Thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
        delta({{"type", "thinking_delta"}, {"thinking", e.text}});
        break;
      case Kind::ToolCallStart:
        called_ = true;
        out += open(Block::ToolUse, {{"type", "tool_use"}, {"id", e.id}, {"name", e.text}, {"input", json::object()}});
        break;
      case Kind::ToolCallArguments: delta({{"type", "input_json_delta"}, {"partial_json", e.text}}); break;
    }
  }
  return out;
}

std::string MessageStream::text(std::string_view piece) {
  if (parser_) return add(parser_->feed(piece));
  if (piece.empty()) return {};
  return event("content_block_delta", {{"type", "content_block_delta"},
                                       {"index", index_},
                                       {"delta", {{"type", "text_delta"}, {"text", std::string(piece)}}}});
}

std::string MessageStream::finish(const GenerationResult& result) {
  std::string out;
  if (parser_) out += add(parser_->finish());
  if (index_ < 0) out += open(Block::Text, {{"type", "text"}, {"text", ""}});
  out += close();
  std::string stop_sequence;
  const std::string reason = anthropic_stop_reason(result, stop_, called_, &stop_sequence);
  return out +
         event("message_delta", {{"type", "message_delta"},
                                 {"delta", {{"stop_reason", reason},
                                            {"stop_sequence", stop_sequence.empty() ? json() : json(stop_sequence)}}},
                                 {"usage", {{"output_tokens", result.completion_tokens}}}}) +
         event("message_stop", {{"type", "message_stop"}});
}

json anthropic_error_body(int status, const std::string& message) {
  const char* type = status == 401 ? "authentication_error"
                     : status == 404 ? "not_found_error"
                     : status == 413 ? "request_too_large"
                     : status == 503 ? "overloaded_error"
                     : status >= 500 ? "api_error"
                                     : "invalid_request_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

}  // namespace nt::server
