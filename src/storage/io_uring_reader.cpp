// O_DIRECT reads through io_uring. One I/O thread owns the ring: it keeps up
// to queue_depth chunk reads in flight, reaps completions, resubmits short
// reads and finishes tickets. Reads bypass the page cache and land directly in
// the caller's (ideally pinned, ideally registered) staging memory, so a
// streamed layer costs the CPU nothing but the submissions.
#include <fmt/format.h>

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "storage/read_queue.h"
#include "storage/readers.h"

namespace nt {
namespace {

constexpr uint64_t kDirectAlignment = 4096;  // covers logical block sizes up to 4 KiB

class UringReader final : public FileReader {
 public:
  UringReader(const std::string& path, uint64_t size, int fd, const io_uring& ring, const ReaderOptions& o)
      : FileReader(path, size), fd_(fd), ring_(ring), queue_depth_(o.queue_depth), chunk_bytes_(o.chunk_bytes), queue_(path) {
    thread_ = std::thread([this] { run(); });
  }
  ~UringReader() override {
    queue_.close();
    thread_.join();  // drains every queued read: the kernel must not write into freed memory
    io_uring_queue_exit(&ring_);
    close(fd_);
  }

  IoBackend backend() const override { return IoBackend::Uring; }
  std::string description() const override {
    std::lock_guard lock(regions_mutex_);
    return fmt::format("io_uring O_DIRECT, {} x {} in flight{}", queue_depth_, format_size(chunk_bytes_),
                       regions_.empty() ? "" : ", registered buffers");
  }
  bool direct() const override { return true; }
  uint64_t alignment() const override { return kDirectAlignment; }

  ReadTicket read_async(ReadRequest request) override {
    check_request(request);
    const uint64_t begin = request.range.offset / kDirectAlignment * kDirectAlignment;
    const uint64_t bytes = staging_bytes(request.range);
    const uint64_t id =
        queue_.push(begin, bytes, static_cast<uint8_t*>(request.dst), chunk_bytes_, std::move(request.before_write));
    return {id, request.range.offset - begin};
  }
  void wait(const ReadTicket& ticket) override { queue_.wait(ticket.id); }
  bool done(const ReadTicket& ticket) override { return queue_.done(ticket.id); }

  // Fixed buffers spare the kernel pinning the destination pages on every
  // request. The kernel takes at most 1 GiB per buffer, so larger regions are
  // registered in pieces (a chunk straddling two pieces is read unfixed).
  // Call while no reads are in flight.
  bool register_memory(std::span<const MemoryRegion> regions) override {
    constexpr uint64_t kMaxFixedBuffer = 1ull << 30;
    std::lock_guard lock(regions_mutex_);
    if (!regions_.empty()) io_uring_unregister_buffers(&ring_);
    regions_.clear();
    if (regions.empty()) return true;
    std::vector<MemoryRegion> pieces;
    std::vector<iovec> iov;
    for (const MemoryRegion& r : regions) {
      for (uint64_t at = 0; at < r.bytes; at += kMaxFixedBuffer) {
        pieces.push_back({static_cast<uint8_t*>(r.base) + at, std::min(kMaxFixedBuffer, r.bytes - at)});
        iov.push_back({pieces.back().base, size_t(pieces.back().bytes)});
      }
    }
    if (io_uring_register_buffers(&ring_, iov.data(), unsigned(iov.size())) < 0) return false;
    regions_ = std::move(pieces);
    return true;
  }

 private:
  struct Slot {
    ReadChunk chunk;
    uint64_t done = 0;  // bytes of the chunk already read
  };

  void run();
  void prepare(uint32_t slot_index);
  // Handles one completion; returns true when the slot was resubmitted.
  bool complete(Slot& slot, int result);
  int registered_index(const uint8_t* dst, uint64_t bytes) const;

  int fd_;
  io_uring ring_;
  uint32_t queue_depth_;
  uint64_t chunk_bytes_;
  ReadQueue queue_;
  std::vector<Slot> slots_;
  mutable std::mutex regions_mutex_;
  std::vector<MemoryRegion> regions_;
  std::thread thread_;
};

void UringReader::run() {
  slots_.resize(queue_depth_);
  std::vector<uint32_t> free_slots;
  for (uint32_t i = queue_depth_; i > 0; --i) free_slots.push_back(i - 1);
  uint32_t in_flight = 0;
  while (true) {
    // Top up the queue; block for work only when the ring is idle.
    while (!free_slots.empty()) {
      const auto chunk = queue_.next(in_flight == 0 ? ReadQueue::Block::Yes : ReadQueue::Block::No);
      if (!chunk) break;
      const uint32_t s = free_slots.back();
      free_slots.pop_back();
      slots_[s] = Slot{*chunk, 0};
      prepare(s);
      ++in_flight;
    }
    if (in_flight == 0) return;  // closed and drained
    int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      // The ring itself failed: nothing in flight can be trusted to complete.
      // Fail loudly rather than hang the streaming thread forever.
      fmt::print(stderr, "fatal: io_uring submit on {} failed: {}\n", path(), std::strerror(-rc));
      std::abort();
    }
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      const auto s = uint32_t(io_uring_cqe_get_data64(cqe));
      const int result = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (!complete(slots_[s], result)) {
        free_slots.push_back(s);
        --in_flight;
      }
    }
  }
}

