// Tools and reasoning in the server's two APIs, without a model: requests are
// parsed and planned against real chat templates (tests/data/chat_templates)
// on synthetic vocabularies, and replies are built from model output written
// as the models write it, whole and streamed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "server/anthropic_api.h"
#include "server/chat_plan.h"
#include "server/openai_api.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/token_stream_decoder.h"

namespace nt::server {
namespace {

using nlohmann::json;

std::string template_path(const std::string& name) {
  return std::string(NT_SOURCE_DIR) + "/tests/data/chat_templates/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const Tokenizer& smollm2() {
  static const Tokenizer tok(make_synthetic_bpe_vocab(49152, SyntheticVocabStyle::SmolLM2));
  return tok;
}

// The Llama 3 synthetic vocabulary with gpt-oss's special tokens in place of reserved ones, and its template.
const Tokenizer& harmony_vocab() {
  static const Tokenizer tok = [] {
    VocabSpec spec = make_synthetic_bpe_vocab(128256, SyntheticVocabStyle::Llama3);
    int k = 10;
    for (const char* name : {"<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"}) {
      const auto found = std::find(spec.tokens.begin(), spec.tokens.end(), fmt::format("<|reserved_special_token_{}|>", k++));
      EXPECT_NE(found, spec.tokens.end());
      *found = name;
    }
    spec.eot_id = int32_t(std::find(spec.tokens.begin(), spec.tokens.end(), "<|end|>") - spec.tokens.begin());
    spec.chat_template = read_text(template_path("gpt-oss-120b.jinja"));
    return Tokenizer(std::move(spec));
  }();
  return tok;
}

ChatTemplate template_for(const Tokenizer& tok, const std::string& file) {
  return ChatTemplate::for_tokenizer(tok, {}, template_path(file));
}

const std::string kTools = R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
  "required": ["city"]}}}, {"type": "function", "function": {"name": "search", "description": "Search", "parameters": {"type": "object",
  "properties": {"query": {"type": "string"}}}}})";

std::string chat_body(const std::string& extra = {}) {
  return R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [)" + kTools + "]" + extra + "}";
}

ApiRequest parse(const std::string& body) {
  return parse_api_request(Endpoint::ChatCompletions, body, "m", SamplingParams{}, 64);
}

// Plans the request against the template as the server does.
ApiRequest planned(const Tokenizer& tok, const ChatTemplate& chat, const std::string& body, bool inline_reasoning = false) {
  ApiRequest api = parse(body);
  ChatPlan plan = plan_chat(chat, tok, api.request.messages, api.tools, inline_reasoning);
  api.request.chat_prompt = plan.prompt;
  api.request.kept_special = plan.kept_special;
  api.reading = plan.reading;
  return api;
}

GenerationResult result(std::string text, StopReason stop = StopReason::StopToken) {
  GenerationResult r;
  r.text = std::move(text);
  r.stop = stop;
  r.prompt_tokens = 10;
  r.completion_tokens = 5;
  return r;
}

// The param an ApiError names, or "" when none is thrown.
template <typename F>
std::string refused(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "";
}

const std::string kQwenCall =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";

// --- the prompt ---

TEST(ServerTools, ToolsRenderInTheClientsOrder) {
  const ChatTemplate chat = template_for(smollm2(), "qwen2.5-instruct.jinja");
  const ApiRequest api = planned(smollm2(), chat, chat_body());
  const std::string& prompt = *api.request.chat_prompt;
  EXPECT_NE(prompt.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
                        "\"Weather now\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\""),
            std::string::npos)
      << prompt;
  EXPECT_TRUE(prompt.ends_with("<|im_start|>assistant\n"));
  ASSERT_TRUE(api.reading);
  EXPECT_EQ(api.reading->format.tools, chat::ToolSyntax::Hermes);
  EXPECT_TRUE(api.reading->prefill.empty());
}

TEST(ServerTools, HistoryWithCallsAndResultsRenders) {
  const ChatTemplate chat = template_for(smollm2(), "qwen2.5-instruct.jinja");
  const std::string body = R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call00001", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
    {"role": "tool", "tool_call_id": "call00001", "content": "21 C, clear"}], "tools": [)" + kTools + "]}";
  const std::string prompt = *planned(smollm2(), chat, body).request.chat_prompt;
  // The arguments render as the object they spell, as the template's tojson expects.
  EXPECT_NE(prompt.find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"Paris\", \"unit\": \"celsius\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
                        "21 C, clear\n</tool_response><|im_end|>\n"),
            std::string::npos)
      << prompt;
}

