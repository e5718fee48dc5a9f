// The Anthropic Messages API's shapes (POST /v1/messages): a body checked
// into an engine request, and the reply, whole or as its stream of events.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "server/openai_api.h"

namespace nt::server {

struct MessagesRequest {
  std::string model;
  EngineRequest request;
  bool stream = false;
};

// Throws ApiError (400 naming the field; 404 for another model).
MessagesRequest parse_messages_request(const std::string& body, const std::string& model_id,
                                       const SamplingParams& defaults);

// "end_turn", "max_tokens" or "stop_sequence"; the stop sequence that ended the text, if one did.
std::string anthropic_stop_reason(const GenerationResult& result, const EngineRequest& request,
                                  std::string* stop_sequence);

nlohmann::json message_body(const MessagesRequest& m, const std::string& id, const GenerationResult& result);

// The stream's events as Server-Sent Events text ("event: NAME\ndata: JSON\n\n").
std::string message_start_events(const MessagesRequest& m, const std::string& id, int64_t input_tokens);
std::string text_delta_event(const std::string& text);
std::string message_end_events(const MessagesRequest& m, const GenerationResult& result);

// An error in Anthropic's shape: {"type": "error", "error": {"type", "message"}}.
nlohmann::json anthropic_error_body(int status, const std::string& message);

}  // namespace nt::server
