// Reading replies in each tool-call format, with text as the models write it
// (the formats their templates in tests/data/chat_templates teach them). Each
// reply is parsed whole and streamed in pieces of every size from one byte:
// the result must be the same, and a stream must never show markup.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/reply_parser.h"

namespace nt::chat {
namespace {

ReplyFormat format_of(ToolSyntax tools, ReasoningSyntax reasoning = ReasoningSyntax::None, bool mistral_args = false) {
  return {tools, reasoning, mistral_args};
}

ParseOptions options(bool tools = true, bool reasoning = true, bool in_reasoning = false) {
  ParseOptions o;
  o.tools = tools;
  o.reasoning = reasoning;
  o.in_reasoning = in_reasoning;
  return o;
}

// Ids call0, call1, ... from each parser.
ParseOptions counted(ParseOptions o) {
  auto next = std::make_shared<int>(0);
  o.new_id = [next] { return "call" + std::to_string((*next)++); };
  return o;
}

struct Streamed {
  Reply reply;        // put together from the events
  std::vector<ReplyEvent> events;
};

Streamed stream(const ReplyFormat& format, const ParseOptions& o, std::string_view text, size_t piece) {
  ReplyParser parser(format, counted(o));
  Streamed s;
  const auto take = [&](std::vector<ReplyEvent> events) {
    for (ReplyEvent& e : events) {
      switch (e.kind) {
        case ReplyEvent::Kind::Content: s.reply.content += e.text; break;
        case ReplyEvent::Kind::Reasoning: s.reply.reasoning += e.text; break;
        case ReplyEvent::Kind::ToolCallStart:
          EXPECT_EQ(e.index, s.reply.tool_calls.size()) << "calls start in order";
          s.reply.tool_calls.push_back({e.id, e.text, {}});
          break;
        case ReplyEvent::Kind::ToolCallArguments:
          EXPECT_LT(e.index, s.reply.tool_calls.size()) << "arguments come after their call's start";
          if (e.index < s.reply.tool_calls.size()) s.reply.tool_calls[e.index].arguments += e.text;
          break;
      }
      s.events.push_back(std::move(e));
    }
  };
  for (size_t at = 0; at < text.size(); at += piece) take(parser.feed(text.substr(at, piece)));
  take(parser.finish());
  const Reply& whole = parser.reply();
  EXPECT_EQ(s.reply.content, whole.content);
  EXPECT_EQ(s.reply.reasoning, whole.reasoning);
  EXPECT_EQ(s.reply.tool_calls.size(), whole.tool_calls.size());
  return s;
}

void expect_same(const Reply& got, const Reply& want, const std::string& what) {
  EXPECT_EQ(got.content, want.content) << what;
  EXPECT_EQ(got.reasoning, want.reasoning) << what;
  ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size()) << what;
  for (size_t i = 0; i < want.tool_calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].id, want.tool_calls[i].id) << what;
    EXPECT_EQ(got.tool_calls[i].name, want.tool_calls[i].name) << what;
    EXPECT_EQ(got.tool_calls[i].arguments, want.tool_calls[i].arguments) << what;
  }
}

// Parses whole and in pieces of 1 to 8 bytes and of the whole length; all must give `want`.
// `markup`: strings no content event may show.
void check(const ReplyFormat& format, const ParseOptions& o, std::string_view text, const Reply& want,
           const std::vector<std::string>& markup = {}) {
  expect_same(parse_reply(format, counted(o), text), want, "whole");
  for (size_t piece : {size_t(1), size_t(2), size_t(3), size_t(5), size_t(8), text.size() + 1}) {
    const Streamed s = stream(format, o, text, piece);
    expect_same(s.reply, want, "in pieces of " + std::to_string(piece));
    for (const ReplyEvent& e : s.events) {
      if (e.kind != ReplyEvent::Kind::Content) continue;
      for (const std::string& m : markup) EXPECT_EQ(e.text.find(m), std::string::npos) << e.text << " shows " << m;
    }
  }
}

Reply calls(std::string content, std::vector<std::pair<std::string, std::string>> calls, std::string reasoning = {}) {
  Reply r;
  r.content = std::move(content);
  r.reasoning = std::move(reasoning);
  for (size_t i = 0; i < calls.size(); ++i) r.tool_calls.push_back({"call" + std::to_string(i), calls[i].first, calls[i].second});
  return r;
}

Reply text(std::string content, std::string reasoning = {}) { return calls(std::move(content), {}, std::move(reasoning)); }

