#include "runtime/kv_pages.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace nt {

KvPages::KvPages(int64_t page_count, int64_t page_size, int64_t max_length, int64_t max_sequences, int64_t window,
                 int64_t margin)
    : page_size_(page_size), max_length_(max_length), max_sequences_(max_sequences), window_(window), margin_(margin) {
  if (max_sequences < 0) fail("KV pool for {} sequences: the count must not be negative", max_sequences);
  if (window < 0 || margin < 0) fail("KV pool with a window of {} positions and {} more: neither may be negative", window, margin);
  if (page_count <= 0 || page_size <= 0) fail("KV pool of {} pages of {} positions: both must be positive", page_count, page_size);
  // A window book needs room for one sequence's window and a write, not its context.
  if (max_length <= 0 || (window == 0 && max_length > page_count * page_size)) {
    fail("a sequence of up to {} positions does not fit a KV pool of {} positions", max_length, page_count * page_size);
  }
  refs_.assign(size_t(page_count), 0);
  for (int64_t p = page_count - 1; p >= 0; --p) free_.push_back(int32_t(p));  // page 0 is taken first
}

void KvPages::check_pool(int64_t pool_positions, int64_t context) {
  if (pool_positions < 0 || (pool_positions > 0 && pool_positions < context)) {
    fail("--kv-pool {}: the pool must hold at least one sequence's context of {} positions", pool_positions, context);
  }
}

KvPages::Sequence& KvPages::live(SeqId seq) {
  return const_cast<Sequence&>(static_cast<const KvPages&>(*this).live(seq));
}

const KvPages::Sequence& KvPages::live(SeqId seq) const {
  if (seq < 0 || size_t(seq) >= seqs_.size() || !seqs_[size_t(seq)].live) fail("sequence {} is not allocated", seq);
  return seqs_[size_t(seq)];
}

SeqId KvPages::allocate() {
  auto it = std::find_if(seqs_.begin(), seqs_.end(), [](const Sequence& s) { return !s.live; });
  if (it == seqs_.end() && max_sequences_ > 0 && int64_t(seqs_.size()) >= max_sequences_) {
    fail("KV pool: all {} sequences are in use (raise the number of parallel sequences)", max_sequences_);
  }
  if (it == seqs_.end()) it = seqs_.insert(seqs_.end(), Sequence{});
  it->live = true;
  return SeqId(it - seqs_.begin());
}

void KvPages::release(int32_t page) {
  if (--refs_[size_t(page)] == 0) free_.push_back(page);
}

int32_t KvPages::take_page() {
  const int32_t page = free_.back();
  free_.pop_back();
  refs_[size_t(page)] = 1;
  return page;
}

void KvPages::free(SeqId seq) {
  Sequence& s = live(seq);
  for (const int32_t page : s.pages) {
    if (page != kReleased) release(page);
  }
  s = Sequence{};
}

void KvPages::truncate(SeqId seq, int64_t length) {
  Sequence& s = live(seq);
  if (length < 0) fail("sequence {}: cannot truncate to {} positions", seq, length);
  if (length >= s.length) return;
  s.length = length;
  while (int64_t(s.pages.size()) > pages_for(length)) {
    if (s.pages.back() != kReleased) release(s.pages.back());
    s.pages.pop_back();
  }
}

std::vector<PageCopy> KvPages::copy_prefix(SeqId src, SeqId dst, int64_t n) {
  const Sequence& from = live(src);
  if (n < 0 || n > from.length) fail("sequence {} holds {} positions: cannot copy a prefix of {}", src, from.length, n);
  Sequence& to = live(dst);
  if (src == dst) return truncate(dst, n), std::vector<PageCopy>{};
  truncate(dst, 0);
  to.length = n;
  for (int64_t i = 0; i < pages_for(n); ++i) {
    const int32_t page = from.pages[size_t(i)];
    if (page != kReleased) ++refs_[size_t(page)];
    to.pages.push_back(page);
  }
  return {};
}