TEST(ServerTools, ToolChoiceWritesTheStartOfTheCall) {
  const ChatTemplate chat = template_for(smollm2(), "qwen2.5-instruct.jinja");
  const ApiRequest named =
      planned(smollm2(), chat, chat_body(R"(, "tool_choice": {"type": "function", "function": {"name": "search"}})"));
  EXPECT_TRUE(named.request.chat_prompt->ends_with(
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"search\", \"arguments\": "));
  // The model writes the arguments on: the reply reads as a call of the named function.
  const json body = completion_body(named, "id", 0, {result("{\"query\": \"paris\"}}\n</tool_call>")}, smollm2());
  const json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "search");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"query\": \"paris\"}");

  const ApiRequest required = planned(smollm2(), chat, chat_body(R"(, "tool_choice": "required")"));
  EXPECT_TRUE(required.request.chat_prompt->ends_with("<tool_call>\n{\"name\": \""));

  const ApiRequest none = planned(smollm2(), chat, chat_body(R"(, "tool_choice": "none")"));
  EXPECT_EQ(none.request.chat_prompt->find("<tools>"), std::string::npos);
  EXPECT_FALSE(none.reading);  // no tools and no reasoning to read
}

TEST(ServerTools, WhatTheTemplateCannotServeIsRefused) {
  const ChatTemplate smol = ChatTemplate::for_tokenizer(smollm2());  // SmolLM2's own: no tools
  EXPECT_EQ(refused([&] { planned(smollm2(), smol, chat_body()); }), "tools");
  const std::string history = R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls":
    [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})";
  EXPECT_EQ(refused([&] { planned(smollm2(), smol, history); }), "messages");
  const ChatTemplate builtin = ChatTemplate::for_tokenizer(smollm2(), "chatml");
  EXPECT_EQ(refused([&] { planned(smollm2(), builtin, chat_body()); }), "tools");
}

TEST(ServerTools, BadToolFieldsAreNamed) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "code_interpreter"}]})", "tools[0].type"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       "tools[0].function.name"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f",
        "parameters": 3}}]})",
       "tools[0].function.parameters"},
      {chat_body(R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})"), "tool_choice"},
      {chat_body(R"(, "tool_choice": "sometimes")"), "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice"},
      {chat_body(R"(, "parallel_tool_calls": "no")"), "parallel_tool_calls"},
      {chat_body(R"(, "reasoning_format": "hidden")"), "reasoning_format"},
      {chat_body(R"(, "chat_template_kwargs": [1])"), "chat_template_kwargs"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].tool_call_id"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "messages[0].tool_calls"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
  };
  for (const auto& [body, param] : cases) EXPECT_EQ(refused([&] { parse(body); }), param) << body;
  EXPECT_EQ(refused([&] {
              parse_api_request(Endpoint::Completions, R"({"prompt": "x", "tools": []})", "m", SamplingParams{}, 64);
            }),
            "tools");
}

// --- OpenAI replies ---

