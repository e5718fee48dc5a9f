#include "runtime/rank_messages.h"

#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace nt {
namespace {

constexpr uint32_t kMagic = 0x4d52544e;  // "NTRM"
constexpr uint32_t kVersion = 1;
// Bounds a length field may claim before its bytes are even looked for.
constexpr uint64_t kMaxItems = uint64_t(1) << 32;

enum class Kind : uint32_t { Setup = 1, Pass, PageCopies, RowMoves, Stop };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Setup: return "setup";
    case Kind::Pass: return "pass";
    case Kind::PageCopies: return "page copies";
    case Kind::RowMoves: return "row moves";
    case Kind::Stop: return "stop";
  }
  return "unknown";
}

class Writer {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof value);
  }
  template <typename T>
  void put_all(std::span<const T> values) {
    put<uint64_t>(values.size());
    for (const T& v : values) put(v);
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  void set_kind(const char* kind) { kind_ = kind; }

  template <typename T>
  T get(const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (bytes_.size() - at_ < sizeof(T)) {
      fail("tensor-split {} message of {} bytes ends at byte {}, inside its {}", kind_, bytes_.size(), at_, field);
    }
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof value);
    at_ += sizeof value;
    return value;
  }
  // A count followed by that many items of at least item_bytes each.
  uint64_t count(const char* field, size_t item_bytes) {
    const uint64_t n = get<uint64_t>(field);
    if (n > kMaxItems || n * item_bytes > bytes_.size() - at_) {
      fail("tensor-split {} message: {} claims {} items, more than its {} remaining bytes hold", kind_, field, n,
           bytes_.size() - at_);
    }
    return n;
  }
  template <typename T>
  std::vector<T> get_all(const char* field) {
    std::vector<T> out(count(field, sizeof(T)));
    for (T& v : out) v = get<T>(field);
    return out;
  }
  void finish() const {
    if (at_ != bytes_.size()) fail("tensor-split {} message has {} bytes past its end", kind_, bytes_.size() - at_);
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
  const char* kind_ = "";
};

void put_shard(Writer& w, const TensorShard& s) {
  for (const int64_t v : {s.first_kv_head, s.kv_heads, s.first_ffn_column, s.ffn_columns}) w.put(v);
}

TensorShard get_shard(Reader& r) {
  TensorShard s;
  s.first_kv_head = r.get<int64_t>("shard");
  s.kv_heads = r.get<int64_t>("shard");
  s.first_ffn_column = r.get<int64_t>("shard");
  s.ffn_columns = r.get<int64_t>("shard");
  return s;
}

void put_entry(Writer& w, const BatchEntry& e) {
  w.put(e.token);
  w.put(e.pos);
  w.put(e.seq);
  w.put(uint8_t(e.output));
  w.put(uint8_t(e.stepwise));
  w.put(e.parent);
}

constexpr size_t kEntryBytes = 4 + 8 + 4 + 1 + 1 + 4;

BatchEntry get_entry(Reader& r) {
  BatchEntry e;
  e.token = r.get<int32_t>("entry token");
  e.pos = r.get<int64_t>("entry position");
  e.seq = r.get<SeqId>("entry sequence");
  const uint8_t output = r.get<uint8_t>("entry output");
  if (output > uint8_t(Output::Top)) fail("tensor-split pass message: entry output kind {} is not one of 0-3", output);
  e.output = Output(output);
  const uint8_t stepwise = r.get<uint8_t>("entry stepwise flag");
  if (stepwise > 1) fail("tensor-split pass message: entry stepwise flag {} is not 0 or 1", stepwise);
  e.stepwise = stepwise == 1;
  e.parent = r.get<int32_t>("entry parent");
  return e;
}

struct Encoder {
  Writer& w;
  void operator()(const RankSetup& s) {
    if (s.tiers.size() != s.shards.size()) fail("a tensor-split setup of {} shards with tiers for {} ranks", s.shards.size(), s.tiers.size());
    w.put(Kind::Setup);
    w.put(s.leader_pid);
    w.put_all<char>(s.leader_space);
    for (const int64_t v : {s.model.n_layers, s.model.dim, s.model.vocab_size}) w.put(v);
    w.put(s.model.file_bytes);
    w.put<uint64_t>(s.shards.size());
    for (const TensorShard& shard : s.shards) put_shard(w, shard);
    for (const std::vector<Tier>& tiers : s.tiers) w.put_all<Tier>(tiers);
    for (const int64_t v : {s.context, s.max_batch, s.max_sequences, s.kv_pool}) w.put(v);
  }
  void operator()(const RankPass& p) {
    w.put(Kind::Pass);
    w.put(p.batch.top_k);
    w.put<uint64_t>(p.batch.size());
    for (const BatchEntry& e : p.batch.entries) put_entry(w, e);
    w.put_all<int32_t>(p.layers);
    w.put<uint64_t>(p.books.size());
    for (const SequenceBooks& b : p.books) {
      w.put(b.seq);
      w.put(b.length);
      w.put_all<int32_t>(b.pages);
    }
  }
  void operator()(const RankPageCopies& c) {
    w.put(Kind::PageCopies);
    w.put_all<PageCopy>(c.copies);
  }
  void operator()(const RankRowMoves& m) {
    w.put(Kind::RowMoves);
    w.put_all<RowCopy>(m.moves);
  }
  void operator()(const RankStop&) { w.put(Kind::Stop); }
};

