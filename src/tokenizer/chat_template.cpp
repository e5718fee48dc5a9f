#include "tokenizer/chat_template.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "chat/jinja.h"
#include "core/error.h"
#include "core/read_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace nt {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kStartHeader = "<|start_header_id|>";
constexpr std::string_view kEndHeader = "<|end_header_id|>";
constexpr std::string_view kEotId = "<|eot_id|>";
constexpr std::string_view kStartOfTurn = "<start_of_turn>";
constexpr std::string_view kEndOfTurn = "<end_of_turn>";

struct NamedFormat {
  std::string_view name;
  ChatFormat format;
};
constexpr NamedFormat kFormats[] = {
    {"chatml", ChatFormat::ChatML},
    {"llama3", ChatFormat::Llama3},
    {"llama2", ChatFormat::Llama2},
    {"gemma", ChatFormat::Gemma},
    {"plain", ChatFormat::Plain},
};

// Python's str.isspace(), which Jinja's `trim` filter and str.strip() use.
bool is_python_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string_view strip(std::string_view s) {
  // Forward scan of code points; remember where the last non-space one ended.
  size_t begin = 0, end = 0;
  bool seen_text = false;
  for (size_t pos = 0; pos < s.size();) {
    utf8::Sequence seq = utf8::check_sequence(s, pos);
    size_t n = seq.status == utf8::SequenceStatus::Valid ? seq.length : 1;
    char32_t cp = seq.status == utf8::SequenceStatus::Valid ? utf8::decode_at(s, pos, n) : 0xFFFD;
    if (!is_python_space(cp)) {
      if (!seen_text) begin = pos;
      seen_text = true;
      end = pos + n;
    }
    pos += n;
  }
  return seen_text ? s.substr(begin, end - begin) : std::string_view();
}

// A ChatML template that writes a fixed system turn when the conversation has none, e.g.
// '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n'.
// Returns that literal prompt, or "" when the template has no such fixed text.
std::string find_default_system_prompt(std::string_view tmpl) {
  const std::string opener = std::string(kImStart) + "system";
  for (size_t at = tmpl.find(opener); at != std::string_view::npos; at = tmpl.find(opener, at + 1)) {
    size_t pos = at + opener.size();
    if (tmpl.compare(pos, 1, "\n") == 0) {
      pos += 1;
    } else if (tmpl.compare(pos, 2, "\\n") == 0) {  // the newline written as an escape in the Jinja string
      pos += 2;
    } else {
      continue;
    }
    size_t end = tmpl.find(kImEnd, pos);
    if (end == std::string_view::npos) continue;
    std::string_view body = tmpl.substr(pos, end - pos);
    // Only plain literal text counts; quotes, braces or '+' mean it is built from variables.
    if (body.empty() || body.find_first_of("'\"{}+") != std::string_view::npos) continue;
    std::string text;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\' && i + 1 < body.size() && body[i + 1] == 'n') {
        text += '\n';
        ++i;
      } else {
        text += body[i];
      }
    }
    return text;
  }
  return {};
}

std::string capitalized(std::string_view role) {
  std::string s(role);
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
  return s;
}

}  // namespace

ChatTemplate ChatTemplate::detect(std::string_view template_text, SpecialTexts specials) {
  if (template_text.find(kImStart) != std::string_view::npos) return named("chatml", template_text, specials);
  if (template_text.find(kStartHeader) != std::string_view::npos) return named("llama3", template_text, specials);
  if (template_text.find("[INST]") != std::string_view::npos) return named("llama2", template_text, specials);
  if (template_text.find(kStartOfTurn) != std::string_view::npos) return named("gemma", template_text, specials);
  ChatTemplate t = named("plain", template_text, std::move(specials));
  t.warning_ = template_text.empty()
                   ? "the model has no chat template (tokenizer.chat_template); using the plain format"
                   : "unrecognised chat template (tokenizer.chat_template); using the plain format";
  return t;
}

