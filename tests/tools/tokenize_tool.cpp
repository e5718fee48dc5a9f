// Drives the tokenizer for the Python oracle tests. One request per stdin line, one
// JSON reply per stdout line:
//   tokenize_tool MODEL.gguf            vocabulary from a GGUF file
//   tokenize_tool --synthetic STYLE N   a synthetic vocabulary (STYLE: smollm2 | llama3 | qwen2 | qwen3 | gemma3 | gpt-oss)
// A line that is not a JSON object is encoded as plain text (add_special, no parse_special).
// Requests ({"op": ...}):
//   encode  text, add_special=true, parse_special=false      -> ids
//   decode  ids, skip_special=true                           -> text (invalid UTF-8 as U+FFFD), hex (raw bytes)
//   stream  ids, skip_special=true, context=[] (ids the text continues)
//                                                            -> chunks (TokenStreamDecoder output, then flush)
//   chat    messages [{role, content}], add_generation_prompt=true, template (name, optional),
//           template_text (Jinja source, optional; default: the model's)
//                                                            -> text, format, warning, ids, stop
//   split  text, pre (a tokenizer.ggml.pre name)             -> pieces (the pre-tokenizer's), rules
//   info                                                     -> vocabulary facts and warnings
//   spec                                                     -> the VocabSpec (tokens, merges, ...)
//   time_encode  text, repeat=1                              -> seconds (per encode), n_tokens
// Errors come back as {"error": message}.
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/token_stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using nlohmann::json;

std::string to_hex(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += fmt::format("{:02x}", uint8_t(c));
  return out;
}

constexpr const char* kStyles = "smollm2|llama3|qwen2|qwen3|gemma3|gpt-oss";

nt::Tokenizer load(int argc, char** argv) {
  std::string first = argc > 1 ? argv[1] : "";
  if (first == "--synthetic" && argc == 4) {
    const std::string style = argv[2];
    const std::pair<const char*, nt::SyntheticVocabStyle> styles[] = {
        {"smollm2", nt::SyntheticVocabStyle::SmolLM2}, {"llama3", nt::SyntheticVocabStyle::Llama3},
        {"qwen2", nt::SyntheticVocabStyle::Qwen2},     {"qwen3", nt::SyntheticVocabStyle::Qwen3},
        {"gemma3", nt::SyntheticVocabStyle::Gemma3},   {"gpt-oss", nt::SyntheticVocabStyle::GptOss},
    };
    for (const auto& [name, s] : styles) {
      if (style == name) return nt::Tokenizer(nt::make_synthetic_vocab(std::stoi(argv[3]), s), "synthetic " + style);
    }
    nt::fail("unknown synthetic style '{}' ({})", style, kStyles);
  }
  if (argc != 2) nt::fail("usage: tokenize_tool MODEL.gguf | tokenize_tool --synthetic {} N_VOCAB", kStyles);
  auto file = nt::GgufFile::open(first);
  return nt::Tokenizer::from_gguf(file->header(), first);
}

json optional_id(int32_t id) { return id == nt::kNoToken ? json(nullptr) : json(id); }

json spec_json(const nt::VocabSpec& s) {
  auto opt = [](const auto& o) { return o ? json(*o) : json(nullptr); };
  return {{"model", s.model},
          {"pre", s.pre},
          {"tokens", s.tokens},
          {"scores", s.scores},
          {"token_types", s.token_types},
          {"merges", s.merges},
          {"bos_id", opt(s.bos_id)},
          {"eos_id", opt(s.eos_id)},
          {"eot_id", opt(s.eot_id)},
          {"eom_id", opt(s.eom_id)},
          {"pad_id", opt(s.pad_id)},
          {"unk_id", opt(s.unk_id)},
          {"add_bos", opt(s.add_bos)},
          {"add_eos", opt(s.add_eos)},
          {"add_space_prefix", opt(s.add_space_prefix)},
          {"chat_template", s.chat_template}};
}