void UringReader::prepare(uint32_t s) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (!sqe) {  // the submission queue is full of prepared entries: hand them over first
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  const Slot& slot = slots_[s];
  uint8_t* dst = slot.chunk.dst + slot.done;
  const uint64_t bytes = slot.chunk.bytes - slot.done;
  const uint64_t offset = slot.chunk.file_offset + slot.done;
  const int fixed = registered_index(dst, bytes);
  if (fixed >= 0) {
    io_uring_prep_read_fixed(sqe, fd_, dst, unsigned(bytes), offset, fixed);
  } else {
    io_uring_prep_read(sqe, fd_, dst, unsigned(bytes), offset);
  }
  io_uring_sqe_set_data64(sqe, s);
}

bool UringReader::complete(Slot& slot, int result) {
  const ReadChunk& c = slot.chunk;
  if (result == -EAGAIN || result == -EINTR) {
    prepare(uint32_t(&slot - slots_.data()));
    return true;
  }
  std::string error;
  if (result < 0) {
    error = fmt::format("{}: read of {} bytes at byte {} failed: {}", path(), c.bytes - slot.done, c.file_offset + slot.done,
                        std::strerror(-result));
  } else {
    slot.done += uint64_t(result);
    const bool at_eof = c.file_offset + slot.done >= file_size();  // aligned ranges may end past EOF
    if (slot.done < c.bytes && !at_eof) {
      if (result == 0 || slot.done % kDirectAlignment != 0) {
        error = fmt::format("{}: short read at byte {} ({} of {} bytes) before the end of the file", path(),
                            c.file_offset, slot.done, c.bytes);
      } else {
        prepare(uint32_t(&slot - slots_.data()));
        return true;
      }
    }
  }
  queue_.finish(c, error);
  return false;
}

int UringReader::registered_index(const uint8_t* dst, uint64_t bytes) const {
  std::lock_guard lock(regions_mutex_);
  for (size_t i = 0; i < regions_.size(); ++i) {
    const auto* base = static_cast<const uint8_t*>(regions_[i].base);
    if (dst >= base && dst + bytes <= base + regions_[i].bytes) return int(i);
  }
  return -1;
}

// Reads the first block through the ring: some filesystems accept O_DIRECT at
// open and refuse it at read time, and some sandboxes refuse io_uring ops.
std::string probe_read(io_uring& ring, int fd) {
  void* block = std::aligned_alloc(kDirectAlignment, kDirectAlignment);
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_read(sqe, fd, block, unsigned(kDirectAlignment), 0);
  int rc = io_uring_submit(&ring);
  io_uring_cqe* cqe = nullptr;
  if (rc >= 0) rc = io_uring_wait_cqe(&ring, &cqe);
  if (rc >= 0) {
    rc = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
  }
  std::free(block);
  if (rc >= 0) return {};
  if (rc == -EINVAL) return "the filesystem refuses O_DIRECT reads (EINVAL)";
  return fmt::format("a test read failed: {}", std::strerror(-rc));
}

}  // namespace

std::unique_ptr<FileReader> open_uring_reader(const std::string& path, const ReaderOptions& options, std::string* why) {
  if (options.queue_depth == 0 || options.queue_depth > 4096) {
    fail("{}: io_uring queue depth {} is outside 1..4096", path, options.queue_depth);
  }
  if (options.chunk_bytes > (1ull << 30)) fail("{}: read chunk size {} is over 1 GiB", path, options.chunk_bytes);
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == EINVAL ? fmt::format("the filesystem of {} refuses O_DIRECT (e.g. tmpfs)", path)
                           : fmt::format("cannot open {}: {}", path, std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    *why = fmt::format("cannot stat {}: {}", path, std::strerror(errno));
    close(fd);
    return nullptr;
  }
  io_uring ring{};
  if (const int rc = io_uring_queue_init(options.queue_depth, &ring, 0); rc < 0) {
    *why = fmt::format("io_uring is unavailable: {}", std::strerror(-rc));
    close(fd);
    return nullptr;
  }
  if (std::string refused = probe_read(ring, fd); !refused.empty()) {
    *why = std::move(refused);
    io_uring_queue_exit(&ring);
    close(fd);
    return nullptr;
  }
  return std::make_unique<UringReader>(path, uint64_t(st.st_size), fd, ring, options);
}

}  // namespace nt