std::vector<PageCopy> KvPages::write(SeqId seq, int64_t from, int64_t end) {
  Sequence& s = live(seq);
  if (from < 0 || from > s.length) {
    fail("sequence {} holds {} positions: a write must continue it, not start at {}", seq, s.length, from);
  }
  if (end < from) fail("sequence {}: a write from {} to {} runs backwards", seq, from, end);
  if (end > max_length_) {
    fail("context overflow: sequence {} would hold {} positions, more than the context of {}", seq, end, max_length_);
  }
  if (!resumable(seq, from)) {
    fail("sequence {}: its sliding-window layers keep the last {} positions and released those before {}; it cannot "
         "continue from position {}, whose window starts at {}",
         seq, window_, first_held(s), from, first_seen(from));
  }
  // Pages the write needs: new ones past the kept prefix, and a private copy
  // of the page `from` lands in when another sequence shares it (or a fresh
  // one when a window of one released it: nothing before `from` is seen).
  const int64_t kept = pages_for(from);
  const int32_t landing = from % page_size_ != 0 ? s.pages[size_t(kept - 1)] : kReleased;
  const bool cow = landing != kReleased && refs_[size_t(landing)] > 1;
  const bool refill = from % page_size_ != 0 && landing == kReleased;
  const int64_t fresh = std::max<int64_t>(0, pages_for(end) - kept) + (cow || refill ? 1 : 0);
  // The pages past the kept prefix that only this sequence holds come free
  // first, and so do those before the write's window.
  const int64_t unseen = window_ > 0 ? std::max<int64_t>(0, first_seen(from) - margin_) / page_size_ : 0;
  int64_t available = free_pages();
  for (size_t i = 0; i < s.pages.size(); ++i) {
    if ((int64_t(i) >= kept || int64_t(i) < unseen) && s.pages[i] != kReleased) available += refs_[size_t(s.pages[i])] == 1 ? 1 : 0;
  }
  if (fresh > available) {
    fail("KV pool{} exhausted: sequence {} needs {} more pages of {} positions, {} of {} are free",
         window_ > 0 ? " of the sliding-window layers" : "", seq, fresh, page_size_, available, page_count());
  }
  truncate(seq, from);
  for (int64_t i = 0; i < unseen; ++i) {
    if (s.pages[size_t(i)] != kReleased) release(std::exchange(s.pages[size_t(i)], kReleased));
  }
  std::vector<PageCopy> copies;
  if (cow) {
    const int32_t own = take_page();
    copies.push_back({landing, own});
    release(landing);
    s.pages[size_t(kept - 1)] = own;
  }
  if (refill) s.pages[size_t(kept - 1)] = take_page();
  while (int64_t(s.pages.size()) < pages_for(end)) s.pages.push_back(take_page());
  s.length = end;
  return copies;
}

void KvPages::mirror(SeqId seq, int64_t length, std::span<const int32_t> pages) {
  if (seq < 0 || (max_sequences_ > 0 && seq >= max_sequences_)) {
    fail("mirrored books name sequence {}, outside this pool's {} sequences", seq, max_sequences_);
  }
  if (length < 0 || length > max_length_ || int64_t(pages.size()) != pages_for(length)) {
    fail("mirrored books of sequence {}: {} positions in {} pages do not fit pages of {} and a context of {}", seq, length,
         pages.size(), page_size_, max_length_);
  }
  for (const int32_t page : pages) {
    if (page < 0 || page >= page_count()) fail("mirrored books of sequence {} name page {} of a pool of {}", seq, page, page_count());
  }
  if (size_t(seq) >= seqs_.size()) seqs_.resize(size_t(seq) + 1);
  Sequence& s = seqs_[size_t(seq)];
  for (const int32_t page : pages) {  // taken before the old ones go, so a page kept is never freed
    if (refs_[size_t(page)]++ == 0) free_.erase(std::find(free_.begin(), free_.end(), page));
  }
  for (const int32_t page : s.pages) release(page);
  s.live = true;
  s.length = length;
  s.pages.assign(pages.begin(), pages.end());
}

bool KvPages::holds(SeqId seq) const { return seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live; }

int64_t KvPages::length(SeqId seq) const { return live(seq).length; }

std::span<const int32_t> KvPages::pages(SeqId seq) const { return live(seq).pages; }

int64_t KvPages::slot(SeqId seq, int64_t pos) const {
  const Sequence& s = live(seq);
  if (pos < 0 || pos >= s.length) fail("sequence {} holds {} positions, not position {}", seq, s.length, pos);
  const int32_t page = s.pages[size_t(pos / page_size_)];
  if (page == kReleased) fail("sequence {}: position {} lies before its sliding window and was released", seq, pos);
  return int64_t(page) * page_size_ + pos % page_size_;
}

bool KvPages::resumable(SeqId seq, int64_t from) const {
  const Sequence& s = live(seq);
  if (window_ == 0 || first_seen(from) >= from) return true;
  for (int64_t p = first_seen(from) / page_size_; p < pages_for(std::min(from, s.length)); ++p) {
    if (s.pages[size_t(p)] == kReleased) return false;
  }
  return true;
}

int64_t KvPages::first_held(const Sequence& s) const {
  const auto held = std::find_if(s.pages.begin(), s.pages.end(), [](int32_t page) { return page != kReleased; });
  return std::min(int64_t(held - s.pages.begin()) * page_size_, s.length);
}

int64_t KvPages::held_pages(SeqId seq) const {
  const auto& pages = live(seq).pages;
  return std::count_if(pages.begin(), pages.end(), [](int32_t page) { return page != kReleased; });
}

bool KvPages::shared(SeqId seq, int64_t pos) const {
  return refs_[size_t(slot(seq, pos) / page_size_)] > 1;
}

int64_t KvPages::sequences() const {
  return std::count_if(seqs_.begin(), seqs_.end(), [](const Sequence& s) { return s.live; });
}

}  // namespace nt
