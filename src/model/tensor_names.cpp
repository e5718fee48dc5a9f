#include "model/tensor_names.h"

#include <charconv>
#include <fmt/format.h>

namespace nt {

std::optional<int64_t> layer_of_tensor(std::string_view name) {
  constexpr std::string_view prefix = "blk.";
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  int64_t layer = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || end == name.data() || end == name.data() + name.size() || *end != '.') return std::nullopt;
  return layer;
}

std::string layer_tensor_name(int64_t layer, std::string_view part) {
  return fmt::format("blk.{}.{}.weight", layer, part);
}

}  // namespace nt
