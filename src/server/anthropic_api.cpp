#include "server/anthropic_api.h"

#include <fmt/format.h>

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

}  // namespace

MessagesRequest parse_messages_request(const std::string& body, const std::string& model_id,
                                       const SamplingParams& defaults) {
  const json j = parse_body(body);
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
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string at = fmt::format("messages[{}]", i);
    const json& msg = messages[i];
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) bad(at + ".role", at + ".role: missing");
    const std::string role = msg["role"].get<std::string>();
    if (role != "user" && role != "assistant") {
      bad(at + ".role", fmt::format("{}.role: '{}' is not user or assistant", at, role));
    }
    if (!msg.contains("content")) bad(at + ".content", at + ".content: missing");
    r.messages.push_back({role, blocks_text(msg["content"], at + ".content")});
  }
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
  if (j.contains("tools") && !j["tools"].empty()) bad("tools", "tools: tool use is not supported yet");
  if (j.contains("stream")) m.stream = bool_field(j["stream"], "stream");
  return m;
}

std::string anthropic_stop_reason(const GenerationResult& result, const EngineRequest& request,
                                  std::string* stop_sequence) {
  if (result.stop == StopReason::StopString) {
    // The result does not say which of several ended the text; one alone did.
    if (stop_sequence && request.stop.size() == 1) *stop_sequence = request.stop.front();
    return "stop_sequence";
  }
  return result.stop == StopReason::TokenLimit || result.stop == StopReason::ContextFull ? "max_tokens" : "end_turn";
}

json message_body(const MessagesRequest& m, const std::string& id, const GenerationResult& result) {
  std::string stop_sequence;
  const std::string reason = anthropic_stop_reason(result, m.request, &stop_sequence);
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", m.model},
          {"content", json::array({{{"type", "text"}, {"text", result.text}}})},
          {"stop_reason", reason},
          {"stop_sequence", stop_sequence.empty() ? json() : json(stop_sequence)},
          {"usage", {{"input_tokens", result.prompt_tokens}, {"output_tokens", result.completion_tokens}}}};
}

std::string message_start_events(const MessagesRequest& m, const std::string& id, int64_t input_tokens) {
  const json message = {{"id", id},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", m.model},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}};
  return event("message_start", {{"type", "message_start"}, {"message", message}}) +
         event("content_block_start",
               {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
}

std::string text_delta_event(const std::string& text) {
  return event("content_block_delta",
               {{"type", "content_block_delta"}, {"index", 0}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

std::string message_end_events(const MessagesRequest& m, const GenerationResult& result) {
  std::string stop_sequence;
  const std::string reason = anthropic_stop_reason(result, m.request, &stop_sequence);
  return event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
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