ChatTemplate ChatTemplate::named(std::string_view name, std::string_view template_text, SpecialTexts specials) {
  for (const NamedFormat& f : kFormats) {
    if (f.name != name) continue;
    ChatTemplate t(f.format, std::move(specials));
    if (f.format == ChatFormat::ChatML) t.default_system_ = find_default_system_prompt(template_text);
    return t;
  }
  std::string valid;
  for (const NamedFormat& f : kFormats) valid += fmt::format("{}'{}'", valid.empty() ? "" : ", ", f.name);
  fail("unknown chat template '{}' (valid names: {})", name, valid);
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tokenizer, std::string_view override_name,
                                         const std::string& template_file) {
  const Vocabulary& v = tokenizer.vocab();
  SpecialTexts specials{v.bos() == kNoToken ? "" : v.text(v.bos()), v.eos() == kNoToken ? "" : v.text(v.eos())};
  if (!template_file.empty()) {
    if (!override_name.empty()) fail("--chat-template {} and --chat-template-file {}: give one", override_name, template_file);
    const std::string text = read_file(template_file);
    ChatTemplate chat = detect(text, std::move(specials));
    chat.use_jinja(text, template_file);
    chat.jinja_origin_ = template_file;
    chat.warning_.clear();
    return chat;
  }
  if (override_name.empty()) {
    ChatTemplate chat = detect(v.chat_template(), std::move(specials));
    if (v.chat_template().empty()) return chat;
    try {
      chat.use_jinja(v.chat_template(), "the model's chat template");
      chat.jinja_origin_ = "the model's";
      chat.warning_.clear();
    } catch (const Error& e) {
      chat.warning_ = fmt::format("{}; using the {} format instead", e.what(), chat.name());
    }
    return chat;
  }
  ChatTemplate chat = named(override_name, v.chat_template(), std::move(specials));
  // A format whose markers the vocabulary lacks would be spelt out as plain text.
  std::vector<std::string_view> markers;
  if (chat.format_ == ChatFormat::ChatML) markers = {kImStart, kImEnd};
  if (chat.format_ == ChatFormat::Llama3) markers = {kStartHeader, kEndHeader, kEotId};
  if (chat.format_ == ChatFormat::Gemma) markers = {kStartOfTurn, kEndOfTurn};
  std::string missing;
  for (const std::string_view marker : markers) {
    if (v.find(marker) == kNoToken) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", marker);
  }
  if (!missing.empty()) {
    chat.warning_ = fmt::format("--chat-template {}: the vocabulary has no special token for {}; they are tokenized "
                                "as plain text, which this model was not trained on",
                                override_name, missing);
  }
  return chat;
}

std::vector<std::string_view> ChatTemplate::names() {
  std::vector<std::string_view> out;
  for (const NamedFormat& f : kFormats) out.push_back(f.name);
  return out;
}

std::string_view ChatTemplate::name() const {
  for (const NamedFormat& f : kFormats) {
    if (f.format == format_) return f.name;
  }
  return "plain";
}

std::string ChatTemplate::end_of_turn() const {
  switch (format_) {
    case ChatFormat::ChatML: return std::string(kImEnd);
    case ChatFormat::Llama3: return std::string(kEotId);
    case ChatFormat::Llama2: return specials_.eos;
    case ChatFormat::Gemma: return std::string(kEndOfTurn);
    case ChatFormat::Plain: return {};
  }
  return {};
}

std::string ChatTemplate::description() const {
  if (jinja_) return fmt::format("{} Jinja template ({} family)", jinja_origin_, name());
  return fmt::format("{} (built in)", name());
}

