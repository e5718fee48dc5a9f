// Test driver: greedy (or sampled) generation through the engine's Generator,
// printing the token ids as well as the text, for end-to-end tests. Usage:
//   generate_tool MODEL.gguf (--prompt TEXT | --ids 1,2,3) [-n N] [--temp T] [--seed S]
//                 [--kv-f32] [--ctx N] [--threads N] [--ignore-eos]
// --prompt is encoded as `run --raw` does (BOS as the vocabulary says, no
// special-token parsing). Prints one JSON object:
//   {"prompt_ids": [...], "ids": [...], "text": "...", "stop": "token limit"}
// --ignore-eos keeps generating through EOS/EOT (for comparisons with a
// reference that has no stop tokens).
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "core/error.h"
#include "engine/generator.h"
#include "gguf/gguf_file.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace {

std::vector<int32_t> parse_ids(const std::string& list) {
  std::vector<int32_t> ids;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) ids.push_back(std::stoi(item));
  return ids;
}

int run(int argc, char** argv) {
  if (argc < 4) {
    fmt::print(stderr, "usage: generate_tool MODEL.gguf (--prompt TEXT | --ids 1,2,3) [-n N] [--temp T] [--seed S] "
                       "[--kv-f32] [--ctx N] [--threads N] [--ignore-eos]\n");
    return 2;
  }
  nt::CpuRunnerOptions runner_options;
  nt::SamplingParams sampling;
  sampling.temperature = 0;
  nt::GenerationOptions gen;
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  bool have_prompt = false, ignore_eos = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--prompt" && has_value) prompt = argv[++i], have_prompt = true;
    else if (arg == "--ids" && has_value) prompt_ids = parse_ids(argv[++i]);
    else if (arg == "-n" && has_value) gen.max_tokens = std::stoll(argv[++i]);
    else if (arg == "--temp" && has_value) sampling.temperature = std::stof(argv[++i]);
    else if (arg == "--seed" && has_value) sampling.seed = std::stoull(argv[++i]);
    else if (arg == "--ctx" && has_value) runner_options.context = std::stoll(argv[++i]);
    else if (arg == "--threads" && has_value) runner_options.threads = std::stoi(argv[++i]);
    else if (arg == "--kv-f32") runner_options.kv_f32 = true;
    else if (arg == "--ignore-eos") ignore_eos = true;
    else nt::fail("unknown argument '{}'", arg);
  }
  std::shared_ptr<const nt::GgufFile> file = nt::GgufFile::open(argv[1]);
  const auto tokenizer = nt::Tokenizer::from_gguf(file->header(), file->path());
  if (have_prompt) prompt_ids = tokenizer.encode(prompt, true, false);
  if (!ignore_eos) gen.stop_tokens = tokenizer.vocab().eog();
  auto runner = nt::make_cpu_runner(file, runner_options);
  nt::Sampler sampler(sampling, runner->config().vocab_size);
  nt::Generator generator(*runner, tokenizer);
  std::string text;
  const auto stats = generator.generate(prompt_ids, sampler, gen, [&](std::string_view piece) { text += piece; });

  const nlohmann::json out = {{"prompt_ids", prompt_ids},
                              {"ids", generator.generated()},
                              {"text", text},
                              {"stop", std::string(nt::stop_reason_name(stats.stop))}};
  fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
