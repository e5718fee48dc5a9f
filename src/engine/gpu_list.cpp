#include "engine/gpu_list.h"

#include <charconv>
#include <string>

#include "core/byte_size.h"
#include "core/error.h"

namespace nt {
namespace {

std::string_view trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The comma-separated items, trimmed; an empty item is an error.
std::vector<std::string_view> items(std::string_view text, std::string_view flag, std::string_view example) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item = trimmed(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (item.empty()) fail("{} '{}': an empty item; expected a comma-separated list such as {}", flag, text, example);
    out.push_back(item);
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

}  // namespace

std::vector<int> parse_gpu_ids(std::string_view text, std::string_view flag) {
  std::vector<int> ids;
  for (std::string_view item : items(text, flag, "0,1")) {
    int id = -1;
    const auto [end, err] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (err != std::errc() || end != item.data() + item.size() || id < 0) {
      fail("{} '{}': '{}' is not a GPU index (a whole number from 0)", flag, text, item);
    }
    ids.push_back(id);
  }
  return ids;
}

std::vector<uint64_t> parse_per_gpu_sizes(std::string_view text, const std::vector<int>& gpus, std::string_view flag) {
  std::vector<uint64_t> sizes;
  for (std::string_view item : items(text, flag, "24GiB,24GiB")) sizes.push_back(parse_size(item, flag));
  if (sizes.size() == 1) sizes.resize(gpus.size(), sizes[0]);
  if (sizes.size() != gpus.size()) {
    fail("{} '{}': {} values for {} GPUs; give one for all or one per GPU", flag, text, sizes.size(), gpus.size());
  }
  return sizes;
}

}  // namespace nt
