// Hands a communicator's bootstrap id (NCCL's 128-byte unique id) from rank 0
// to the other processes of a run through a file they all can see: rank 0
// publishes it, the others wait for it. The file holds the id as hex text, so
// a launcher may also write it, or copy it between hosts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nt {

std::string to_hex(const std::vector<uint8_t>& bytes);

// Exactly `bytes` bytes as 2 x bytes hex digits (surrounding whitespace
// allowed); throws nt::Error naming `source` otherwise.
std::vector<uint8_t> from_hex(std::string_view text, size_t bytes, std::string_view source);

// Writes the id to `path` atomically (a temporary file renamed over it), so a
// reader never sees half an id; throws naming the file on failure.
void publish_unique_id(const std::string& path, const std::vector<uint8_t>& id);

// Waits up to timeout_s for `path` to hold an id of `bytes` bytes; throws
// naming the file when it does not appear in time or holds something else.
std::vector<uint8_t> wait_for_unique_id(const std::string& path, size_t bytes, double timeout_s);

}  // namespace nt
