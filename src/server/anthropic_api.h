// The Anthropic Messages API's shapes (POST /v1/messages): a body checked
// into an engine request, and the reply, whole or as its stream of events.
// Tools come as {name, description, input_schema}; tool_use blocks in the
// history become the assistant's calls and tool_result blocks tool messages.
// A reply read for tool calls and reasoning (server/chat_plan.h) answers with
// thinking, text and tool_use blocks (stop_reason "tool_use"); a stream opens
// each block as it begins (thinking_delta, text_delta, input_json_delta).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "server/chat_plan.h"
#include "server/openai_api.h"

namespace nt::server {

struct MessagesRequest {
  std::string model;
  EngineRequest request;
  bool stream = false;
  ToolRequest tools;
  std::optional<ReplyReading> reading;  // set once the prompt is planned
};

// Throws ApiError (400 naming the field; 404 for another model).
MessagesRequest parse_messages_request(const std::string& body, const std::string& model_id,
                                       const SamplingParams& defaults);

// "end_turn", "max_tokens", "stop_sequence" or, for a reply that called tools, "tool_use";
// the stop sequence that ended the text, if one did.
std::string anthropic_stop_reason(const GenerationResult& result, const std::vector<std::string>& stop, bool called,
                                  std::string* stop_sequence);

nlohmann::json message_body(const MessagesRequest& m, const std::string& id, const GenerationResult& result);

// The stream of one reply as Server-Sent Events text ("event: NAME\ndata: JSON\n\n").
class MessageStream {
 public:
  MessageStream(const MessagesRequest& m, std::string id);
  // message_start; the prompt's length is known only with the result, so 0 until then.
  std::string start(int64_t input_tokens);
  std::string text(std::string_view piece);
  // The open block's end, message_delta and message_stop.
  std::string finish(const GenerationResult& result);

 private:
  enum class Block { None, Text, Thinking, ToolUse };
  std::string open(Block block, const nlohmann::json& content_block);
  std::string close();
  std::string add(std::vector<chat::ReplyEvent> events);

  std::string model_, id_;
  std::vector<std::string> stop_;  // the request's stop sequences
  std::optional<chat::ReplyParser> parser_;
  std::vector<chat::ReplyEvent> prefilled_;
  Block block_ = Block::None;
  int index_ = -1;  // the open (or last) block's
  bool called_ = false;
};

// An error in Anthropic's shape: {"type": "error", "error": {"type", "message"}}.
nlohmann::json anthropic_error_body(int status, const std::string& message);

}  // namespace nt::server
