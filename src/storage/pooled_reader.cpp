#include "storage/pooled_reader.h"

#include <algorithm>

#include "core/align.h"

namespace nt {

PooledReader::PooledReader(std::string path, uint64_t file_size, uint64_t chunk_bytes)
    : FileReader(path, file_size), queue_(path), chunk_bytes_(chunk_bytes) {}

ReadTicket PooledReader::read_async(ReadRequest request) {
  check_request(request);
  const uint64_t a = alignment();
  const uint64_t begin = align_down(request.range.offset, a);
  // Unlike O_DIRECT in io_uring, these readers need not round the tail up past the end of the file.
  const uint64_t end = std::min(file_size(), align_up(request.range.offset + request.range.bytes, a));
  const uint64_t bytes = request.range.bytes == 0 ? 0 : end - begin;
  on_request({begin, bytes});
  const uint64_t id = queue_.push(begin, bytes, static_cast<uint8_t*>(request.dst), chunk_bytes_,
                                  std::move(request.before_write));
  return {id, request.range.offset - begin};
}

void PooledReader::start(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    workers_.emplace_back([this] {
      while (const auto chunk = queue_.next(ReadQueue::Block::Yes)) queue_.finish(*chunk, read_chunk(*chunk));
    });
  }
}

void PooledReader::stop() {
  queue_.close();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

}  // namespace nt
