// The OpenAI HTTP API's shapes: a /v1/chat/completions or /v1/completions
// body checked field by field into engine requests (a bad field is an
// ApiError naming it, checked against the same range table as the flags),
// and the replies, whole or as Server-Sent Events chunks. A chat reply read
// for tool calls and reasoning (server/chat_plan.h) answers with `tool_calls`
// (finish_reason "tool_calls") and `reasoning_content`, streamed as deltas.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/chat_plan.h"

namespace nt::server {

// An HTTP error in the OpenAI shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error")
      : std::runtime_error(std::move(message)), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param, type;
};

nlohmann::json error_body(int status, const std::string& message, const std::string& param = {},
                          const std::string& type = "invalid_request_error");

enum class Endpoint { ChatCompletions, Completions };

struct ApiRequest {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string model;       // as the client named it
  EngineRequest request;   // the first choice's; choice i samples with seed + i
  int choices = 1;         // n
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool seeded = false;         // the client gave a seed: choices are repeatable
  std::string prediction;      // prediction.content: text the output is expected to resemble
  ToolRequest tools;           // tools, tool_choice, parallel_tool_calls, reasoning_format, chat_template_kwargs
  std::optional<ReplyReading> reading;  // set once the prompt is planned: how replies are read
};

// Parses a body; `model_id` is the served model's name ("model" must be it,
// or absent). Throws ApiError (400 naming the field, 404 for another model).
ApiRequest parse_api_request(Endpoint endpoint, const std::string& body, const std::string& model_id,
                             const SamplingParams& defaults, int64_t default_max_tokens);

// OpenAI's finish_reason for a stop: "stop" (end of text, a stop string, a
// cancellation) or "length" (the token limit, a full context); "tool_calls"
// for a reply that called tools and was not cut short.
std::string finish_reason(StopReason stop, bool called = false);

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// The whole reply of a request that did not stream; `tokenizer` spells the
// tokens of its log-probabilities.
nlohmann::json completion_body(const ApiRequest& api, const std::string& id, int64_t created,
                               const std::vector<GenerationResult>& results, const Tokenizer& tokenizer);

// One choice of a streamed reply: its text pieces in, its chunks out. The
// role comes with a chat choice's first chunk; log-probabilities ride on the
// next chunk sent once their tokens' text is in (the text a reply parser
// holds back delays them with it).
class ChoiceStream {
 public:
  ChoiceStream(const ApiRequest& api, std::string id, int64_t created, int index, const Tokenizer& tokenizer);
  std::vector<nlohmann::json> text(std::string_view piece, std::span<const TokenLogprobs> logprobs = {});
  // What was held back, then the chunk with the finish_reason ("error" for a failed choice).
  std::vector<nlohmann::json> finish(const GenerationResult& result);

 private:
  nlohmann::json chunk(nlohmann::json delta, const std::optional<std::string>& finish);
  void add(std::vector<chat::ReplyEvent> events, std::vector<nlohmann::json>& out);
  // Puts the log-probabilities not yet sent on the last of `chunks`, if any.
  void attach_logprobs(std::vector<nlohmann::json>& chunks);

  const Tokenizer& tokenizer_;
  bool chat_;
  std::string model_, id_;
  int64_t created_;
  int index_;
  bool started_ = false;
  bool called_ = false;  // a tool call was streamed
  std::optional<chat::ReplyParser> parser_;
  std::vector<chat::ReplyEvent> prefilled_;  // what the prefill told, sent with the first text
  std::vector<TokenLogprobs> unsent_logprobs_;
};
// The closing chunk of stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk_body(const ApiRequest& api, const std::string& id, int64_t created,
                                const nlohmann::json& usage);

}  // namespace nt::server
