#include "storage/io_reader.h"

#include "core/align.h"
#include "core/error.h"
#include "storage/readers.h"

namespace nt {

std::string_view io_backend_name(IoBackend backend) {
  switch (backend) {
    case IoBackend::Auto: return "auto";
    case IoBackend::CuFile: return "cufile";
    case IoBackend::Uring: return "uring";
    case IoBackend::Mmap: return "mmap";
  }
  return "?";
}

IoBackend parse_io_backend(std::string_view text, std::string_view what) {
  for (IoBackend b : {IoBackend::Auto, IoBackend::CuFile, IoBackend::Uring, IoBackend::Mmap}) {
    if (text == io_backend_name(b)) return b;
  }
  fail("{}: unknown I/O backend \"{}\" (use auto, cufile, uring or mmap)", what, text);
}

uint64_t FileReader::staging_bytes(FileRange range) const {
  if (range.bytes == 0) return 0;
  const uint64_t a = alignment();
  return align_up(range.offset + range.bytes, a) - align_down(range.offset, a);
}

void FileReader::check_request(const ReadRequest& r) const {
  if (r.range.offset > file_size_ || r.range.bytes > file_size_ - r.range.offset) {
    fail("{}: read of bytes [{}, {}) is past the end of the file ({} bytes)", path_, r.range.offset,
         r.range.offset + r.range.bytes, file_size_);
  }
  if (!r.dst && r.range.bytes > 0) fail("{}: read of {} bytes at byte {} into a null destination", path_, r.range.bytes, r.range.offset);
  if (reinterpret_cast<uintptr_t>(r.dst) % alignment() != 0) {
    fail("{}: {} reads need destinations aligned to {} bytes, got {}", path_, io_backend_name(backend()), alignment(), r.dst);
  }
}

uint64_t FileReader::read(FileRange range, void* dst) {
  const ReadTicket ticket = read_async({range, dst, nullptr});
  wait(ticket);
  return ticket.data_offset;
}

bool FileReader::register_memory(std::span<const MemoryRegion>) { return false; }

OpenedReader open_file_reader(const std::string& path, const ReaderOptions& options) {
  if (options.chunk_bytes == 0 || options.chunk_bytes % 4096 != 0) {
    fail("{}: read chunk size {} is not a positive multiple of 4096", path, options.chunk_bytes);
  }
  std::string why;
  switch (options.backend) {
    case IoBackend::CuFile:
      if (auto r = open_cufile_reader(path, options, &why)) return {std::move(r), ""};
      fail("{}: --io cufile is unavailable: {}", path, why);
    case IoBackend::Uring:
      if (auto r = open_uring_reader(path, options, &why)) return {std::move(r), ""};
      fail("{}: --io uring is unavailable: {}", path, why);
    case IoBackend::Mmap:
      if (auto r = open_mmap_reader(path, options, &why)) return {std::move(r), ""};
      fail("{}: --io mmap is unavailable: {}", path, why);
    case IoBackend::Auto: break;
  }
  std::string notes;
  auto note = [&](std::string_view backend, const std::string& reason) {
    notes += fmt::format("{}{} not used: {}", notes.empty() ? "" : "; ", backend, reason);
  };
  if (!options.device_destinations) {
    note("cufile", "reads go to host staging memory, where io_uring is as fast");
  } else if (!gpudirect_storage_driver_loaded()) {
    note("cufile", "the nvidia-fs driver is not loaded (no true GPUDirect Storage)");
  } else if (auto r = open_cufile_reader(path, options, &why)) {
    return {std::move(r), notes};
  } else {
    note("cufile", why);
  }
  if (auto r = open_uring_reader(path, options, &why)) return {std::move(r), notes};
  note("uring", why);
  if (auto r = open_mmap_reader(path, options, &why)) return {std::move(r), notes};
  fail("{}: no reader can open this file ({}; mmap: {})", path, notes, why);
}

void wait_ignoring_errors(FileReader& reader, std::span<const ReadTicket> tickets) {
  for (const ReadTicket& t : tickets) {
    try {
      reader.wait(t);
    } catch (const Error&) {
    }
  }
}

}  // namespace nt
