// local_rank_channels (rank_channel.h): a queue per receiving rank, and a
// counting barrier for count_failed.
#include <condition_variable>
#include <deque>
#include <mutex>

#include "core/error.h"
#include "runtime/rank_channel.h"

namespace nt {
namespace {

class LocalHub {
 public:
  explicit LocalHub(int ranks) : ranks_(ranks), inboxes_(size_t(ranks)) {}

  void send(std::span<const uint8_t> message) {
    std::lock_guard lock(mutex_);
    for (size_t r = 1; r < inboxes_.size(); ++r) inboxes_[r].emplace_back(message.begin(), message.end());
    changed_.notify_all();
  }

  std::vector<uint8_t> receive(int rank) {
    std::unique_lock lock(mutex_);
    auto& inbox = inboxes_[size_t(rank)];
    changed_.wait(lock, [&] { return !inbox.empty(); });
    std::vector<uint8_t> message = std::move(inbox.front());
    inbox.pop_front();
    return message;
  }

  int count_failed(bool failed) {
    std::unique_lock lock(mutex_);
    const uint64_t round = round_;
    failed_ += failed ? 1 : 0;
    if (++arrived_ == ranks_) {
      result_ = failed_;
      arrived_ = failed_ = 0;
      ++round_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return round_ != round; });
    }
    return result_;
  }

 private:
  const int ranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::deque<std::vector<uint8_t>>> inboxes_;
  int arrived_ = 0, failed_ = 0, result_ = 0;
  uint64_t round_ = 0;
};

class LocalRankChannel final : public RankChannel {
 public:
  LocalRankChannel(std::shared_ptr<LocalHub> hub, int rank, int ranks) : hub_(std::move(hub)), rank_(rank), ranks_(ranks) {}
  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  void send(std::span<const uint8_t> message) override {
    if (rank_ != 0) fail("rank {} sent a tensor-split message: only rank 0 sends", rank_);
    hub_->send(message);
  }
  std::vector<uint8_t> receive() override {
    if (rank_ == 0) fail("rank 0 waited for a tensor-split message: rank 0 only sends");
    return hub_->receive(rank_);
  }
  int count_failed(bool failed) override { return hub_->count_failed(failed); }

 private:
  std::shared_ptr<LocalHub> hub_;
  int rank_, ranks_;
};

}  // namespace

std::vector<std::unique_ptr<RankChannel>> local_rank_channels(int ranks) {
  if (ranks < 1) fail("tensor-split channels for {} ranks: at least one", ranks);
  const auto hub = std::make_shared<LocalHub>(ranks);
  std::vector<std::unique_ptr<RankChannel>> channels;
  for (int r = 0; r < ranks; ++r) channels.push_back(std::make_unique<LocalRankChannel>(hub, r, ranks));
  return channels;
}

}  // namespace nt