TEST(ServerTools, ACallInTheReplyBecomesToolCalls) {
  const ChatTemplate chat = template_for(smollm2(), "qwen2.5-instruct.jinja");
  const ApiRequest api = planned(smollm2(), chat, chat_body());
  const json body = completion_body(api, "chatcmpl-1", 0, {result("Let me check.\n" + kQwenCall)}, smollm2());
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Let me check.");
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().size(), 9u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], "{\"city\": \"Paris\", \"unit\": \"celsius\"}");

  const json only = completion_body(api, "chatcmpl-1", 0, {result(kQwenCall)}, smollm2());
  EXPECT_TRUE(only["choices"][0]["message"]["content"].is_null());
  const json cut = completion_body(api, "chatcmpl-1", 0, {result(kQwenCall.substr(0, 60), StopReason::TokenLimit)}, smollm2());
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "length");
  const json plain = completion_body(api, "chatcmpl-1", 0, {result("It is sunny.")}, smollm2());
  EXPECT_EQ(plain["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "It is sunny."}}));
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
}

// Streams `text` in pieces of `piece` bytes; the chunks.
std::vector<json> stream_chunks(const ApiRequest& api, const std::string& text, size_t piece, StopReason stop) {
  ChoiceStream stream(api, "chatcmpl-1", 0, 0, smollm2());
  std::vector<json> chunks;
  for (size_t at = 0; at < text.size(); at += piece) {
    for (json& c : stream.text(std::string_view(text).substr(at, piece))) chunks.push_back(std::move(c));
  }
  for (json& c : stream.finish(result(text, stop))) chunks.push_back(std::move(c));
  return chunks;
}

TEST(ServerTools, AStreamedCallComesAsToolCallDeltas) {
  const ChatTemplate chat = template_for(smollm2(), "qwen2.5-instruct.jinja");
  const ApiRequest api = planned(smollm2(), chat, chat_body());
  for (size_t piece : {1, 4, 1000}) {
    const std::vector<json> chunks = stream_chunks(api, "Let me check.\n" + kQwenCall, piece, StopReason::StopToken);
    std::string content, arguments, id;
    int starts = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const json& delta = chunks[i]["choices"][0]["delta"];
      EXPECT_EQ(delta.contains("role"), i == 0);
      if (delta.contains("content")) content += delta["content"].get<std::string>();
      if (!delta.contains("tool_calls")) continue;
      const json& call = delta["tool_calls"][0];
      EXPECT_EQ(call["index"], 0);
      if (call.contains("id")) {
        ++starts;
        id = call["id"];
        EXPECT_EQ(call["type"], "function");
        EXPECT_EQ(call["function"]["name"], "get_weather");
        EXPECT_TRUE(arguments.empty());
      }
      arguments += call["function"]["arguments"].get<std::string>();
    }
    EXPECT_EQ(content, "Let me check.");
    EXPECT_EQ(starts, 1);
    EXPECT_EQ(id.size(), 9u);
    EXPECT_EQ(arguments, "{\"city\": \"Paris\", \"unit\": \"celsius\"}");
    EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
  }
}

