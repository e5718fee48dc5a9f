#include "storage/host_memory.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace nt {

uint64_t parse_mem_available(std::string_view meminfo, std::string_view source) {
  constexpr std::string_view key = "MemAvailable:";
  const size_t at = meminfo.find(key);
  if (at == std::string_view::npos) fail("{}: no MemAvailable line (kernel older than 3.14?)", source);
  std::string_view rest = meminfo.substr(at + key.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  uint64_t kib = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kib);
  const std::string_view unit = rest.substr(size_t(end - rest.data()), 3);
  if (ec != std::errc() || unit != " kB") fail("{}: cannot read the MemAvailable line", source);
  return kib * 1024;
}

uint64_t host_mem_available() {
  constexpr const char* path = "/proc/meminfo";
  std::ifstream in(path);
  if (!in) fail("cannot read {} to size the RAM budget; pass --ram-budget", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_mem_available(text.str(), path);
}

}  // namespace nt
