// stories260K for the GPU tests: llama2.c's golden greedy ids, read from
// the README beside the model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

namespace nt::test {

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