void ChatTemplate::use_jinja(std::string_view source, std::string_view origin) {
  jinja_ = std::make_shared<const chat::JinjaTemplate>(chat::JinjaTemplate::parse(source, origin));
  reply_format_ = chat::detect_reply_format(source);
  if (reply_format_.tools == chat::ToolSyntax::None) return;
  // Most templates write a call's arguments with tojson and need the object; one that
  // concatenates them as text fails on an object, and gets the text.
  const std::vector<ChatMessage> probe = {
      {"user", "What is the weather?"},
      {"assistant", "", {{"call00001", "probe_tool", "{\"probe_arg\": \"probe_value\"}"}}},
      {"tool", "sunny", {}, "call00001", "probe_tool"},
  };
  const ChatInputs inputs{
      R"([{"type": "function", "function": {"name": "probe_tool", "description": "A probe.", "parameters": )"
      R"({"type": "object", "properties": {"probe_arg": {"type": "string"}}, "required": ["probe_arg"]}}}])",
      {}};
  try {
    const std::string rendered = apply_jinja(probe, true, inputs);
    // As an object: {"probe_arg": "probe_value"}; as escaped text: "{\"probe_arg\": \"probe_value\"}".
    object_arguments_ = rendered.find("\"probe_value\"") != std::string::npos;
  } catch (const std::exception&) {
    object_arguments_ = false;
  }
}

std::string ChatTemplate::apply_jinja(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                      const ChatInputs& inputs) const {
  using nlohmann::ordered_json;
  // JSON the request carried as text; `what` names it when it is not JSON.
  const auto parse = [](const std::string& text, std::string_view what) {
    ordered_json j = ordered_json::parse(text, nullptr, false);
    if (j.is_discarded()) fail("chat template input: {} is not JSON", what);
    return j;
  };
  ordered_json context;
  ordered_json list = ordered_json::array();
  for (const ChatMessage& m : messages) {
    ordered_json message = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.empty()) {
      ordered_json calls = ordered_json::array();
      for (const ChatToolCall& c : m.tool_calls) {
        ordered_json arguments = ordered_json::parse(c.arguments, nullptr, false);
        if (!object_arguments_ || arguments.is_discarded()) arguments = c.arguments;
        calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", arguments}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) message["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) message["name"] = m.name;
    if (!m.reasoning.empty()) {  // as transformers passes it: under both names templates read
      message["reasoning_content"] = m.reasoning;
      message["thinking"] = m.reasoning;
    }
    list.push_back(std::move(message));
  }
  if (!inputs.variables.empty()) {
    const ordered_json variables = parse(inputs.variables, "the template variables");
    if (!variables.is_object()) fail("chat template input: the template variables are not a JSON object");
    for (const auto& [key, value] : variables.items()) context[key] = value;
  }
  context["messages"] = std::move(list);
  if (!inputs.tools.empty()) context["tools"] = parse(inputs.tools, "tools");
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = specials_.bos;
  context["eos_token"] = specials_.eos;
  return jinja_->render(context);
}

std::string ChatTemplate::apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                const ChatInputs& inputs) const {
  if (jinja_) return apply_jinja(messages, add_generation_prompt, inputs);
  switch (format_) {
    case ChatFormat::ChatML: return apply_chatml(messages, add_generation_prompt);
    case ChatFormat::Llama3: return apply_llama3(messages, add_generation_prompt);
    case ChatFormat::Llama2: return apply_llama2(messages);
    case ChatFormat::Gemma: return apply_gemma(messages, add_generation_prompt);
    case ChatFormat::Plain: return apply_plain(messages, add_generation_prompt);
  }
  return {};
}

std::string ChatTemplate::apply_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  auto turn = [&](std::string_view role, std::string_view content) {
    out += fmt::format("{}{}\n{}{}\n", kImStart, role, content, kImEnd);
  };
  if (!messages.empty() && messages[0].role != "system" && !default_system_.empty()) turn("system", default_system_);
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  if (add_generation_prompt) out += fmt::format("{}assistant\n", kImStart);
  return out;
}

// Meta's Llama 3 template: BOS once, then each turn with its content trimmed.
std::string ChatTemplate::apply_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += specials_.bos;
    out +=
        fmt::format("{}{}{}\n\n{}{}", kStartHeader, messages[i].role, kEndHeader, strip(messages[i].content), kEotId);
  }
  if (add_generation_prompt) out += fmt::format("{}assistant{}\n\n", kStartHeader, kEndHeader);
  return out;
}

