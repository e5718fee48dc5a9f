// The small real models the engine tests run: stories260K converted from
// llama2.c's own files (with llama2.c's greedy output as the reference, read
// from the README beside them), and the default SmolLM2 file. Each helper
// returns an empty value when the model is absent, so a test can skip.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "model/llama2c_converter.h"

namespace nt::test {

inline std::filesystem::path shared_models_dir() {
  const char* env = std::getenv("NT_SHARED_MODELS");
  return env && *env ? std::filesystem::path(env) : std::filesystem::path(NT_SHARED_MODELS);
}

// stories260K as GGUF, converted once per test process and removed at its
// exit (ctest runs tests as parallel processes, so the name carries the pid).
inline std::string stories260k_gguf() {
  struct Converted {
    std::string path;
    Converted() {
      const std::filesystem::path dir = shared_models_dir();
      if (!std::filesystem::exists(dir / "stories260K.bin") || !std::filesystem::exists(dir / "tok512.bin")) return;
      path = (std::filesystem::path(::testing::TempDir()) / ("nt_stories260k_" + std::to_string(getpid()) + ".gguf")).string();
      convert_llama2c((dir / "stories260K.bin").string(), (dir / "tok512.bin").string(), path);
    }
    ~Converted() {
      if (!path.empty()) std::filesystem::remove(path);
    }
  };
  static const Converted converted;
  return converted.path;
}

// llama2.c's first 64 greedy ids after BOS (shared/models/README.md).
inline std::vector<int32_t> stories260k_golden_ids() {
  std::ifstream in(shared_models_dir() / "README.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::smatch m;
  if (!std::regex_search(s, m, std::regex("The first 64 generated token ids:\n```\n([0-9 \n]+?)\n```"))) return {};
  std::vector<int32_t> ids;
  std::istringstream numbers(m[1].str());
  for (int32_t id; numbers >> id;) ids.push_back(id);
  return ids;
}

inline std::string smollm2_gguf() {
  const char* env = std::getenv("NT_SMOLLM2_GGUF");
  const std::string path = env && *env ? std::string(env) : std::string(NT_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  return std::filesystem::exists(path) ? path : std::string();
}

}  // namespace nt::test
