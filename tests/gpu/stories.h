// stories260K for the GPU tests: the model converted to GGUF, llama2.c's
// golden greedy ids, read from the README beside the model, and the check
// that a runner follows them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "greedy_decode.h"
#include "model/llama2c_converter.h"
#include "runtime/model_runner.h"

namespace nt::test {

// stories260K converted to GGUF once for this process, for tests that only
// read it; empty when the shared models are absent.
inline const std::string& stories260k_gguf() {
  static const std::string path = [] {
    const std::filesystem::path dir = shared_models_dir();
    if (!std::filesystem::exists(dir / "stories260K.bin")) return std::string();
    const std::string out = (std::filesystem::path(testing::TempDir()) / "nt_stories260k_shared.gguf").string();
    convert_llama2c((dir / "stories260K.bin").string(), (dir / "tok512.bin").string(), out);
    return out;
  }();
  return path;
}

// llama2.c's first 64 greedy ids after BOS; empty when the README has none.
inline std::vector<int32_t> stories_golden_ids(const std::filesystem::path& readme) {
  std::ifstream in(readme);
  std::stringstream text;
  text << in.rdbuf();
  std::smatch m;
  const std::string s = text.str();
  if (!std::regex_search(s, m, std::regex("The first 64 generated token ids:\n```\n([0-9 \n]+?)\n```"))) return {};
  std::vector<int32_t> ids;
  std::istringstream numbers(m[1].str());
  for (int32_t id; numbers >> id;) ids.push_back(id);
  return ids;
}

// The runner follows llama2.c's greedy path from BOS: the argmax of every
// position's logits in one prefill of the path, then decoding freely.
inline void expect_llama2c_greedy_path(ModelRunner& runner, const std::vector<int32_t>& golden) {
  std::vector<int32_t> tokens = {1};
  tokens.insert(tokens.end(), golden.begin(), golden.end() - 1);
  const int64_t vocab = runner.config().vocab_size;
  std::vector<float> all(tokens.size() * size_t(vocab));
  runner.forward(tokens, 0, all.data(), true);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(argmax_first(std::span(all).subspan(i * size_t(vocab), size_t(vocab))), golden[i]) << "prefill position " << i;
  }
  EXPECT_EQ(greedy_decode(runner, {1}, int(golden.size())), golden) << "decoding from BOS";
}

}  // namespace nt::test
