#include "server/chat_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/json_fields.h"

namespace nt::server {

using nlohmann::json;

bool valid_function_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

void read_reasoning_fields(const json& body, ToolRequest& tools) {
  if (body.contains("reasoning_format") && !body["reasoning_format"].is_null()) {
    const std::string format = text_field(body["reasoning_format"], "reasoning_format");
    if (format != "auto" && format != "deepseek" && format != "none") {
      bad_field("reasoning_format", fmt::format("reasoning_format: expected 'auto', 'deepseek' (reasoning apart from "
                                                "the content) or 'none' (left in it), got '{}'",
                                                format));
    }
    tools.reasoning_inline = format == "none";
  }
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    const json& variables = body["chat_template_kwargs"];
    if (!variables.is_object()) {
      bad_field("chat_template_kwargs",
                fmt::format("chat_template_kwargs: expected an object of template variables, got {}", shown(variables)));
    }
    tools.variables = variables.dump();
  }
}

chat::Reply ReplyReading::read(const std::string& text) const { return chat::parse_reply(format, options, prefill + text); }

chat::ReplyParser ReplyReading::start(std::vector<chat::ReplyEvent>* events) const {
  chat::ReplyParser parser(format, options);
  *events = parser.feed(prefill);
  return parser;
}

ChatPlan plan_chat(const ChatTemplate& chat, const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                   const ToolRequest& tools, bool reasoning_inline) {
  const chat::ReplyFormat& format = chat.reply_format();
  const bool reads_tools = format.tools != chat::ToolSyntax::None;
  const auto unreadable = [&](std::string_view what) {
    return fmt::format("{}: the chat template ({}) has no tool-call format this server reads (Hermes/Qwen "
                       "<tool_call>, Llama 3.x JSON, Mistral [TOOL_CALLS] or gpt-oss); give a template that has "
                       "one with --chat-template-file",
                       what, chat.description());
  };
  const bool has_tools = !tools.tools.empty();
  if (has_tools && !reads_tools) throw ApiError(400, unreadable("tools"), "tools");
  if (!reads_tools) {
    for (size_t i = 0; i < messages.size(); ++i) {
      if (!messages[i].tool_calls.empty()) {
        throw ApiError(400, unreadable("messages: the conversation has tool calls, and"), "messages");
      }
    }
  }
  const bool forced = tools.choice == ToolRequest::Choice::Required || tools.choice == ToolRequest::Choice::Named;
  const bool use_tools = has_tools && tools.choice != ToolRequest::Choice::None;

  ChatInputs inputs;
  if (use_tools) inputs.tools = tools.tools.dump();
  inputs.variables = tools.variables;
  ChatPlan plan;
  plan.prompt = chat.apply(messages, true, inputs);

  ReplyReading reading;
  reading.format = format;
  reading.options.tools = use_tools;
  reading.options.reasoning = !tools.reasoning_inline.value_or(reasoning_inline);
  reading.options.in_reasoning = chat::prompt_opens_reasoning(format, plan.prompt);
  if (!tools.parallel) reading.options.max_calls = 1;
  if (forced) {
    // A reply that starts inside the model's reasoning closes it before the call.
    if (reading.options.in_reasoning) reading.prefill = "\n</think>\n\n";
    reading.prefill += chat::tool_call_opener(format, tools.choice == ToolRequest::Choice::Named ? tools.function : "");
    plan.prompt += reading.prefill;
  }
  const bool reads_reasoning = format.reasoning == chat::ReasoningSyntax::Harmony ||
                               (format.reasoning == chat::ReasoningSyntax::ThinkTags && reading.options.reasoning);
  if (!use_tools && !reads_reasoning) return plan;
  for (const std::string_view text : chat::parsed_special_tokens(format)) {
    const int32_t id = tokenizer.vocab().find(text);
    if (id != kNoToken && tokenizer.is_special(id)) plan.kept_special.push_back(id);
  }
  plan.reading = std::move(reading);
  return plan;
}

}  // namespace nt::server
