#include "storage/read_queue.h"

#include <algorithm>
#include <exception>

#include "core/error.h"

namespace nt {

ReadQueue::ReadQueue(std::string source) : source_(std::move(source)), hook_thread_([this] { run_hooks(); }) {}

ReadQueue::~ReadQueue() {
  close();
  hook_thread_.join();
}

uint64_t ReadQueue::push(uint64_t file_offset, uint64_t bytes, uint8_t* dst, uint64_t chunk_bytes,
                         std::function<void()> before_write) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_ticket_++;
  // The extra part stands for "chunks still to be handed out", so the ticket
  // cannot complete between two chunks of the same request.
  tickets_[id].parts_left = 1;
  if (bytes == 0) {
    release_part_locked(id);
    return id;
  }
  const bool has_hook = bool(before_write);
  queue_.push_back(Request{id, file_offset, file_offset + bytes, dst, chunk_bytes, !has_hook});
  if (has_hook) {
    hooks_.emplace_back(id, std::move(before_write));
    hook_work_.notify_one();
  } else {
    work_.notify_all();
  }
  return id;
}

void ReadQueue::run_hooks() {
  std::unique_lock lock(mutex_);
  while (true) {
    hook_work_.wait(lock, [&] { return !hooks_.empty() || closed_; });
    if (hooks_.empty()) return;  // closed
    auto [ticket, hook] = std::move(hooks_.front());
    hooks_.pop_front();
    lock.unlock();
    std::string error;
    try {
      hook();
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    const auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Request& r) { return r.ticket == ticket; });
    if (error.empty()) {
      it->ready = true;
    } else {
      tickets_.at(ticket).error = source_ + ": the before_write hook of a read failed: " + error;
      queue_.erase(it);
      release_part_locked(ticket);
    }
    work_.notify_all();
  }
}

std::optional<ReadChunk> ReadQueue::next(Block block) {
  std::unique_lock lock(mutex_);
  while (queue_.empty() || !queue_.front().ready) {
    if ((queue_.empty() && closed_) || block == Block::No) return std::nullopt;
    work_.wait(lock);
  }
  Request& head = queue_.front();
  const ReadChunk chunk{head.ticket, head.next_offset, std::min(head.chunk_bytes, head.end - head.next_offset), head.next_dst};
  head.next_offset += chunk.bytes;
  head.next_dst += chunk.bytes;
  ++tickets_.at(chunk.ticket).parts_left;
  if (head.next_offset == head.end) {
    queue_.pop_front();
    release_part_locked(chunk.ticket);
  }
  return chunk;
}

void ReadQueue::finish(const ReadChunk& chunk, const std::string& error) {
  std::lock_guard lock(mutex_);
  Ticket& t = tickets_.at(chunk.ticket);
  if (!error.empty() && t.error.empty()) t.error = error;  // the first cause is the useful one
  release_part_locked(chunk.ticket);
}

bool ReadQueue::done(uint64_t ticket) {
  std::lock_guard lock(mutex_);
  const auto it = tickets_.find(ticket);
  if (it == tickets_.end()) fail("{}: read ticket {} is unknown or was already waited for", source_, ticket);
  return it->second.parts_left == 0;
}

void ReadQueue::wait(uint64_t ticket) {
  std::unique_lock lock(mutex_);
  const auto it = tickets_.find(ticket);
  if (it == tickets_.end()) fail("{}: read ticket {} is unknown or was already waited for", source_, ticket);
  finished_.wait(lock, [&] { return it->second.parts_left == 0; });
  const std::string error = std::move(it->second.error);
  tickets_.erase(it);
  if (!error.empty()) throw Error(error);
}

void ReadQueue::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  work_.notify_all();
  hook_work_.notify_all();
}

void ReadQueue::release_part_locked(uint64_t ticket) {
  if (--tickets_.at(ticket).parts_left == 0) finished_.notify_all();
}

}  // namespace nt