RankSetup decode_setup(Reader& r) {
  RankSetup s;
  s.leader_pid = r.get<int64_t>("rank 0's process");
  const std::vector<char> space = r.get_all<char>("rank 0's host");
  s.leader_space.assign(space.begin(), space.end());
  s.model.n_layers = r.get<int64_t>("model layers");
  s.model.dim = r.get<int64_t>("model width");
  s.model.vocab_size = r.get<int64_t>("model vocabulary");
  s.model.file_bytes = r.get<uint64_t>("model file size");
  const uint64_t ranks = r.count("shards", 32);
  if (ranks == 0) fail("tensor-split setup message names no rank");
  for (uint64_t i = 0; i < ranks; ++i) s.shards.push_back(get_shard(r));
  for (uint64_t i = 0; i < ranks; ++i) {
    s.tiers.push_back(r.get_all<Tier>("tiers"));
    for (const Tier t : s.tiers.back()) {
      if (t != Tier::Vram && t != Tier::Ram && t != Tier::Disk) fail("tensor-split setup message: tier {} is not one of 0-2", int(t));
    }
  }
  s.context = r.get<int64_t>("context");
  s.max_batch = r.get<int64_t>("chunk size");
  s.max_sequences = r.get<int64_t>("sequence count");
  s.kv_pool = r.get<int64_t>("KV pool size");
  return s;
}

RankPass decode_pass(Reader& r) {
  RankPass p;
  p.batch.top_k = r.get<int64_t>("top-k");
  const uint64_t entries = r.count("entries", kEntryBytes);
  p.batch.entries.reserve(entries);
  for (uint64_t i = 0; i < entries; ++i) p.batch.entries.push_back(get_entry(r));
  p.layers = r.get_all<int32_t>("layers");
  const uint64_t books = r.count("books", 4 + 8 + 8);
  for (uint64_t i = 0; i < books; ++i) {
    SequenceBooks b;
    b.seq = r.get<SeqId>("books sequence");
    b.length = r.get<int64_t>("books length");
    b.pages = r.get_all<int32_t>("books pages");
    p.books.push_back(std::move(b));
  }
  return p;
}

}  // namespace

std::vector<uint8_t> encode_rank_message(const RankMessage& message) {
  Writer w;
  w.put(kMagic);
  w.put(kVersion);
  std::visit(Encoder{w}, message);
  return w.take();
}

RankMessage decode_rank_message(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  r.set_kind("(unknown kind)");
  const uint32_t magic = r.get<uint32_t>("header");
  if (magic != kMagic) fail("not a tensor-split message: it starts with {:#010x}, not {:#010x}", magic, kMagic);
  const uint32_t version = r.get<uint32_t>("header");
  if (version != kVersion) {
    fail("tensor-split message of version {}, this build speaks version {}: run the same build on every rank", version,
         kVersion);
  }
  const auto kind = Kind(r.get<uint32_t>("kind"));
  r.set_kind(kind_name(kind));
  RankMessage message;
  switch (kind) {
    case Kind::Setup: message = decode_setup(r); break;
    case Kind::Pass: message = decode_pass(r); break;
    case Kind::PageCopies: message = RankPageCopies{r.get_all<PageCopy>("copies")}; break;
    case Kind::RowMoves: message = RankRowMoves{r.get_all<RowCopy>("moves")}; break;
    case Kind::Stop: message = RankStop{}; break;
    default: fail("tensor-split message of unknown kind {}", uint32_t(kind));
  }
  r.finish();
  return message;
}

std::vector<SequenceBooks> books_of(const KvPages& pages, std::span<const SequenceRun> runs) {
  std::vector<SequenceBooks> books;
  for (const SequenceRun& run : runs) {
    const std::span<const int32_t> held = pages.pages(run.seq);
    books.push_back({run.seq, pages.length(run.seq), {held.begin(), held.end()}});
  }
  return books;
}

}  // namespace nt
