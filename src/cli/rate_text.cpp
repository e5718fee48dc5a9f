#include <fmt/format.h>

#include "cli/commands.h"

namespace nt::cli {

std::string rate_text(double tokens, double seconds) {
  if (!(seconds > 0) || !(tokens > 0)) return "–";
  return fmt::format("{:.1f} tok/s", tokens / seconds);
}

}  // namespace nt::cli
