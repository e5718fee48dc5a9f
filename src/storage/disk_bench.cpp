#include "storage/disk_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <memory>

#include "core/align.h"
#include "core/error.h"

namespace nt {
namespace {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

DiskBench measure_disk_read(const std::string& path, uint64_t bytes, const ReaderOptions& options) {
  constexpr uint64_t kRequestBytes = 64ull << 20;
  constexpr int kInFlight = 2;
  OpenedReader opened = open_file_reader(path, options);
  FileReader& reader = *opened.reader;
  const uint64_t a = std::max<uint64_t>(reader.alignment(), 4096);
  bytes = align_down(std::min(bytes, reader.file_size()), a);
  if (bytes == 0) fail("{}: too small to measure read speed ({} bytes)", path, reader.file_size());
  const uint64_t start = align_down((reader.file_size() - bytes) / 2, a);

  std::unique_ptr<void, AlignedFree> memory(std::aligned_alloc(a, kInFlight * (kRequestBytes + a)));
  if (!memory) fail("{}: cannot allocate {} MiB for the read benchmark", path, kInFlight * kRequestBytes >> 20);
  auto* base = static_cast<uint8_t*>(memory.get());
  const uint64_t slot_bytes = kRequestBytes + a;  // room for a request plus alignment slack
  const MemoryRegion region{base, kInFlight * slot_bytes};
  reader.register_memory({&region, 1});

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::deque<ReadTicket> in_flight;
  uint64_t offset = start;
  for (int slot = 0; offset < start + bytes; slot = (slot + 1) % kInFlight) {
    if (int(in_flight.size()) == kInFlight) {  // the slot's previous read must be done before reuse
      reader.wait(in_flight.front());
      in_flight.pop_front();
    }
    const uint64_t n = std::min(kRequestBytes, start + bytes - offset);
    in_flight.push_back(reader.read_async({{offset, n}, base + uint64_t(slot) * slot_bytes, nullptr}));
    offset += n;
  }
  for (const ReadTicket& t : in_flight) reader.wait(t);
  const double seconds = std::chrono::duration<double>(clock::now() - t0).count();

  DiskBench r;
  r.bytes = bytes;
  r.seconds = seconds;
  r.gbps = double(bytes) / seconds / 1e9;
  r.reader = reader.description();
  r.direct = reader.direct();
  r.notes = opened.notes;
  reader.register_memory({});  // the memory goes away before the reader does
  return r;
}

}  // namespace nt
