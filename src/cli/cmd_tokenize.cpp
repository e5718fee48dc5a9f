// `ntransformer tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos] [--no-parse-special]`:
// the model's tokenization of a text, printed as llama-tokenize prints it.
#include <fmt/core.h>

#include <algorithm>

#include "cli/commands.h"
#include "core/error.h"
#include "core/read_file.h"
#include "engine/default_model.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace nt::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string prompt;
  std::string file;
  bool ids = false;
  bool no_bos = false;
  bool no_parse_special = false;
};

// A piece as text: bytes that are not valid UTF-8 on their own (part of a
// character split over tokens) as \xNN escapes, so that the output stays text.
std::string printable(std::string_view bytes) {
  std::string out;
  for (size_t pos = 0; pos < bytes.size();) {
    const auto s = utf8::check_sequence(bytes, pos);
    if (s.status == utf8::SequenceStatus::Valid) {
      out.append(bytes.substr(pos, s.length));
      pos += s.length;
    } else {
      out += fmt::format("\\x{:02x}", uint8_t(bytes[pos++]));
    }
  }
  return out;
}

// Text the vocabulary has no token for becomes its unknown token: say so,
// unless the text spells that token itself.
void warn_unknown_tokens(const Tokenizer& tokenizer, std::string_view text, const std::vector<int32_t>& ids) {
  const Vocabulary& v = tokenizer.vocab();
  const int32_t unk = v.unk();
  if (unk == kNoToken) return;
  const auto count = std::count(ids.begin(), ids.end(), unk);
  if (count == 0 || text.find(v.text(unk)) != std::string_view::npos) return;
  fmt::print(stderr, "warning: {} piece{} of the text ha{} no token in this vocabulary and became the unknown token {} ('{}')\n",
             count, count > 1 ? "s" : "", count > 1 ? "ve" : "s", unk, v.text(unk));
}

void tokenize(const TokenizeOptions& o, bool from_file) {
  const std::string path = o.model.empty() ? default_model_path() : o.model;
  const auto file = GgufFile::open(path);  // the vocabulary only: no weights are read
  const auto tokenizer = Tokenizer::from_gguf(file->header(), path);
  for (const auto& w : tokenizer.warnings()) fmt::print(stderr, "warning: {}\n", w);
  const std::string text = from_file ? read_file(o.file) : o.prompt;
  const auto ids = tokenizer.encode(text, !o.no_bos, !o.no_parse_special);
  warn_unknown_tokens(tokenizer, text, ids);
  if (o.ids) {
    fmt::print("[{}]\n", fmt::join(ids, ", "));
    return;
  }
  for (const int32_t id : ids) fmt::print("{:6} -> '{}'\n", id, printable(tokenizer.token_bytes(id)));
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize",
                                 "Print the token ids of a text (and each token's piece), as llama-tokenize does");
  static TokenizeOptions o;
  cmd->add_option("-m,--model", o.model, "GGUF model whose vocabulary to use (default: SmolLM2-135M-Instruct from the models cache)");
  auto* prompt = cmd->add_option("-p,--prompt", o.prompt, "Text to tokenize, taken as given");
  auto* file = cmd->add_option("-f,--file", o.file, "File whose whole content to tokenize");
  prompt->excludes(file);
  cmd->add_flag("--ids", o.ids, "Print only the ids, as [1, 2, 3]");
  cmd->add_flag("--no-bos", o.no_bos, "Add no BOS (nor EOS) even where the vocabulary asks for them");
  cmd->add_flag("--no-parse-special", o.no_parse_special, "Tokenize special-token text (\"<|im_start|>\") as plain text");
  cmd->callback([prompt, file] {
    if (prompt->count() == 0 && file->count() == 0) fail("tokenize: give the text with -p TEXT or -f FILE");
    tokenize(o, file->count() > 0);
  });
}

}  // namespace nt::cli