// --- Hermes / Qwen ---

const ReplyFormat kHermes = format_of(ToolSyntax::Hermes);
const ReplyFormat kQwen3 = format_of(ToolSyntax::Hermes, ReasoningSyntax::ThinkTags);

TEST(ReplyParser, HermesCall) {
  check(kHermes, options(),
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\u00fcrich\", \"unit\": \"celsius\"}}\n"
        "</tool_call>",
        calls("", {{"get_weather", "{\"city\": \"Z\u00fcrich\", \"unit\": \"celsius\"}"}}), {"<tool", "{\""});
}

TEST(ReplyParser, HermesTextThenTwoCalls) {
  check(kHermes, options(),
        "Let me look both up.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"a \\\"quoted\\\" } brace\", "
        "\"filters\": [\"x\", {\"y\": [1, 2]}]}}\n</tool_call>",
        calls("Let me look both up.",
              {{"get_weather", "{\"city\": \"Paris\"}"},
               {"search", "{\"query\": \"a \\\"quoted\\\" } brace\", \"filters\": [\"x\", {\"y\": [1, 2]}]}"}}),
        {"<tool", "\n"});
}

TEST(ReplyParser, HermesArgumentsFirstOrAsAString) {
  // Hermes 2 Pro writes arguments before the name; some models quote the arguments.
  check(kHermes, options(), "<tool_call>\n{\"arguments\": {\"a\": 1}, \"name\": \"f\"}\n</tool_call>",
        calls("", {{"f", "{\"a\":1}"}}));
  check(kHermes, options(), "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>",
        calls("", {{"f", "{\"a\": 1}"}}));
}

TEST(ReplyParser, HermesTextAfterTheCall) {
  check(kHermes, options(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n\nDone.",
        calls("Done.", {{"f", "{}"}}));
}

TEST(ReplyParser, HermesNotACallStaysText) {
  check(kHermes, options(), "Use <tool_call> tags: <tool_call>oops</tool_call> fine",
        text("Use <tool_call> tags: <tool_call>oops</tool_call> fine"));
  check(kHermes, options(), "<tool_call>\n{\"name\": 3}\n</tool_call>", text("<tool_call>\n{\"name\": 3}\n</tool_call>"));
}

TEST(ReplyParser, HermesCutShort) {
  // The token limit ends a call: it keeps what was read. Text that only might have begun one is text.
  check(kHermes, options(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par",
        calls("", {{"f", "{\"city\": \"Par"}}));
  check(kHermes, options(), "Hi <tool_call>\n{\"na", text("Hi <tool_call>\n{\"na"));
  check(kHermes, options(), "Hi <tool_", text("Hi <tool_"));
}

TEST(ReplyParser, HermesWithToolsOffIsText) {
  const std::string reply = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  check(kHermes, options(false), reply, text(reply));
}

TEST(ReplyParser, ParallelCallsPastTheLimitAreDropped) {
  ParseOptions o = options();
  o.max_calls = 1;
  check(kHermes, o,
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": "
        "{\"x\": 1}}\n</tool_call>",
        calls("", {{"a", "{}"}}));
}

// --- reasoning in <think> ---

TEST(ReplyParser, Qwen3ThinksThenCalls) {
  check(kQwen3, options(),
        "<think>\nThe user wants the weather in Paris.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        calls("", {{"get_weather", "{\"city\": \"Paris\"}"}}, "The user wants the weather in Paris."), {"<"});
}

TEST(ReplyParser, ThinkThenAnswer) {
  check(kQwen3, options(), "<think>\n2 + 2 = 4\n</think>\n\nIt is 4.", text("It is 4.", "2 + 2 = 4"), {"<", "think"});
  check(kQwen3, options(), "<think>\n\n</think>\n\nIt is 4.", text("It is 4."));
}

