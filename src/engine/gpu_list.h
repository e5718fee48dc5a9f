// `--gpus 0,1` and the per-GPU values beside it (`--vram-budget 24GiB,20GiB`,
// or one value for every GPU), parsed with errors that name the flag and item.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace nt {

// Non-negative device indices separated by commas (spaces allowed around
// them). A GPU may repeat: in a layer split it then holds several stages,
// which tests the pipeline on one GPU. Throws nt::Error naming `flag` for an
// empty list or item and an item that is not a whole number.
std::vector<int> parse_gpu_ids(std::string_view text, std::string_view flag);

// One size for all `gpus` or one per GPU in order (parse_size units).
// Throws naming `flag` when the count is neither 1 nor gpus.size().
std::vector<uint64_t> parse_per_gpu_sizes(std::string_view text, const std::vector<int>& gpus, std::string_view flag);

}  // namespace nt
