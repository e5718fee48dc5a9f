// Host memory figures the planner's automatic RAM budget starts from.
#pragma once

#include <cstdint>
#include <string_view>

namespace nt {

// MemAvailable from /proc/meminfo, in bytes: what can be allocated without
// swapping (free memory plus reclaimable page cache). Throws if unreadable.
uint64_t host_mem_available();

// Parses MemAvailable out of /proc/meminfo text; throws naming `source`.
uint64_t parse_mem_available(std::string_view meminfo, std::string_view source);

}  // namespace nt