TEST(ServerTools, PlainStreamsAreAsBefore) {
  ApiRequest api = parse(R"({"messages": [{"role": "user", "content": "x"}]})");
  const std::vector<json> chunks = stream_chunks(api, "Hello there", 5, StopReason::StopToken);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", "Hello"}}));
  EXPECT_EQ(chunks[1]["choices"][0]["delta"], (json{{"content", " ther"}}));
  EXPECT_EQ(chunks[3]["choices"][0]["delta"], json::object());
  EXPECT_EQ(chunks[3]["choices"][0]["finish_reason"], "stop");
  const std::vector<json> empty = stream_chunks(api, "", 5, StopReason::StopToken);
  ASSERT_EQ(empty.size(), 2u);
  EXPECT_EQ(empty[0]["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
}

TEST(ServerTools, ReasoningGoesToReasoningContent) {
  // QwQ's prompt opens <think>: the reply starts as reasoning.
  const ChatTemplate chat = template_for(smollm2(), "qwq-32b.jinja");
  const std::string body = R"({"messages": [{"role": "user", "content": "2+2?"}]})";
  const ApiRequest api = planned(smollm2(), chat, body);
  ASSERT_TRUE(api.reading);
  EXPECT_TRUE(api.reading->options.in_reasoning);
  const std::string reply = "Two and two.\n</think>\n\nFour.";
  const json message = completion_body(api, "c", 0, {result(reply)}, smollm2())["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Two and two.");
  EXPECT_EQ(message["content"], "Four.");
  std::string reasoning, content;
  for (const json& c : stream_chunks(api, reply, 3, StopReason::StopToken)) {
    const json& delta = c["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, "Two and two.");
  EXPECT_EQ(content, "Four.");
  // Inline, by the request or the server's default.
  const ApiRequest kept = planned(smollm2(), chat, R"({"messages": [{"role": "user", "content": "2+2?"}],
    "reasoning_format": "none"})");
  EXPECT_FALSE(kept.reading);
  EXPECT_EQ(completion_body(kept, "c", 0, {result(reply)}, smollm2())["choices"][0]["message"]["content"], reply);
  EXPECT_FALSE(planned(smollm2(), chat, body, true).reading);
}

TEST(ServerTools, TemplateVariablesReachTheTemplate) {
  const ChatTemplate chat = template_for(smollm2(), "qwen3-0.6b.jinja");
  const ApiRequest api = planned(smollm2(), chat, R"({"messages": [{"role": "user", "content": "Hi"}],
    "chat_template_kwargs": {"enable_thinking": false}})");
  EXPECT_TRUE(api.request.chat_prompt->ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

// --- gpt-oss ---

TEST(ServerTools, HarmonyStopsAndKeepsItsMarkers) {
  const Tokenizer& tok = harmony_vocab();
  const ChatTemplate chat = ChatTemplate::for_tokenizer(tok);
  ASSERT_EQ(chat.reply_format().tools, chat::ToolSyntax::Harmony);
  const int32_t end = tok.vocab().find("<|end|>"), call = tok.vocab().find("<|call|>"),
                ret = tok.vocab().find("<|return|>"), channel = tok.vocab().find("<|channel|>");
  const std::vector<int32_t> stops = chat_stop_tokens(tok, chat);
  EXPECT_EQ(std::count(stops.begin(), stops.end(), end), 0) << "<|end|> closes a message, not the reply";
  EXPECT_EQ(std::count(stops.begin(), stops.end(), call), 1);
  EXPECT_EQ(std::count(stops.begin(), stops.end(), ret), 1);

  const ApiRequest api = planned(tok, chat, chat_body());
  EXPECT_NE(api.request.chat_prompt->find("type get_weather = (_: {"), std::string::npos);
  const auto& kept = api.request.kept_special;
  EXPECT_NE(std::find(kept.begin(), kept.end(), channel), kept.end());
  // The decoder shows a kept special token and still drops the others.
  TokenStreamDecoder decoder(tok);
  decoder.keep_special(kept);
  EXPECT_EQ(decoder.push(channel), "<|channel|>");
  EXPECT_EQ(decoder.push(tok.vocab().find("<|python_tag|>")), "");

  const json message = completion_body(api, "c", 0, {result(
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}")}, smollm2())["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Need the weather.");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
}

// --- Anthropic ---

const std::string kAnthropicTools = R"("tools": [{"name": "get_weather", "description": "Weather now",
  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])";

MessagesRequest planned_messages(const ChatTemplate& chat, const std::string& body) {
  MessagesRequest m = parse_messages_request(body, "m", SamplingParams{});
  ChatPlan plan = plan_chat(chat, smollm2(), m.request.messages, m.tools, false);
  m.request.chat_prompt = plan.prompt;
  m.reading = plan.reading;
  return m;
}

TEST(ServerTools, AnthropicToolUseAndResultsRender) {
  const ChatTemplate chat = template_for(smollm2(), "qwen2.5-instruct.jinja");
  const MessagesRequest m = planned_messages(chat, R"({"max_tokens": 64, )" + kAnthropicTools + R"(,
    "messages": [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "21 C"},
        {"type": "text", "text": "And tomorrow?"}]}]})");
  const auto& messages = m.request.messages;
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[1].tool_calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(messages[2].role, "tool");
  EXPECT_EQ(messages[2].tool_call_id, "toolu_01");
  EXPECT_EQ(messages[2].name, "get_weather");
  EXPECT_EQ(messages[3].content, "And tomorrow?");
  const std::string& prompt = *m.request.chat_prompt;
  EXPECT_NE(prompt.find("{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather "
                        "now\", \"parameters\": {\"type\": \"object\""),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<tool_response>\n21 C\n</tool_response>"), std::string::npos) << prompt;
}

TEST(ServerTools, AnthropicReplyHasToolUseBlocks) {
  const ChatTemplate chat = template_for(smollm2(), "qwen2.5-instruct.jinja");
  const MessagesRequest m = planned_messages(chat, R"({"max_tokens": 64, )" + kAnthropicTools + R"(,
    "messages": [{"role": "user", "content": "Weather in Paris?"}]})");
  const json body = message_body(m, "msg_1", result("Let me check.\n" + kQwenCall));
  EXPECT_EQ(body["stop_reason"], "tool_use");
  ASSERT_EQ(body["content"].size(), 2u);
  EXPECT_EQ(body["content"][0], (json{{"type", "text"}, {"text", "Let me check."}}));
  EXPECT_EQ(body["content"][1]["type"], "tool_use");
  EXPECT_EQ(body["content"][1]["name"], "get_weather");
  EXPECT_EQ(body["content"][1]["input"], (json{{"city", "Paris"}, {"unit", "celsius"}}));

  // The stream: message_start, a text block, a tool_use block with its input in pieces, the end.
  MessageStream stream(m, "msg_1");
  std::string events = stream.start(10);
  const std::string reply = "Let me check.\n" + kQwenCall;
  for (size_t at = 0; at < reply.size(); at += 7) events += stream.text(reply.substr(at, 7));
  events += stream.finish(result(reply));
  std::vector<json> data;
  std::string partial_json;
  for (size_t at = events.find("data: "); at != std::string::npos; at = events.find("data: ", at + 1)) {
    data.push_back(json::parse(events.substr(at + 6, events.find('\n', at) - at - 6)));
    if (data.back()["type"] == "content_block_delta" && data.back()["delta"]["type"] == "input_json_delta") {
      EXPECT_EQ(data.back()["index"], 1);
      partial_json += data.back()["delta"]["partial_json"].get<std::string>();
    }
  }
  EXPECT_EQ(json::parse(partial_json), (json{{"city", "Paris"}, {"unit", "celsius"}}));
  std::vector<std::string> kinds;
  for (const json& d : data) {
    if (d["type"] != "content_block_delta") kinds.push_back(d["type"]);
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"message_start", "content_block_start", "content_block_stop",
                                             "content_block_start", "content_block_stop", "message_delta",
                                             "message_stop"}));
  EXPECT_EQ(data[1]["content_block"]["type"], "text");
  EXPECT_EQ(data.back().dump(), R"({"type":"message_stop"})");
  for (const json& d : data) {
    if (d["type"] == "message_delta") {
      EXPECT_EQ(d["delta"]["stop_reason"], "tool_use");
    }
    if (d["type"] == "content_block_start" && d["index"] == 1) {
      EXPECT_EQ(d["content_block"]["type"], "tool_use");
      EXPECT_EQ(d["content_block"]["name"], "get_weather");
    }
  }
}