json handle(const nt::Tokenizer& tok, const json& req) {
  const std::string op = req.value("op", "encode");
  if (op == "encode") {
    return {{"ids", tok.encode(req.at("text").get<std::string>(), req.value("add_special", true),
                               req.value("parse_special", false))}};
  }
  if (op == "decode") {
    auto ids = req.at("ids").get<std::vector<int32_t>>();
    std::string bytes = tok.decode(ids, req.value("skip_special", true));
    return {{"text", nt::utf8::to_valid(bytes)}, {"hex", to_hex(bytes)}};
  }
  if (op == "stream") {
    nt::TokenStreamDecoder decoder(tok, req.value("skip_special", true));
    decoder.continue_after(req.value("context", std::vector<int32_t>{}));
    json chunks = json::array();
    for (int32_t id : req.at("ids").get<std::vector<int32_t>>()) chunks.push_back(decoder.push(id));
    chunks.push_back(decoder.flush());
    return {{"chunks", chunks}};
  }
  if (op == "chat") {
    std::vector<nt::ChatMessage> messages;
    for (const auto& m : req.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    const std::string name = req.value("template", "");
    nt::ChatTemplate chat = nt::ChatTemplate::for_tokenizer(tok, name);
    if (req.contains("template_text")) {
      const nt::Vocabulary& v = tok.vocab();
      nt::ChatTemplate::SpecialTexts specials{v.bos() == nt::kNoToken ? "" : v.text(v.bos()),
                                              v.eos() == nt::kNoToken ? "" : v.text(v.eos())};
      std::string text = req.at("template_text");
      chat = name.empty() ? nt::ChatTemplate::detect(text, specials) : nt::ChatTemplate::named(name, text, specials);
    }
    bool gen = req.value("add_generation_prompt", true);
    return {{"text", chat.apply(messages, gen)},
            {"format", chat.name()},
            {"warning", chat.warning()},
            {"ids", nt::encode_chat(tok, chat, messages, gen)},
            {"stop", nt::chat_stop_tokens(tok, chat)}};
  }
  if (op == "split") {
    nt::PreTokenizer pre(req.at("pre").get<std::string>());
    const std::string text = req.at("text");
    std::vector<std::string_view> pieces;
    pre.split(text, pieces);
    return {{"pieces", std::vector<std::string>(pieces.begin(), pieces.end())}, {"rules", pre.rules()}};
  }
  if (op == "info") {
    const nt::Vocabulary& v = tok.vocab();
    return {{"n_vocab", v.size()},         {"model", v.model_name()},     {"pre", v.pre()},
            {"rules", tok.rules()},        {"bos", optional_id(v.bos())}, {"eos", optional_id(v.eos())},
            {"eot", optional_id(v.eot())}, {"eom", optional_id(v.eom())}, {"unk", optional_id(v.unk())},
            {"add_bos", v.add_bos()},      {"add_eos", v.add_eos()},      {"add_space_prefix", v.add_space_prefix()},
            {"eog", v.eog()},              {"warnings", tok.warnings()}};
  }
  if (op == "spec") return spec_json(tok.vocab().spec());
  if (op == "time_encode") {
    const std::string text = req.at("text");
    const int repeat = std::max(1, req.value("repeat", 1));
    size_t n_tokens = 0;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeat; ++i) n_tokens = tok.encode(text, false, false).size();
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    return {{"seconds", elapsed.count() / repeat}, {"n_tokens", n_tokens}};
  }
  nt::fail("unknown op '{}'", op);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    nt::Tokenizer tok = load(argc, argv);
    std::string line;
    while (std::getline(std::cin, line)) {
      json reply;
      try {
        json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!req.is_object()) req = {{"op", "encode"}, {"text", line}};
        reply = handle(tok, req);
      } catch (const std::exception& e) {
        reply = {{"error", e.what()}};
      }
      std::cout << reply.dump(-1, ' ', false, json::error_handler_t::replace) << '\n' << std::flush;
    }
  } catch (const std::exception& e) {
    std::cerr << "tokenize_tool: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
