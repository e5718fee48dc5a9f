// Test driver: runs a model on given token ids and writes every position's
// logits as raw float32 (n_tokens x vocab) for comparison with the float64
// numpy reference. Usage:
//   logits_tool MODEL.gguf IDS OUT.f32 [--step] [--kv-f32] [--threads N]
// IDS is comma-separated; several sequences separated by ';' are evaluated
// one after another, each from position 0 (independent contexts), and their
// rows written back to back. --step feeds one token per forward pass (decode
// path) instead of one batched pass per sequence (prefill path).
#include <fmt/core.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_llama.h"
#include "core/error.h"

int main(int argc, char** argv) {
  try {
    if (argc < 4) {
      fmt::print(stderr, "usage: logits_tool MODEL.gguf IDS OUT.f32 [--step] [--kv-f32] [--threads N]\n");
      return 2;
    }
    std::vector<std::vector<int32_t>> sequences;
    std::stringstream lists(argv[2]);
    for (std::string list; std::getline(lists, list, ';');) {
      std::stringstream items(list);
      auto& ids = sequences.emplace_back();
      for (std::string item; std::getline(items, item, ',');) ids.push_back(std::stoi(item));
      if (ids.empty()) nt::fail("IDS: empty sequence in '{}'", argv[2]);
    }
    nt::CpuRunnerOptions options;
    bool step = false;
    for (int i = 4; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--step") step = true;
      else if (arg == "--kv-f32") options.kv_f32 = true;
      else if (arg == "--threads" && i + 1 < argc) options.threads = std::stoi(argv[++i]);
      else nt::fail("unknown argument '{}'", arg);
    }
    std::shared_ptr<const nt::GgufFile> file = nt::GgufFile::open(argv[1]);
    auto runner = nt::make_cpu_runner(file, options);
    const size_t vocab = size_t(runner->config().vocab_size);
    std::vector<float> logits;
    for (const auto& ids : sequences) {
      const size_t first_row = logits.size();
      logits.resize(first_row + ids.size() * vocab);
      float* rows = &logits[first_row];
      if (step) {
        for (size_t t = 0; t < ids.size(); ++t) runner->forward({&ids[t], 1}, int64_t(t), rows + t * vocab, false);
      } else {
        runner->forward(ids, 0, rows, true);
      }
    }
    std::FILE* out = std::fopen(argv[3], "wb");
    if (!out || std::fwrite(logits.data(), sizeof(float), logits.size(), out) != logits.size()) nt::fail("cannot write {}", argv[3]);
    std::fclose(out);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
