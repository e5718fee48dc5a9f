// The bookkeeping every FileReader shares: a FIFO of requests split into
// chunks, and tickets that complete when all their chunks have. Requests with
// a before_write hook are held back until the hook returns; hooks run in
// submission order on the queue's own thread, never on a reader's I/O thread,
// so earlier reads keep completing while a hook waits. Readers only supply the
// code that moves one chunk.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

namespace nt {

struct ReadChunk {
  uint64_t ticket = 0;
  uint64_t file_offset = 0;
  uint64_t bytes = 0;
  uint8_t* dst = nullptr;
};

class ReadQueue {
 public:
  explicit ReadQueue(std::string source);  // names the file in errors
  ~ReadQueue();                            // after close() and after every handed-out chunk finished

  // Queues [file_offset, file_offset + bytes) -> dst in chunks of chunk_bytes;
  // returns the ticket id. A request of 0 bytes completes at once.
  uint64_t push(uint64_t file_offset, uint64_t bytes, uint8_t* dst, uint64_t chunk_bytes,
                std::function<void()> before_write);

  enum class Block { No, Yes };
  // The next chunk. Block::Yes waits for one, and returns nullopt only once
  // close() was called and every request was handed out; Block::No returns
  // nullopt when none is ready now.
  std::optional<ReadChunk> next(Block block);

  // Reports one chunk finished; a non-empty error fails its ticket.
  void finish(const ReadChunk& chunk, const std::string& error = {});

  bool done(uint64_t ticket);
  // Waits for the ticket and forgets it; throws nt::Error with its first error.
  void wait(uint64_t ticket);

  // No more requests: lets next() return nullopt once the queue drains.
  void close();

 private:
  struct Request {
    uint64_t ticket;
    uint64_t next_offset, end;
    uint8_t* next_dst;
    uint64_t chunk_bytes;
    bool ready;  // its hook (if any) has returned
  };
  struct Ticket {
    uint64_t parts_left = 0;  // chunks not yet finished, +1 while chunks are still to be handed out
    std::string error;
  };
  void run_hooks();
  void release_part_locked(uint64_t ticket);

  std::string source_;
  std::mutex mutex_;
  std::condition_variable work_;      // a request became ready, or close
  std::condition_variable hook_work_; // a hook was queued, or close
  std::condition_variable finished_;  // a ticket completed
  std::deque<Request> queue_;
  std::deque<std::pair<uint64_t, std::function<void()>>> hooks_;
  std::unordered_map<uint64_t, Ticket> tickets_;
  uint64_t next_ticket_ = 1;
  bool closed_ = false;
  std::thread hook_thread_;
};

}  // namespace nt
