// The fallback reader: memcpy out of a read-only mapping of the file by a
// worker pool (page faults of cold pages then proceed in parallel). Works on
// any filesystem, including those that refuse O_DIRECT, but goes through the
// page cache, so the kernel may evict other memory to hold the file.
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/byte_size.h"
#include "storage/pooled_reader.h"
#include "storage/readers.h"

namespace nt {
namespace {

class MmapReader final : public PooledReader {
 public:
  MmapReader(const std::string& path, uint64_t size, const uint8_t* base, const ReaderOptions& o)
      : PooledReader(path, size, o.chunk_bytes), base_(base) {
    start(o.threads);
  }
  ~MmapReader() override {
    stop();
    if (base_) munmap(const_cast<uint8_t*>(base_), file_size());
  }

  IoBackend backend() const override { return IoBackend::Mmap; }
  std::string description() const override {
    return fmt::format("mmap + {} memcpy threads, {} chunks (page cache)", threads(), format_size(chunk_bytes()));
  }
  bool direct() const override { return false; }
  uint64_t alignment() const override { return 1; }

 private:
  void on_request(const FileRange& range) override {
    if (range.bytes == 0) return;
    // Start readahead for the whole request so workers fault in warm pages.
    const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
    const uint64_t begin = range.offset / page * page;
    madvise(const_cast<uint8_t*>(base_ + begin), range.offset + range.bytes - begin, MADV_WILLNEED);
  }
  std::string read_chunk(const ReadChunk& c) override {
    std::memcpy(c.dst, base_ + c.file_offset, c.bytes);
    return {};
  }

  const uint8_t* base_;
};

}  // namespace

std::unique_ptr<FileReader> open_mmap_reader(const std::string& path, const ReaderOptions& options, std::string* why) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = fmt::format("cannot open {}: {}", path, std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  const bool stat_ok = fstat(fd, &st) == 0;
  const uint64_t size = stat_ok ? uint64_t(st.st_size) : 0;
  void* map = nullptr;
  if (stat_ok && size > 0) map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);  // the mapping keeps the file
  if (!stat_ok || map == MAP_FAILED) {
    *why = fmt::format("cannot map {}: {}", path, std::strerror(err));
    return nullptr;
  }
  return std::make_unique<MmapReader>(path, size, static_cast<const uint8_t*>(map), options);
}

}  // namespace nt