TEST(ServerTools, AnthropicThinkingBlocks) {
  const ChatTemplate chat = template_for(smollm2(), "qwq-32b.jinja");
  const MessagesRequest m = planned_messages(chat, R"({"max_tokens": 64, "messages": [{"role": "user", "content": "2+2?"}]})");
  const json body = message_body(m, "msg_1", result("Two and two.\n</think>\n\nFour."));
  EXPECT_EQ(body["content"][0], (json{{"type", "thinking"}, {"thinking", "Two and two."}, {"signature", ""}}));
  EXPECT_EQ(body["content"][1], (json{{"type", "text"}, {"text", "Four."}}));
  EXPECT_EQ(body["stop_reason"], "end_turn");
}

TEST(ServerTools, AnthropicBadToolFieldsAreRefused) {
  const std::string messages = R"("messages": [{"role": "user", "content": "x"}])";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"max_tokens": 8, "tools": [{"type": "web_search_20250305", "name": "web_search"}], )" + messages + "}",
       "tools[0].type"},
      {R"({"max_tokens": 8, "tools": [{"name": "f"}], )" + messages + "}", "tools[0].input_schema"},
      {R"({"max_tokens": 8, "tool_choice": {"type": "any"}, )" + messages + "}", "tool_choice"},
      {R"({"max_tokens": 8, )" + kAnthropicTools + R"(, "tool_choice": {"type": "tool", "name": "g"}, )" + messages + "}",
       "tool_choice"},
      {R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f",
        "input": {}}]}]})",
       "messages[0].content[0].type"},
      {R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})",
       "messages[0].content[0]"},
  };
  for (const auto& [body, param] : cases) {
    EXPECT_EQ(refused([&] { parse_messages_request(body, "m", SamplingParams{}); }), param) << body;
  }
}

}  // namespace
}  // namespace nt::server
