// Reading a chat model's reply: its text split into what the user sees
// (content), the model's reasoning, and its tool calls, as the chat
// template's format spells them. The format is recognised from the
// template's Jinja source:
//
//   Hermes / Qwen  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   Llama 3.x      {"name": "f", "parameters": {...}}, alone or after <|python_tag|>
//   Mistral        [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//                  or [TOOL_CALLS]f[ARGS]{...} (templates that write [ARGS])
//   gpt-oss        <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>
//                  (harmony: every message has a channel; "analysis" is reasoning)
//   reasoning      <think>...</think> at the start of the reply (Qwen3, QwQ,
//                  DeepSeek R1), or gpt-oss's analysis channel
//
// One ReplyParser reads a reply whole or piece by piece as it streams, and
// gives the same result either way: text that may begin a call or a marker
// is held back until it is known, so a stream never shows markup it later
// takes back. A tool call's name comes as soon as it is read; its arguments
// (the JSON text as the model wrote it) stream as they come.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace nt::chat {

enum class ToolSyntax { None, Hermes, Llama3, Mistral, Harmony };
enum class ReasoningSyntax { None, ThinkTags, Harmony };

struct ReplyFormat {
  ToolSyntax tools = ToolSyntax::None;
  ReasoningSyntax reasoning = ReasoningSyntax::None;
  bool mistral_args = false;  // Mistral writes [TOOL_CALLS]name[ARGS]{...}, not a JSON list
};

// Recognises the format a chat template writes and reads back.
ReplyFormat detect_reply_format(std::string_view template_source);
// "hermes", "llama3", "mistral", "gpt-oss" or "none".
std::string_view tool_syntax_name(ToolSyntax syntax);

// Special tokens whose text the parser reads: a request parsed with this
// format keeps them in its text (the decoder drops special tokens otherwise).
std::vector<std::string_view> parsed_special_tokens(const ReplyFormat& format);

// Tokens that end a reply in this format besides the model's own, and those
// of the model's that do not: gpt-oss ends a reply with <|return|> or
// <|call|>, while its <|end|> only closes one message of several.
struct StopTokenTexts {
  std::vector<std::string_view> added, removed;
};
StopTokenTexts reply_stop_tokens(const ReplyFormat& format);

// The text that opens a tool call in this format, for writing it at the
// start of a reply: a call of `function`, or of any function when empty.
std::string tool_call_opener(const ReplyFormat& format, std::string_view function);

// The prompt ends inside the model's reasoning: the template opened
// "<think>" for it (DeepSeek R1, QwQ), so the reply starts as reasoning.
bool prompt_opens_reasoning(const ReplyFormat& format, std::string_view prompt);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct Reply {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
};

struct ReplyEvent {
  enum class Kind { Content, Reasoning, ToolCallStart, ToolCallArguments };
  Kind kind = Kind::Content;
  std::string text;  // content, reasoning, arguments; the function's name for ToolCallStart
  size_t index = 0;  // which tool call (ToolCallStart, ToolCallArguments)
  std::string id;    // ToolCallStart: the call's id
};

struct ParseOptions {
  bool tools = true;          // read tool calls (false: what the model writes stays text)
  bool reasoning = true;      // split reasoning off (false: it stays in content, markers and all)
  bool in_reasoning = false;  // the prompt left the reasoning open (prompt_opens_reasoning)
  size_t max_calls = std::numeric_limits<size_t>::max();  // calls past it are read and dropped
  std::function<std::string()> new_id;  // a call's id; unset: 9 random letters and digits
};

class ReplyParser {
 public:
  ReplyParser(ReplyFormat format, ParseOptions options);

  // The next piece of the reply; the events it completes.
  std::vector<ReplyEvent> feed(std::string_view text);
  // The end of the reply: what was held back. A call cut short keeps the
  // arguments read so far; text that only might have begun one is content.
  std::vector<ReplyEvent> finish();

  // Everything the events so far said, put together.
  const Reply& reply() const { return reply_; }

 private:
  enum class State {
    Text,          // content (harmony: text outside any message)
    Think,         // inside <think>
    HermesOpen,    // after <tool_call>: its JSON object next
    HermesClose,   // after the object: </tool_call>
    LlamaNext,     // after <|python_tag|> or a call: another JSON call may follow
    MistralOpen,   // after [TOOL_CALLS]: a list, or a name
    MistralItem,   // in the list: an object, or its end
    MistralNext,   // after an object in the list: ',' or ']'
    MistralName,   // [TOOL_CALLS]name... up to [ARGS] (or [CALL_ID]id[ARGS])
    CallObject,    // {"name": ..., "arguments": ...}: which it is not yet known
    WholeObject,   // an object that must be read whole before it is known to be a call
    Arguments,     // a call's arguments value, streaming
    ObjectRest,    // the rest of a call object after its arguments
    HarmonyHeader, // <|start|>... or <|channel|>... up to <|message|>
    HarmonyBody,   // a harmony message's text
  };
  // Where a call object leads when it ends.
  enum class After { HermesClose, LlamaNext, MistralNext, Text };

  // Runs the states over buf_; at_end: nothing more will come.
  void run(bool at_end);
  // Each returns false when it needs more text to go on.
  bool step_text(bool at_end);
  bool step_think(bool at_end);
  bool step_hermes_open(bool at_end);
  bool step_hermes_close(bool at_end);
  bool step_llama_next(bool at_end);
  bool step_mistral_open(bool at_end);
  bool step_mistral_item(bool at_end);
  bool step_mistral_next(bool at_end);
  bool step_mistral_name(bool at_end);
  bool step_call_object(bool at_end);
  bool step_whole_object(bool at_end);
  bool step_arguments(bool at_end);
  bool step_object_rest(bool at_end);
  bool step_harmony_header(bool at_end);
  bool step_harmony_body(bool at_end);

  void emit_content(std::string_view text);
  void emit_reasoning(std::string_view text);
  void start_call(std::string name);
  void emit_arguments(std::string_view text);
  // A call's arguments ended: on to what follows a call in this syntax.
  void end_call();
  // A call candidate that is not one: what it consumed becomes content.
  void give_up_call();
  void consume(size_t n);
  void begin_candidate(std::string_view marker, After after);
  // Moves to the text after a call or a reasoning block (leading blank space dropped).
  void to_text();

  ReplyFormat format_;
  ParseOptions options_;
  Reply reply_;
  std::vector<ReplyEvent> events_;
  State state_ = State::Text;
  std::string buf_;  // text not yet consumed

  bool content_started_ = false;  // content other than blank space was given
  bool strip_leading_ = false;    // drop blank space before the next content
  std::string candidate_;         // text consumed by a call not yet known to be one
  After after_ = After::Text;
  bool call_dropped_ = false;  // the call past max_calls: read, not told
  size_t calls_ = 0;

  // JSON scanning of the value or object at the head of buf_.
  size_t scan_ = 0;   // bytes of buf_ already scanned
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
  char args_kind_ = 0;  // the arguments value's first character: '{', '[', '"' or another
  bool object_rest_ = false;  // the arguments sit in a call object, whose rest follows them

  // harmony: where the current message's text goes
  enum class Route { Content, Reasoning, Call, Drop };
  Route route_ = Route::Content;
  bool framed_analysis_ = false;  // reasoning inline: the analysis message's markers are content too
};

// Parses a whole reply.
Reply parse_reply(const ReplyFormat& format, const ParseOptions& options, std::string_view text);

}  // namespace nt::chat
