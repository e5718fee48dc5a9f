// llama.cpp spells some flags with one dash and several letters (-np, -npp,
// -ntg, -npl, -ngl, -sys), which CLI11 cannot declare: they are rewritten to their long
// names before parsing, so both spellings work. Arguments after "--" stay as
// they are.
#pragma once

#include <string>
#include <vector>

namespace nt::cli {

std::vector<std::string> expand_llama_style_flags(int argc, const char* const* argv);

}  // namespace nt::cli
