// How fast storage delivers a file: the planner's disk speed when none is
// given, and the benchmarks' storage line.
#pragma once

#include <cstdint>
#include <string>

#include "storage/io_reader.h"

namespace nt {

struct DiskBench {
  double gbps = 0;      // 1e9 bytes per second
  uint64_t bytes = 0;   // bytes read
  double seconds = 0;
  std::string reader;   // the reader's description
  bool direct = false;  // false: read through the page cache, not a device speed
  std::string notes;    // why faster readers were passed over
};

// Reads `bytes` (at most the file) from the middle of `path` into host memory
// with the given reader, two 64 MiB requests in flight, and times it. With
// O_DIRECT (uring) this is the device's sequential read speed whatever the
// page cache holds.
DiskBench measure_disk_read(const std::string& path, uint64_t bytes, const ReaderOptions& options = {});

}  // namespace nt
