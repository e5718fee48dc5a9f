// A FileReader whose chunks are moved by a pool of worker threads, each chunk
// by one blocking call (memcpy from a mapping, cuFileRead). Subclasses start
// the pool at the end of their constructor and stop it first in their
// destructor, so workers never call into a half-built or half-destroyed object.
#pragma once

#include <string>
#include <thread>
#include <vector>

#include "storage/io_reader.h"
#include "storage/read_queue.h"

namespace nt {

class PooledReader : public FileReader {
 public:
  ReadTicket read_async(ReadRequest request) override;
  void wait(const ReadTicket& ticket) override { queue_.wait(ticket.id); }
  bool done(const ReadTicket& ticket) override { return queue_.done(ticket.id); }

 protected:
  PooledReader(std::string path, uint64_t file_size, uint64_t chunk_bytes);
  // Moves one chunk; returns an error message naming the file, or "" on success.
  virtual std::string read_chunk(const ReadChunk& chunk) = 0;
  // Lets a subclass prepare for a request (e.g. readahead) before it is queued.
  virtual void on_request(const FileRange&) {}

  void start(int threads);
  void stop();  // finishes every queued read, then joins the workers

  uint64_t chunk_bytes() const { return chunk_bytes_; }
  int threads() const { return int(workers_.size()); }

 private:
  ReadQueue queue_;
  uint64_t chunk_bytes_;
  std::vector<std::thread> workers_;
};

}  // namespace nt
