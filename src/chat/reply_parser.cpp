#include "chat/reply_parser.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <random>

namespace nt::chat {
namespace {

constexpr std::string_view kToolCall = "<tool_call>", kToolCallEnd = "</tool_call>";
constexpr std::string_view kThink = "<think>", kThinkEnd = "</think>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]", kMistralArgs = "[ARGS]", kMistralCallId = "[CALL_ID]";
constexpr std::string_view kChannel = "<|channel|>", kMessage = "<|message|>", kStart = "<|start|>",
                           kEnd = "<|end|>", kCall = "<|call|>", kReturn = "<|return|>", kConstrain = "<|constrain|>";
// A name longer than this after [TOOL_CALLS], or a harmony header, is not one.
constexpr size_t kMaxHeader = 512;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

size_t trailing_space(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && is_space(s[s.size() - 1 - n])) ++n;
  return n;
}

size_t leading_space(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && is_space(s[n])) ++n;
  return n;
}

// The longest end of `s` that begins one of the markers (and is not all of it).
size_t partial_marker(std::string_view s, const std::vector<std::string_view>& markers) {
  size_t best = 0;
  for (const std::string_view m : markers) {
    for (size_t n = std::min(s.size(), m.size() - 1); n > best; --n) {
      if (s.substr(s.size() - n) == m.substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

struct Found {
  size_t at = std::string_view::npos;
  std::string_view marker;
};

Found find_first(std::string_view s, const std::vector<std::string_view>& markers) {
  Found f;
  for (const std::string_view m : markers) {
    const size_t at = s.find(m);
    if (at < f.at) f = {at, m};
  }
  return f;
}

// `s` begins `what`, or is cut short inside it.
bool starts_or_cut(std::string_view s, std::string_view what) {
  const size_t n = std::min(s.size(), what.size());
  return s.substr(0, n) == what.substr(0, n);
}

std::string random_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string id(9, ' ');
  for (char& c : id) c = kAlphabet[pick(rng)];
  return id;
}

// The head of a call object whose name comes first:
//   {"name": "NAME", "arguments": (or "parameters": )
enum class Head { Partial, Match, NoMatch };

Head match_call_head(std::string_view s, size_t* end, std::string* name) {
  size_t i = 0;
  const auto space = [&] {
    while (i < s.size() && is_space(s[i])) ++i;
  };
  // 1: read; 0: the text ends inside it; -1: something else is there.
  const auto literal = [&](std::string_view l) {
    if (!starts_or_cut(s.substr(i), l)) return -1;
    if (s.size() - i < l.size()) return 0;
    i += l.size();
    return 1;
  };
  for (const std::string_view part : {std::string_view("{"), std::string_view("\"name\""), std::string_view(":")}) {
    space();
    if (const int r = literal(part); r <= 0) return r == 0 ? Head::Partial : Head::NoMatch;
  }
  space();
  if (i == s.size()) return Head::Partial;
  if (s[i] != '"') return Head::NoMatch;
  const size_t quote = i++;
  for (bool escaped = false; i < s.size() && (escaped || s[i] != '"'); ++i) escaped = !escaped && s[i] == '\\';
  if (i == s.size()) return Head::Partial;
  ++i;
  const nlohmann::json decoded = nlohmann::json::parse(s.substr(quote, i - quote), nullptr, false);
  if (!decoded.is_string() || decoded.get<std::string>().empty()) return Head::NoMatch;
  space();
  if (const int r = literal(","); r <= 0) return r == 0 ? Head::Partial : Head::NoMatch;
  space();
  const std::string_view rest = s.substr(i);
  const bool arguments = starts_or_cut(rest, "\"arguments\""), parameters = starts_or_cut(rest, "\"parameters\"");
  if (!arguments && !parameters) return Head::NoMatch;
  if (const int r = literal(arguments ? "\"arguments\"" : "\"parameters\""); r <= 0) {
    return r == 0 ? Head::Partial : Head::NoMatch;
  }
  space();
  if (const int r = literal(":"); r <= 0) return r == 0 ? Head::Partial : Head::NoMatch;
  space();
  *end = i;
  *name = decoded.get<std::string>();
  return Head::Match;
}

}  // namespace

ReplyFormat detect_reply_format(std::string_view source) {
  const auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  ReplyFormat f;
  if (has(kChannel) && has(kMessage)) {
    f.tools = ToolSyntax::Harmony;
    f.reasoning = ReasoningSyntax::Harmony;
    return f;
  }
  if (has(kMistralCalls)) {
    f.tools = ToolSyntax::Mistral;
    f.mistral_args = has(kMistralArgs);
  } else if (has(kToolCall) && !has("<arg_key>")) {  // GLM writes XML-like arguments inside <tool_call>
    f.tools = ToolSyntax::Hermes;
  } else if (has("<|start_header_id|>") && has("\"parameters\"")) {  // Llama 3.1+: {"name": ..., "parameters": ...}
    f.tools = ToolSyntax::Llama3;
  }
  if (has(kThink)) f.reasoning = ReasoningSyntax::ThinkTags;
  return f;
}

std::string_view tool_syntax_name(ToolSyntax syntax) {
  switch (syntax) {
    case ToolSyntax::Hermes: return "hermes";
    case ToolSyntax::Llama3: return "llama3";
    case ToolSyntax::Mistral: return "mistral";
    case ToolSyntax::Harmony: return "gpt-oss";
    case ToolSyntax::None: return "none";
  }
  return "none";
}

std::vector<std::string_view> parsed_special_tokens(const ReplyFormat& format) {
  std::vector<std::string_view> out;
  switch (format.tools) {
    case ToolSyntax::Hermes: out = {kToolCall, kToolCallEnd}; break;
    case ToolSyntax::Llama3: out = {kPythonTag}; break;
    case ToolSyntax::Mistral: out = {kMistralCalls, kMistralArgs, kMistralCallId}; break;
    case ToolSyntax::Harmony: out = {kChannel, kMessage, kStart, kEnd, kConstrain}; break;
    case ToolSyntax::None: break;
  }
  if (format.reasoning == ReasoningSyntax::ThinkTags) out.insert(out.end(), {kThink, kThinkEnd});
  return out;
}

StopTokenTexts reply_stop_tokens(const ReplyFormat& format) {
  if (format.tools == ToolSyntax::Harmony) return {{kReturn, kCall}, {kEnd}};
  return {};
}

std::string tool_call_opener(const ReplyFormat& format, std::string_view function) {
  const std::string name = nlohmann::json(std::string(function)).dump();  // quoted and escaped
  const bool any = function.empty();
  switch (format.tools) {
    case ToolSyntax::Hermes:
      return any ? "<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": " + name + ", \"arguments\": ";
    case ToolSyntax::Llama3: return any ? "{\"name\": \"" : "{\"name\": " + name + ", \"parameters\": ";
    case ToolSyntax::Mistral:
      if (format.mistral_args) return std::string(kMistralCalls) + (any ? "" : std::string(function) + "[ARGS]");
      return any ? "[TOOL_CALLS][{\"name\": \"" : "[TOOL_CALLS][{\"name\": " + name + ", \"arguments\": ";
    case ToolSyntax::Harmony:
      return "<|channel|>commentary to=functions." + (any ? "" : std::string(function) + " <|constrain|>json<|message|>");
    case ToolSyntax::None: break;
  }
  return {};
}

bool prompt_opens_reasoning(const ReplyFormat& format, std::string_view prompt) {
  if (format.reasoning != ReasoningSyntax::ThinkTags) return false;
  prompt.remove_suffix(trailing_space(prompt));
  return prompt.ends_with(kThink);
}

ReplyParser::ReplyParser(ReplyFormat format, ParseOptions options) : format_(format), options_(std::move(options)) {
  if (!options_.new_id) options_.new_id = random_id;
  if (options_.in_reasoning && options_.reasoning && format_.reasoning == ReasoningSyntax::ThinkTags) {
    state_ = State::Think;
    strip_leading_ = true;
  }
}

std::vector<ReplyEvent> ReplyParser::feed(std::string_view text) {
  buf_ += text;
  run(false);
  std::vector<ReplyEvent> out;
  out.swap(events_);
  return out;
}

std::vector<ReplyEvent> ReplyParser::finish() {
  run(true);
  std::vector<ReplyEvent> out;
  out.swap(events_);
  return out;
}

void ReplyParser::run(bool at_end) {
  for (;;) {
    bool more = false;
    switch (state_) {
      case State::Text: more = step_text(at_end); break;
      case State::Think: more = step_think(at_end); break;
      case State::HermesOpen: more = step_hermes_open(at_end); break;
      case State::HermesClose: more = step_hermes_close(at_end); break;
      case State::LlamaNext: more = step_llama_next(at_end); break;
      case State::MistralOpen: more = step_mistral_open(at_end); break;
      case State::MistralItem: more = step_mistral_item(at_end); break;
      case State::MistralNext: more = step_mistral_next(at_end); break;
      case State::MistralName: more = step_mistral_name(at_end); break;
      case State::CallObject: more = step_call_object(at_end); break;
      case State::WholeObject: more = step_whole_object(at_end); break;
      case State::Arguments: more = step_arguments(at_end); break;
      case State::ObjectRest: more = step_object_rest(at_end); break;
      case State::HarmonyHeader: more = step_harmony_header(at_end); break;
      case State::HarmonyBody: more = step_harmony_body(at_end); break;
    }
    if (!more) break;
  }
}

void ReplyParser::consume(size_t n) { buf_.erase(0, n); }

void ReplyParser::emit_content(std::string_view text) {
  if (strip_leading_) {
    text.remove_prefix(leading_space(text));
    if (text.empty()) return;
    strip_leading_ = false;
  }
  if (text.empty()) return;
  if (leading_space(text) < text.size()) content_started_ = true;
  reply_.content += text;
  if (!events_.empty() && events_.back().kind == ReplyEvent::Kind::Content) {
    events_.back().text += text;
  } else {
    events_.push_back({ReplyEvent::Kind::Content, std::string(text), 0, {}});
  }
}

void ReplyParser::emit_reasoning(std::string_view text) {
  if (strip_leading_) {
    text.remove_prefix(leading_space(text));
    if (text.empty()) return;
    strip_leading_ = false;
  }
  if (text.empty()) return;
  reply_.reasoning += text;
  if (!events_.empty() && events_.back().kind == ReplyEvent::Kind::Reasoning) {
    events_.back().text += text;
  } else {
    events_.push_back({ReplyEvent::Kind::Reasoning, std::string(text), 0, {}});
  }
}

void ReplyParser::start_call(std::string name) {
  candidate_.clear();
  call_dropped_ = calls_++ >= options_.max_calls;
  if (call_dropped_) return;
  const size_t index = reply_.tool_calls.size();
  ToolCall call{options_.new_id(), std::move(name), {}};
  events_.push_back({ReplyEvent::Kind::ToolCallStart, call.name, index, call.id});
  reply_.tool_calls.push_back(std::move(call));
}

void ReplyParser::emit_arguments(std::string_view text) {
  if (call_dropped_ || text.empty() || reply_.tool_calls.empty()) return;
  const size_t index = reply_.tool_calls.size() - 1;
  reply_.tool_calls.back().arguments += text;
  if (!events_.empty() && events_.back().kind == ReplyEvent::Kind::ToolCallArguments && events_.back().index == index) {
    events_.back().text += text;
  } else {
    events_.push_back({ReplyEvent::Kind::ToolCallArguments, std::string(text), index, {}});
  }
}

void ReplyParser::begin_candidate(std::string_view marker, After after) {
  candidate_ = marker;
  after_ = after;
}

void ReplyParser::give_up_call() {
  const std::string text = std::move(candidate_);
  candidate_.clear();
  state_ = State::Text;
  emit_content(text);
}

void ReplyParser::to_text() {
  state_ = State::Text;
  strip_leading_ = true;
}

// --- content and reasoning ---------------------------------------------------------------------

bool ReplyParser::step_text(bool at_end) {
  const bool harmony = format_.tools == ToolSyntax::Harmony;
  const bool tools = options_.tools && !harmony;
  if (strip_leading_) {
    consume(leading_space(buf_));
    if (buf_.empty()) return false;
    strip_leading_ = false;
  }
  // Llama 3 answers with a bare JSON call: a reply that begins with '{' may be one.
  if (tools && format_.tools == ToolSyntax::Llama3 && !content_started_) {
    const size_t space = leading_space(buf_);
    if (space == buf_.size() && !at_end) return false;
    if (space < buf_.size() && buf_[space] == '{') {
      consume(space);
      begin_candidate("", After::LlamaNext);
      state_ = State::CallObject;
      return true;
    }
  }
  std::vector<std::string_view> markers;
  if (tools && format_.tools == ToolSyntax::Hermes) markers.push_back(kToolCall);
  if (tools && format_.tools == ToolSyntax::Mistral) markers.push_back(kMistralCalls);
  if (tools && format_.tools == ToolSyntax::Llama3) markers.push_back(kPythonTag);
  if (options_.reasoning && format_.reasoning == ReasoningSyntax::ThinkTags && !content_started_) {
    markers.push_back(kThink);
  }
  if (harmony) markers = {kChannel, kStart, kEnd, kCall, kReturn};

  const Found found = find_first(buf_, markers);
  if (found.marker == kThink && leading_space(buf_) < found.at) {  // reasoning comes first or not at all
    emit_content(std::string_view(buf_).substr(0, found.at + kThink.size()));
    consume(found.at + kThink.size());
    return true;
  }
  if (found.at == std::string_view::npos) {
    size_t release = buf_.size();
    if (!at_end && !markers.empty()) {
      release -= partial_marker(buf_, markers);
      // Blank space before a marker is dropped: hold it until what follows is known.
      if (!harmony) release -= trailing_space(std::string_view(buf_).substr(0, release));
    }
    emit_content(std::string_view(buf_).substr(0, release));
    consume(release);
    return false;
  }
  std::string_view before = std::string_view(buf_).substr(0, found.at);
  if (!harmony) before.remove_suffix(trailing_space(before));
  // The blank space dropped before a call comes back with it if it is no call.
  const std::string opener = buf_.substr(before.size(), found.at - before.size()) + std::string(found.marker);
  emit_content(before);
  const std::string_view marker = found.marker;
  if (marker == kChannel) {  // a harmony header, read with its channel
    consume(found.at);
    state_ = State::HarmonyHeader;
    return true;
  }
  consume(found.at + marker.size());
  if (marker == kStart) {
    state_ = State::HarmonyHeader;
  } else if (marker == kThink) {
    state_ = State::Think;
    strip_leading_ = true;
  } else if (marker == kToolCall) {
    begin_candidate(opener, After::HermesClose);
    state_ = State::HermesOpen;
  } else if (marker == kMistralCalls) {
    begin_candidate(opener, After::MistralNext);
    state_ = State::MistralOpen;
  } else if (marker == kPythonTag) {
    begin_candidate(opener, After::LlamaNext);
    state_ = State::LlamaNext;
  }
  // A stray harmony end marker outside any message is dropped.
  return true;
}

bool ReplyParser::step_think(bool at_end) {
  const size_t at = buf_.find(kThinkEnd);
  if (at == std::string::npos) {
    size_t release = buf_.size();
    if (!at_end) {
      release -= partial_marker(buf_, {kThinkEnd});
      release -= trailing_space(std::string_view(buf_).substr(0, release));
    }
    emit_reasoning(std::string_view(buf_).substr(0, release));
    consume(release);
    return false;
  }
  std::string_view thought = std::string_view(buf_).substr(0, at);
  thought.remove_suffix(trailing_space(thought));
  emit_reasoning(thought);
  consume(at + kThinkEnd.size());
  to_text();
  return true;
}

// --- the openers of each syntax ----------------------------------------------------------------

bool ReplyParser::step_hermes_open(bool at_end) {
  const size_t space = leading_space(buf_);
  if (space == buf_.size()) {
    if (at_end) give_up_call();
    return at_end && !buf_.empty();
  }
  if (buf_[space] != '{') {
    give_up_call();
    return true;
  }
  candidate_ += buf_.substr(0, space);
  consume(space);
  state_ = State::CallObject;
  return true;
}

bool ReplyParser::step_hermes_close(bool at_end) {
  const size_t space = leading_space(buf_);
  const std::string_view rest = std::string_view(buf_).substr(space);
  if (rest.starts_with(kToolCallEnd)) {
    consume(space + kToolCallEnd.size());
    to_text();
    return true;
  }
  if (!at_end && starts_or_cut(rest, kToolCallEnd)) return false;  // blank, or cut inside </tool_call>
  to_text();
  return true;
}

bool ReplyParser::step_llama_next(bool at_end) {
  size_t skip = 0;
  while (skip < buf_.size() && (is_space(buf_[skip]) || buf_[skip] == ';')) ++skip;
  if (skip == buf_.size() && !at_end) return false;
  if (skip < buf_.size() && buf_[skip] == '{') {
    candidate_ += buf_.substr(0, skip);
    consume(skip);
    state_ = State::CallObject;
    return true;
  }
  if (!candidate_.empty()) {  // <|python_tag|> and no JSON call: the text is content
    give_up_call();
    return true;
  }
  to_text();
  return !buf_.empty();
}

bool ReplyParser::step_mistral_open(bool at_end) {
  const size_t space = leading_space(buf_);
  if (space == buf_.size()) {
    if (at_end) give_up_call();
    return false;
  }
  candidate_ += buf_.substr(0, space + 1);
  consume(space);
  if (buf_[0] == '[' && !std::string_view(buf_).starts_with(kMistralArgs)) {
    consume(1);
    state_ = State::MistralItem;
  } else {
    candidate_.pop_back();
    state_ = State::MistralName;
  }
  return true;
}

bool ReplyParser::step_mistral_item(bool at_end) {
  const size_t space = leading_space(buf_);
  if (space == buf_.size() && !at_end) return false;
  if (space < buf_.size() && buf_[space] == '{') {
    candidate_ += buf_.substr(0, space);
    consume(space);
    after_ = After::MistralNext;
    state_ = State::CallObject;
    return true;
  }
  if (space < buf_.size() && buf_[space] == ']') {
    consume(space + 1);
    if (!candidate_.empty()) {  // [TOOL_CALLS][] calls nothing
      candidate_.clear();
    }
    to_text();
    return true;
  }
  if (!candidate_.empty()) {
    give_up_call();
  } else {
    to_text();
  }
  return true;
}

bool ReplyParser::step_mistral_next(bool at_end) {
  const size_t space = leading_space(buf_);
  if (space == buf_.size() && !at_end) return false;
  if (space < buf_.size() && buf_[space] == ',') {
    consume(space + 1);
    state_ = State::MistralItem;
    return true;
  }
  if (space < buf_.size() && buf_[space] == ']') consume(space + 1);
  to_text();
  return true;
}

bool ReplyParser::step_mistral_name(bool at_end) {
  const size_t args = buf_.find(kMistralArgs);
  if (args == std::string::npos) {
    if (at_end || buf_.size() > kMaxHeader) {
      give_up_call();
      return true;
    }
    return false;
  }
  std::string_view name = std::string_view(buf_).substr(0, args);
  if (const size_t id = name.find(kMistralCallId); id != std::string_view::npos) name = name.substr(0, id);
  name = trim(name);
  const bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  if (!valid) {
    give_up_call();
    return true;
  }
  start_call(std::string(name));
  consume(args + kMistralArgs.size());
  after_ = After::Text;
  args_kind_ = 0;
  scan_ = 0;
  depth_ = 0;
  in_string_ = escaped_ = false;
  object_rest_ = false;
  state_ = State::Arguments;
  return true;
}

// --- call objects ------------------------------------------------------------------------------

bool ReplyParser::step_call_object(bool at_end) {
  size_t end = 0;
  std::string name;
  switch (match_call_head(buf_, &end, &name)) {
    case Head::Match:
      start_call(std::move(name));
      consume(end);
      args_kind_ = 0;
      scan_ = 0;
      depth_ = 0;
      in_string_ = escaped_ = false;
      object_rest_ = true;
      state_ = State::Arguments;
      return true;
    case Head::Partial:
      if (!at_end) return false;
      [[fallthrough]];
    case Head::NoMatch:
      scan_ = 0;
      depth_ = 0;
      in_string_ = escaped_ = false;
      state_ = State::WholeObject;
      return true;
  }
  return false;
}

bool ReplyParser::step_whole_object(bool at_end) {
  for (; scan_ < buf_.size(); ++scan_) {
    const char c = buf_[scan_];
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') in_string_ = true;
    if (c == '{' || c == '[') ++depth_;
    if ((c == '}' || c == ']') && --depth_ == 0) break;
  }
  if (scan_ == buf_.size()) {
    if (!at_end) return false;
    candidate_ += buf_;
    consume(buf_.size());
    give_up_call();
    return true;
  }
  const size_t end = scan_ + 1;
  const nlohmann::json object = nlohmann::json::parse(std::string_view(buf_).substr(0, end), nullptr, false);
  const char* args_key = object.is_object() && object.contains("arguments") ? "arguments" : "parameters";
  if (!object.is_object() || !object.contains("name") || !object["name"].is_string() || !object.contains(args_key)) {
    candidate_ += buf_.substr(0, end);
    consume(end);
    give_up_call();
    return true;
  }
  const nlohmann::json& args = object[args_key];
  start_call(object["name"].get<std::string>());
  emit_arguments(args.is_string() ? args.get<std::string>() : args.dump());
  consume(end);
  end_call();
  return true;
}

bool ReplyParser::step_arguments(bool at_end) {
  if (args_kind_ == 0) {
    consume(leading_space(buf_));
    if (buf_.empty()) {
      if (at_end) end_call();
      return at_end;
    }
    args_kind_ = buf_[0];
  }
  size_t i = scan_;
  bool done = false;
  if (args_kind_ == '{' || args_kind_ == '[') {
    for (; i < buf_.size() && !done; ++i) {
      const char c = buf_[i];
      if (in_string_) {
        if (escaped_) {
          escaped_ = false;
        } else if (c == '\\') {
          escaped_ = true;
        } else if (c == '"') {
          in_string_ = false;
        }
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if ((c == '}' || c == ']') && --depth_ == 0) {
        done = true;
      }
    }
    // Streams as it comes: what was scanned is the arguments' text.
    emit_arguments(std::string_view(buf_).substr(0, i));
    consume(i);
    scan_ = 0;
  } else if (args_kind_ == '"') {  // arguments given as a JSON string: sent decoded, once whole
    for (i = std::max<size_t>(i, 1); i < buf_.size() && !done; ++i) {
      if (escaped_) {
        escaped_ = false;
      } else if (buf_[i] == '\\') {
        escaped_ = true;
      } else if (buf_[i] == '"') {
        done = true;
      }
    }
    scan_ = i;
    if (done || at_end) {
      const nlohmann::json decoded = nlohmann::json::parse(std::string_view(buf_).substr(0, i), nullptr, false);
      emit_arguments(decoded.is_string() ? decoded.get<std::string>() : buf_.substr(0, i));
      consume(i);
      scan_ = 0;
    }
  } else {  // a bare scalar, to the next delimiter
    while (i < buf_.size() && buf_[i] != ',' && buf_[i] != '}' && buf_[i] != ']' && !is_space(buf_[i])) ++i;
    done = i < buf_.size();
    scan_ = i;
    if (done || at_end) {
      emit_arguments(std::string_view(buf_).substr(0, i));
      consume(i);
      scan_ = 0;
    }
  }
  if (!done) {
    if (at_end) end_call();
    return false;
  }
  if (object_rest_) {
    depth_ = 1;  // inside the call object, after its arguments
    in_string_ = escaped_ = false;
    state_ = State::ObjectRest;
  } else {
    end_call();
  }
  return true;
}

bool ReplyParser::step_object_rest(bool at_end) {
  size_t i = 0;
  bool done = false;
  for (; i < buf_.size() && !done; ++i) {
    const char c = buf_[i];
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && --depth_ == 0) {
      done = true;
    }
  }
  consume(i);  // the rest of the object (an "id" the model wrote) is not passed on
  if (!done) {
    if (at_end) end_call();
    return false;
  }
  end_call();
  return true;
}

void ReplyParser::end_call() {
  call_dropped_ = false;
  switch (after_) {
    case After::HermesClose: state_ = State::HermesClose; break;
    case After::LlamaNext: state_ = State::LlamaNext; break;
    case After::MistralNext: state_ = State::MistralNext; break;
    case After::Text: to_text(); break;
  }
}

// --- harmony (gpt-oss) -------------------------------------------------------------------------

bool ReplyParser::step_harmony_header(bool at_end) {
  const size_t at = buf_.find(kMessage);
  if (at == std::string::npos) {
    if (!at_end && buf_.size() <= kMaxHeader) return false;
    state_ = State::Text;  // not a header after all
    emit_content(buf_);
    consume(buf_.size());
    return false;
  }
  const std::string_view header = std::string_view(buf_).substr(0, at);
  // "assistant to=functions.f<|channel|>commentary json", "<|channel|>analysis", ...
  const auto word_after = [&](std::string_view key) -> std::string_view {
    const size_t k = header.find(key);
    if (k == std::string_view::npos) return {};
    std::string_view rest = header.substr(k + key.size());
    size_t n = 0;
    while (n < rest.size() && !is_space(rest[n]) && rest[n] != '<') ++n;
    return rest.substr(0, n);
  };
  const std::string_view recipient = word_after("to=");
  const std::string_view channel = word_after(kChannel);
  route_ = Route::Content;
  framed_analysis_ = false;
  if (options_.tools && recipient.starts_with("functions.") && recipient.size() > 10) {
    start_call(std::string(recipient.substr(10)));
    route_ = Route::Call;
  } else if (channel == "analysis") {
    if (options_.reasoning) {
      route_ = Route::Reasoning;
    } else {
      framed_analysis_ = true;
    }
  }
  consume(at + kMessage.size());
  if (framed_analysis_) emit_content(std::string(kChannel) + "analysis" + std::string(kMessage));
  state_ = State::HarmonyBody;
  return true;
}

bool ReplyParser::step_harmony_body(bool at_end) {
  const std::vector<std::string_view> markers = {kEnd, kCall, kReturn, kStart, kChannel};
  const Found found = find_first(buf_, markers);
  const auto route = [&](std::string_view text) {
    switch (route_) {
      case Route::Content: emit_content(text); break;
      case Route::Reasoning: emit_reasoning(text); break;
      case Route::Call: emit_arguments(text); break;
      case Route::Drop: break;
    }
  };
  const auto end_message = [&] {
    if (route_ == Route::Call) call_dropped_ = false;
    if (framed_analysis_) emit_content(kEnd);
    framed_analysis_ = false;
    route_ = Route::Content;
    state_ = State::Text;
  };
  if (found.at == std::string_view::npos) {
    const size_t release = at_end ? buf_.size() : buf_.size() - partial_marker(buf_, markers);
    route(std::string_view(buf_).substr(0, release));
    consume(release);
    if (at_end) end_message();
    return false;
  }
  route(std::string_view(buf_).substr(0, found.at));
  const bool ends = found.marker == kEnd || found.marker == kCall || found.marker == kReturn;
  consume(found.at + (ends ? found.marker.size() : 0));
  end_message();
  return true;
}

Reply parse_reply(const ReplyFormat& format, const ParseOptions& options, std::string_view text) {
  ReplyParser parser(format, options);
  parser.feed(text);
  parser.finish();
  return parser.reply();
}

}  // namespace nt::chat