TEST(ReplyParser, ThinkOpenedByThePrompt) {
  // DeepSeek R1 and QwQ end the prompt with "<think>\n": the reply starts inside it.
  const ReplyFormat r1 = format_of(ToolSyntax::None, ReasoningSyntax::ThinkTags);
  check(r1, options(true, true, true), "Okay, 2 + 2 = 4.\n</think>\n\nThe answer is 4.",
        text("The answer is 4.", "Okay, 2 + 2 = 4."));
  check(r1, options(true, true, true), "Still thinking when the limit came", text("", "Still thinking when the limit came"));
  EXPECT_TRUE(prompt_opens_reasoning(r1, "<\uff5cAssistant\uff5c><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning(r1, "<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning(r1, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

TEST(ReplyParser, ReasoningInlineStaysInTheContent) {
  const std::string reply = "<think>\nhm\n</think>\n\nIt is 4.";
  check(kQwen3, options(true, false), reply, text(reply));
  check(kQwen3, options(true, false, true), "hm\n</think>\n\nIt is 4.", text("hm\n</think>\n\nIt is 4."));
}

TEST(ReplyParser, ThinkOnlyAtTheStart) {
  check(kQwen3, options(), "Say <think> to think.", text("Say <think> to think."));
}

TEST(ReplyParser, PlainTextStreamsWhole) {
  check(kQwen3, options(), "Hello!\nHow are you?\n", text("Hello!\nHow are you?\n"));
  check(kHermes, options(), "  indented", text("  indented"));
}

// --- Llama 3.x ---

const ReplyFormat kLlama3 = format_of(ToolSyntax::Llama3);

TEST(ReplyParser, Llama3JsonCall) {
  check(kLlama3, options(), "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        calls("", {{"get_weather", "{\"city\": \"Paris\"}"}}), {"{"});
  check(kLlama3, options(), "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        calls("", {{"get_weather", "{\"city\": \"Paris\"}"}}), {"<|"});
  check(kLlama3, options(), "\n{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"x\": true}}",
        calls("", {{"f", "{\"x\":true}"}}));
  check(kLlama3, options(),
        "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}",
        calls("", {{"a", "{}"}, {"b", "{\"n\": 2}"}}));
}

TEST(ReplyParser, Llama3TextAndJsonThatIsNoCall) {
  check(kLlama3, options(), "The weather is fine.", text("The weather is fine."));
  check(kLlama3, options(), "{\"answer\": 42}", text("{\"answer\": 42}"));
  check(kLlama3, options(), "Here: {\"name\": \"f\", \"parameters\": {}}", text("Here: {\"name\": \"f\", \"parameters\": {}}"));
  check(kLlama3, options(), "<|python_tag|>print(1)", text("<|python_tag|>print(1)"));
}

// --- Mistral ---

TEST(ReplyParser, MistralList) {
  const ReplyFormat nemo = format_of(ToolSyntax::Mistral);
  check(nemo, options(),
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123def\"}, "
        "{\"name\": \"search\", \"arguments\": {\"query\": \"x]\"}}]",
        calls("", {{"get_weather", "{\"city\": \"Paris\"}"}, {"search", "{\"query\": \"x]\"}"}}), {"[", "{"});
  check(nemo, options(), "Sure.[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]", calls("Sure.", {{"f", "{}"}}));
}

TEST(ReplyParser, MistralNameAndArgs) {
  const ReplyFormat small = format_of(ToolSyntax::Mistral, ReasoningSyntax::None, true);
  check(small, options(), "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
        calls("", {{"get_weather", "{\"city\": \"Paris\"}"}}), {"[", "{"});
  check(small, options(),
        "[TOOL_CALLS]get_weather[CALL_ID]abc123def[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]search[ARGS]{\"query\": \"q\"}",
        calls("", {{"get_weather", "{\"city\": \"Paris\"}"}, {"search", "{\"query\": \"q\"}"}}));
  check(small, options(), "[TOOL_CALLS]not a name[ARGS]{}", text("[TOOL_CALLS]not a name[ARGS]{}"));
}

// --- gpt-oss (harmony) ---

const ReplyFormat kHarmony = format_of(ToolSyntax::Harmony, ReasoningSyntax::Harmony);

TEST(ReplyParser, HarmonyAnalysisThenFinal) {
  check(kHarmony, options(),
        "<|channel|>analysis<|message|>User says hi. Reply politely.<|end|><|start|>assistant<|channel|>final"
        "<|message|>Hello! How can I help?",
        text("Hello! How can I help?", "User says hi. Reply politely."), {"<|", "assistant", "final"});
}

TEST(ReplyParser, HarmonyCall) {
  // <|call|> ends the reply (a stop token), so the text ends with the arguments.
  check(kHarmony, options(),
        "<|channel|>analysis<|message|>Need weather for Paris.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
        calls("", {{"get_weather", "{\"city\":\"Paris\"}"}}, "Need weather for Paris."), {"<|"});
  check(kHarmony, options(), "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",
        calls("", {{"f", "{}"}}));
}

TEST(ReplyParser, HarmonyReasoningInline) {
  check(kHarmony, options(true, false),
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi.",
        text("<|channel|>analysis<|message|>Think.<|end|>Hi."));
}