// Meta's Llama 2 template: a leading system message is folded into the first user turn;
// user and assistant turns must alternate. The prompt always ends ready for a reply,
// so add_generation_prompt changes nothing.
std::string ChatTemplate::apply_llama2(std::span<const ChatMessage> messages) const {
  std::span<const ChatMessage> turns = messages;
  const ChatMessage* system = nullptr;
  if (!messages.empty() && messages[0].role == "system") {
    system = &messages[0];
    turns = messages.subspan(1);
  }
  std::string out;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatMessage& m = turns[i];
    if ((m.role == "user") != (i % 2 == 0)) {
      fail(
          "llama2 chat template: conversation roles must alternate user/assistant/user/assistant/... "
          "(turn {} is '{}')",
          i + 1, m.role);
    }
    std::string content = m.content;
    if (i == 0 && system) content = fmt::format("<<SYS>>\n{}\n<</SYS>>\n\n{}", system->content, m.content);
    if (m.role == "user") {
      out += fmt::format("{}[INST] {} [/INST]", specials_.bos, strip(content));
    } else if (m.role == "assistant") {
      out += fmt::format(" {} {}", strip(content), specials_.eos);
    }
  }
  return out;
}

// Google's Gemma 3 template: BOS once; a leading system message goes, as it is, before the
// first user turn's trimmed content; the assistant is "model"; user and model turns alternate.
std::string ChatTemplate::apply_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::span<const ChatMessage> turns = messages;
  std::string first_user_prefix;
  if (!messages.empty() && messages[0].role == "system") {
    first_user_prefix = messages[0].content + "\n\n";
    turns = messages.subspan(1);
  }
  std::string out = specials_.bos;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatMessage& m = turns[i];
    if ((m.role == "user") != (i % 2 == 0)) {
      fail("gemma chat template: conversation roles must alternate user/assistant/user/assistant/... (turn {} is '{}')",
           i + 1, m.role);
    }
    out += fmt::format("{}{}\n{}{}{}\n", kStartOfTurn, m.role == "assistant" ? "model" : m.role,
                       i == 0 ? first_user_prefix : "", strip(m.content), kEndOfTurn);
  }
  if (add_generation_prompt) out += fmt::format("{}model\n", kStartOfTurn);
  return out;
}

std::string ChatTemplate::apply_plain(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  for (const ChatMessage& m : messages) out += fmt::format("{}: {}\n", capitalized(m.role), m.content);
  if (add_generation_prompt) out += "Assistant:";
  return out;
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat,
                                 std::span<const ChatMessage> messages, bool add_generation_prompt) {
  return encode_chat_text(tokenizer, chat.apply(messages, add_generation_prompt));
}

std::vector<int32_t> encode_chat_text(const Tokenizer& tokenizer, std::string_view rendered) {
  std::vector<int32_t> ids = tokenizer.encode(rendered, /*add_special=*/false, /*parse_special=*/true);
  const Vocabulary& v = tokenizer.vocab();
  if (v.add_bos() && (ids.empty() || ids.front() != v.bos())) ids.insert(ids.begin(), v.bos());
  return ids;
}

std::vector<int32_t> chat_stop_tokens(const Tokenizer& tokenizer, const ChatTemplate& chat) {
  const Vocabulary& v = tokenizer.vocab();
  std::vector<int32_t> ids = v.eog();
  if (std::string eot = chat.end_of_turn(); !eot.empty()) {
    if (int32_t id = v.find(eot); id != kNoToken) ids.push_back(id);
  }
  const chat::StopTokenTexts adjusted = chat::reply_stop_tokens(chat.reply_format());
  for (const std::string_view text : adjusted.added) {
    if (int32_t id = v.find(text); id != kNoToken) ids.push_back(id);
  }
  for (const std::string_view text : adjusted.removed) {
    if (int32_t id = v.find(text); id != kNoToken) std::erase(ids, id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace nt
