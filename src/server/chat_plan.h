// A chat request's prompt and how its reply is read: the tools and
// tool_choice of either API (once read into one shape), rendered by the
// model's chat template, and the reply format the template implies for tool
// calls and reasoning (chat/reply_parser.h).
//
// tool_choice "required" and a named function are honoured by writing the
// opening of a call at the start of the reply (the model writes the rest;
// its output is not constrained); "none" leaves the tools out of the prompt
// and reads no calls.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chat/reply_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nt::server {

// What a chat request asks of tools and reasoning.
struct ToolRequest {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // [{"type": "function", "function": {...}}]
  enum class Choice { Auto, None, Required, Named };
  Choice choice = Choice::Auto;
  std::string function;  // Named: the function
  bool parallel = true;  // false: a reply makes one call at most
  std::optional<bool> reasoning_inline;  // reasoning left in the content; unset: the server's default
  std::string variables;  // chat_template_kwargs: a JSON object of template variables; empty: none
};

// A function name as OpenAI takes it: letters, digits, '_' and '-', 1 to 64 of them.
bool valid_function_name(const std::string& name);

// The request fields both APIs share: reasoning_format ("auto", "deepseek" or
// "none") and chat_template_kwargs (an object). ApiError naming the field.
void read_reasoning_fields(const nlohmann::json& body, ToolRequest& tools);

// How one request's replies are read.
struct ReplyReading {
  chat::ReplyFormat format;
  chat::ParseOptions options;
  std::string prefill;  // the start of the reply the prompt already wrote (tool_choice)

  // The reply, parsed whole from the model's text.
  chat::Reply read(const std::string& text) const;
  // A parser for a streamed reply, given the prefill; the events that gives.
  chat::ReplyParser start(std::vector<chat::ReplyEvent>* events) const;
};

struct ChatPlan {
  std::string prompt;                   // rendered, with the prefill
  std::optional<ReplyReading> reading;  // unset: the reply is content as the model wrote it
  std::vector<int32_t> kept_special;    // special tokens the reading needs in the text
};

// Renders the conversation with the request's tools. ApiError (400 naming the
// field) for tools, tool calls or a tool_choice the template cannot serve;
// nt::Error for a conversation the template itself refuses.
ChatPlan plan_chat(const ChatTemplate& chat, const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                   const ToolRequest& tools, bool reasoning_inline);

}  // namespace nt::server
