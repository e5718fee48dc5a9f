// Asynchronous reads of byte ranges of one file into caller-owned memory:
// the storage tier of layer streaming. Three implementations, chosen fastest
// first by open_file_reader:
//   cufile  GPUDirect Storage through a dlopen'ed libcufile (destination may be
//           device memory: NVMe -> VRAM without a host bounce)
//   uring   O_DIRECT reads through io_uring, many 1 MiB requests in flight,
//           straight into (pinned) host staging memory; bypasses the page cache
//   mmap    memcpy from a file mapping by a worker pool; the fallback for
//           filesystems that refuse O_DIRECT (tmpfs) or kernels without io_uring
//
// Alignment contract. Direct I/O moves whole aligned blocks, and GGUF tensors
// are not 4 KiB aligned in the file. A reader therefore reads the enclosing
// aligned range [align_down(offset), align_up(offset + bytes)) into `dst`, and
// the wanted bytes start `ReadTicket::data_offset` bytes into dst (=
// offset % alignment(); 0 for mmap). Size destinations with staging_bytes() and
// align them to alignment(). No CPU copy is ever made to "fix up" alignment.
//
// Reuse contract (the staging race the reference system had). A read writes
// into dst from the moment it starts until wait() returns for its ticket, and
// nothing else may read dst meanwhile. Before a read starts writing, dst must be
// free of earlier users (e.g. an H2D copy still reading it). Either the caller
// makes sure of that before read_async (e.g. cudaEventSynchronize), or it passes
// ReadRequest::before_write, which the reader calls on a thread of its own, in
// submission order, and before any byte of that request is written (e.g. a
// lambda that synchronizes the CUDA event of the copy that last read this
// slot). The hook lets the streaming thread queue the read of layer N+2 into a
// busy slot without blocking. Earlier requests keep completing while a hook
// waits; requests start in submission order, so it holds back only its own
// request and those queued after it. A hook that throws fails its ticket.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace nt {

enum class IoBackend { Auto, CuFile, Uring, Mmap };

std::string_view io_backend_name(IoBackend backend);
// "auto", "cufile", "uring" or "mmap"; throws naming `what` otherwise.
IoBackend parse_io_backend(std::string_view text, std::string_view what = "--io");

// Bytes [offset, offset + bytes) of the file.
struct FileRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct ReadRequest {
  FileRange range;
  void* dst = nullptr;  // alignment()-aligned, staging_bytes(range) long
  std::function<void()> before_write;  // optional "may I overwrite dst" wait; see the reuse contract
};

struct ReadTicket {
  uint64_t id = 0;
  uint64_t data_offset = 0;  // the range's first byte is at (uint8_t*)dst + data_offset
};

// Memory the reader may pre-register with the kernel / driver (io_uring fixed
// buffers, cuFileBufRegister). Reads into it skip per-request page pinning.
struct MemoryRegion {
  void* base = nullptr;
  uint64_t bytes = 0;
};

class FileReader {
 public:
  virtual ~FileReader() = default;  // waits for every read still in flight

  virtual IoBackend backend() const = 0;
  // For logs: "io_uring O_DIRECT, 64 x 1 MiB in flight".
  virtual std::string description() const = 0;
  // Whether reads bypass the page cache (so measured speeds are the device's).
  virtual bool direct() const = 0;
  // Whether dst may be device (cudaMalloc) memory.
  virtual bool accepts_device_memory() const { return false; }
  // Required alignment of file offsets, lengths and dst; 1 when any will do.
  virtual uint64_t alignment() const = 0;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }

  // Bytes of destination a read of `range` needs (the enclosing aligned range).
  uint64_t staging_bytes(FileRange range) const;

  // Starts the read and returns at once. Throws nt::Error naming the file for a
  // range past its end or a misaligned dst. Safe to call from several threads.
  virtual ReadTicket read_async(ReadRequest request) = 0;
  // Blocks until the read is complete; throws nt::Error naming the file, offset
  // and cause if it failed. Every ticket must be waited exactly once.
  virtual void wait(const ReadTicket& ticket) = 0;
  // True when wait() would not block.
  virtual bool done(const ReadTicket& ticket) = 0;

  // Synchronous read; returns the data offset inside dst.
  uint64_t read(FileRange range, void* dst);

  // Best effort: false (and nothing changes) when not supported or refused.
  // Replaces earlier registrations. Regions must stay valid while registered.
  virtual bool register_memory(std::span<const MemoryRegion> regions);

 protected:
  FileReader(std::string path, uint64_t file_size) : path_(std::move(path)), file_size_(file_size) {}
  // Throws for ranges past the end of the file and misaligned dst.
  void check_request(const ReadRequest& request) const;

 private:
  std::string path_;
  uint64_t file_size_;
};

struct ReaderOptions {
  IoBackend backend = IoBackend::Auto;
  uint32_t queue_depth = 64;          // uring: requests in flight
  uint64_t chunk_bytes = 1ull << 20;  // one request's size (a multiple of 4 KiB)
  int threads = 4;                    // mmap and cufile worker threads
  // Auto considers cuFile only when the caller reads into device memory, and
  // only with the nvidia-fs kernel module (true GPUDirect); into host staging
  // it is no faster than io_uring.
  bool device_destinations = false;
};

struct OpenedReader {
  std::unique_ptr<FileReader> reader;
  std::string notes;  // why faster backends were passed over; empty when none were
};

// Opens `path` with the requested backend, or with the fastest that works for
// this file when backend is Auto (cufile, then uring, then mmap). An explicit
// backend that cannot be used throws nt::Error saying why.
OpenedReader open_file_reader(const std::string& path, const ReaderOptions& options = {});

// Waits for each ticket and ignores read errors: for unwinding after a
// failure (the error already reported) while reads may still be writing into
// memory that is about to be freed.
void wait_ignoring_errors(FileReader& reader, std::span<const ReadTicket> tickets);

}  // namespace nt
