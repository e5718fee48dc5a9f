// `ntransformer convert-llama2c MODEL.bin TOKENIZER.bin OUT.gguf`
#include <fmt/core.h>

#include "cli/commands.h"
#include "model/llama2c_converter.h"

namespace nt::cli {

void add_convert_llama2c_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert-llama2c", "Convert a llama2.c checkpoint and tokenizer to GGUF");
  static std::string model, tokenizer, out;
  cmd->add_option("model", model, "llama2.c checkpoint (.bin)")->required()->check(CLI::ExistingFile);
  cmd->add_option("tokenizer", tokenizer, "llama2.c tokenizer (.bin)")->required()->check(CLI::ExistingFile);
  cmd->add_option("out", out, "output GGUF file")->required();
  cmd->callback([] {
    convert_llama2c(model, tokenizer, out);
    fmt::print("wrote {}\n", out);
  });
}

}  // namespace nt::cli
