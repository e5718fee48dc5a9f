// stories260K for the GPU tests: the model converted to GGUF, and
// llama2.c's golden greedy ids, read from the README beside the model.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "model/llama2c_converter.h"

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

}  // namespace nt::test
