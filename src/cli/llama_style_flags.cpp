#include "cli/llama_style_flags.h"

#include <string_view>
#include <utility>

namespace nt::cli {

std::vector<std::string> expand_llama_style_flags(int argc, const char* const* argv) {
  static constexpr std::pair<std::string_view, std::string_view> kLongNames[] = {
      {"-np", "--parallel"}, {"-npp", "--npp"}, {"-ntg", "--ntg"}, {"-npl", "--npl"},
      {"-ngl", "--n-gpu-layers"}, {"-sys", "--system-prompt"}};
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    for (const auto& [llama, name] : kLongNames) {
      if (args[i] == llama) args[i] = name;
    }
  }
  return args;
}

}  // namespace nt::cli
