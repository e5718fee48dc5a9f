// Sequence memory: which pages of the KV pool hold which sequence's positions.
// The pool is a fixed number of pages of page_size positions each, shared by
// every sequence, so sequences of any lengths fit without fragmentation. A
// sequence's position p lives in page pages(seq)[p / page_size] at slot
// p % page_size. Pages are reference counted: copying a prefix shares its
// pages, and a write into a shared page first copies it (the backend makes
// the PageCopy this returns). This class only keeps the books; the backend
// owns the memory.
//
// A book with a window keeps the sliding-window layers' positions: a query
// at position p sees only (p - window, p], so a write releases the pages
// that no query of it or after it can see, and a sequence holds about a
// window of positions however long it grows. It keeps `margin` positions
// more, so that a sequence can step back that far (a draft model's rejected
// tokens, a chat turn rendered again). A released page's entry in pages(seq)
// is kReleased; resuming a sequence before what it still holds is an error
// that names the window.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/align.h"
#include "runtime/batch.h"

namespace nt {

// Which layers' book a copy belongs to: the full-attention layers' (all
// layers when there is no window book) or the sliding-window layers'.
enum class KvBook : uint8_t { Full, Window };

struct PageCopy {
  int32_t from = 0, to = 0;  // physical pages: every layer's K and V of `from` go to `to`
  KvBook book = KvBook::Full;
};

struct RowCopy {
  int64_t from = 0, to = 0;  // physical rows (KvPages::slot): every layer's K and V of `from` go to `to`
  KvBook book = KvBook::Full;
};

class KvPages {
 public:
  // `max_length`: positions one sequence may hold (the context), at most
  // page_count * page_size; `max_sequences`: live sequences at once (0: any
  // number; a backend's block table may hold only so many); `window`: the
  // sliding window this book keeps (0: every position), and `margin` more.
  KvPages(int64_t page_count, int64_t page_size, int64_t max_length, int64_t max_sequences = 0, int64_t window = 0,
          int64_t margin = 0);

  static constexpr int32_t kReleased = -1;  // a page entry the window released

  // A new empty sequence (pages are taken as positions are written), its id
  // below max_sequences when that is set; nt::Error when all are live.
  SeqId allocate();
  void free(SeqId seq);
  // Forgets positions from `length` on.
  void truncate(SeqId seq, int64_t length);
  // Makes dst (emptied first) hold the first n positions of src, sharing its pages.
  std::vector<PageCopy> copy_prefix(SeqId src, SeqId dst, int64_t n);
  // Makes room for positions [from, end) of seq, which must continue it
  // (from <= length; positions from `from` on are dropped first): new pages,
  // and a copy of a shared page the write lands in. Throws nt::Error naming
  // the shortfall when the pool or the sequence's maximum length runs out,
  // or (with a window) when positions before `from` that its queries see
  // were released; nothing changes then. The sequence's length becomes
  // `end`, and a window releases the pages before from - window + 1 - margin.
  std::vector<PageCopy> write(SeqId seq, int64_t from, int64_t end);
  // Books that follow another pool's (a tensor-split rank in another process
  // follows rank 0's): seq, allocated if it was not, holds `length`
  // positions in exactly these pages, shared by count with any other holder.
  // nt::Error naming the sequence when the pages do not fit this pool.
  void mirror(SeqId seq, int64_t length, std::span<const int32_t> pages);

  bool holds(SeqId seq) const;
  int64_t length(SeqId seq) const;
  std::span<const int32_t> pages(SeqId seq) const;
  // Physical slot (page * page_size + offset) of a held position.
  int64_t slot(SeqId seq, int64_t pos) const;
  // Whether a held position's page is shared with another sequence (copy_prefix).
  bool shared(SeqId seq, int64_t pos) const;
  // Whether a write may start at `from` (<= length): the positions its
  // queries see before it are held. Always true without a window.
  bool resumable(SeqId seq, int64_t from) const;
  // Pages the sequence holds (released ones not counted).
  int64_t held_pages(SeqId seq) const;
  // The first position whose page the sequence holds (its length when it holds none).
  int64_t first_held(SeqId seq) const { return first_held(live(seq)); }

  int64_t page_size() const { return page_size_; }
  int64_t page_count() const { return int64_t(refs_.size()); }
  int64_t max_length() const { return max_length_; }
  int64_t window() const { return window_; }
  int64_t free_pages() const { return int64_t(free_.size()); }
  // Pages a sequence of `length` positions needs, counting none it shares
  // (nor any a window releases).
  int64_t pages_for(int64_t length) const { return ceil_div(length, page_size_); }
  // Pages a window book's sequence holds at most when one write adds up to
  // `write` positions: the window and margin before the write, and the write.
  static int64_t window_pages(int64_t window, int64_t margin, int64_t write, int64_t page_size) {
    return ceil_div(window - 1 + margin + write, page_size) + 1;
  }
  int64_t sequences() const;

  // Pages of a pool of `pool_positions` positions shared by all sequences,
  // or when that is 0 of `sequences` whole contexts of `context` positions.
  static int64_t pool_pages(int64_t pool_positions, int64_t sequences, int64_t context, int64_t page_size) {
    const auto pages = [&](int64_t positions) { return ceil_div(positions, page_size); };
    return pool_positions > 0 ? pages(pool_positions) : sequences * pages(context);
  }
  // nt::Error naming --kv-pool unless a pool of `pool_positions` (0: whole
  // contexts) holds one sequence of `context` positions.
  static void check_pool(int64_t pool_positions, int64_t context);

 private:
  struct Sequence {
    bool live = false;
    int64_t length = 0;
    std::vector<int32_t> pages;
  };
  Sequence& live(SeqId seq);
  const Sequence& live(SeqId seq) const;
  void release(int32_t page);
  int32_t take_page();
  // The first position a write from `from` reads: its queries' window.
  int64_t first_seen(int64_t from) const { return window_ > 0 ? std::max<int64_t>(0, from - window_ + 1) : 0; }
  int64_t first_held(const Sequence& s) const;  // the first position whose page is held

  int64_t page_size_, max_length_;
  int64_t max_sequences_;
  int64_t window_, margin_;
  std::vector<int32_t> refs_;   // per page
  std::vector<int32_t> free_;   // pages with no reference, lowest last
  std::vector<Sequence> seqs_;  // by id; freed ids are reused
};

}  // namespace nt