// --- openers and formats ---

TEST(ReplyParser, AnOpenerWrittenAheadIsReadAsTheStartOfACall) {
  struct Case {
    ReplyFormat format;
    std::string model_wrote;
  };
  const Case cases[] = {
      {kHermes, "{\"city\": \"Paris\"}}\n</tool_call>"},
      {kLlama3, "{\"city\": \"Paris\"}}"},
      {format_of(ToolSyntax::Mistral), "{\"city\": \"Paris\"}}]"},
      {format_of(ToolSyntax::Mistral, ReasoningSyntax::None, true), "{\"city\": \"Paris\"}"},
      {kHarmony, "{\"city\": \"Paris\"}"},
  };
  for (const Case& c : cases) {
    const std::string opener = tool_call_opener(c.format, "get_weather");
    check(c.format, options(), opener + c.model_wrote, calls("", {{"get_weather", "{\"city\": \"Paris\"}"}}));
    const std::string any = tool_call_opener(c.format, "");
    EXPECT_EQ(opener.rfind(any, 0), 0u) << "a call of any function opens as one of a named function: " << any;
  }
}

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(NT_SOURCE_DIR) + "/tests/data/chat_templates/" + name);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

TEST(ReplyParser, FormatsOfRealTemplates) {
  struct Case {
    const char* file;
    ToolSyntax tools;
    ReasoningSyntax reasoning;
  };
  const Case cases[] = {
      {"qwen2.5-instruct.jinja", ToolSyntax::Hermes, ReasoningSyntax::None},
      {"qwen3-0.6b.jinja", ToolSyntax::Hermes, ReasoningSyntax::ThinkTags},
      {"qwq-32b.jinja", ToolSyntax::Hermes, ReasoningSyntax::ThinkTags},
      {"hermes-3-llama-3.1-8b-tool-use.jinja", ToolSyntax::Hermes, ReasoningSyntax::None},
      {"llama-3.2-3b-instruct.jinja", ToolSyntax::Llama3, ReasoningSyntax::None},
      {"llama-3.3-70b-instruct.jinja", ToolSyntax::Llama3, ReasoningSyntax::None},
      {"mistral-nemo-instruct-2407.jinja", ToolSyntax::Mistral, ReasoningSyntax::None},
      {"mistral-small-3.2-24b-instruct-2506.jinja", ToolSyntax::Mistral, ReasoningSyntax::None},
      {"gpt-oss-120b.jinja", ToolSyntax::Harmony, ReasoningSyntax::Harmony},
      {"deepseek-r1-distill-qwen-32b.jinja", ToolSyntax::None, ReasoningSyntax::ThinkTags},
      {"glm-4.5.jinja", ToolSyntax::None, ReasoningSyntax::ThinkTags},
      {"llama-3-8b-instruct.jinja", ToolSyntax::None, ReasoningSyntax::None},
      {"smollm2-instruct.jinja", ToolSyntax::None, ReasoningSyntax::None},
      {"firefunction-v2.jinja", ToolSyntax::None, ReasoningSyntax::None},
  };
  for (const Case& c : cases) {
    const ReplyFormat f = detect_reply_format(read_template(c.file));
    EXPECT_EQ(f.tools, c.tools) << c.file;
    EXPECT_EQ(f.reasoning, c.reasoning) << c.file;
  }
  EXPECT_FALSE(detect_reply_format(read_template("mistral-nemo-instruct-2407.jinja")).mistral_args);
  EXPECT_TRUE(detect_reply_format(read_template("mistral-small-3.2-24b-instruct-2506.jinja")).mistral_args);
}

TEST(ReplyParser, HarmonyStopsOnCallAndReturnNotEnd) {
  const StopTokenTexts stops = reply_stop_tokens(kHarmony);
  EXPECT_EQ(stops.added, (std::vector<std::string_view>{"<|return|>", "<|call|>"}));
  EXPECT_EQ(stops.removed, (std::vector<std::string_view>{"<|end|>"}));
  EXPECT_TRUE(reply_stop_tokens(kHermes).added.empty());
}

TEST(ReplyParser, RandomIdsAreNineLettersAndDigits) {
  ParseOptions o;
  const Reply r = parse_reply(kHermes, o, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].id.size(), 9u);  // Mistral's templates take no other
  for (char c : r.tool_calls[0].id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)));
}

}  // namespace
}  // namespace nt::chat
