// The storage readers against the bytes of a file the test writes itself:
// random offsets and sizes (unaligned included), many requests in flight,
// reads past the end, the before_write hook, registered memory, and the
// fallbacks. Each test prints which reader ran.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "storage/disk_bench.h"
#include "storage/io_reader.h"

namespace nt {
namespace {

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, AlignedFree>;

Buffer aligned_buffer(uint64_t bytes) {
  const uint64_t rounded = std::max<uint64_t>(4096, (bytes + 4095) / 4096 * 4096);
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(4096, rounded)));
}

uint64_t random_seed() {
  const uint64_t seed = std::random_device{}() * 0x9e3779b97f4a7c15ull ^ uint64_t(std::random_device{}());
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

// A file of random bytes, kept in memory as the reference.
class TestFile {
 public:
  TestFile(const std::filesystem::path& dir, uint64_t bytes, uint64_t seed) {
    path_ = (dir / ("nt_storage_test_" + std::to_string(getpid()) + "_" + std::to_string(seed % 1000000) + ".bin")).string();
    content_.resize(bytes);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i + 8 <= content_.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(content_.data() + i, &v, 8);
    }
    for (size_t i = content_.size() / 8 * 8; i < content_.size(); ++i) content_[i] = uint8_t(rng());
    std::ofstream out(path_, std::ios::binary);
    out.write(reinterpret_cast<const char*>(content_.data()), std::streamsize(content_.size()));
    if (!out) throw std::runtime_error("cannot write " + path_);
  }
  ~TestFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }
  const std::vector<uint8_t>& content() const { return content_; }

 private:
  std::string path_;
  std::vector<uint8_t> content_;
};

// 64 MiB minus a few bytes, so the end of the file is not block aligned.
constexpr uint64_t kFileBytes = (64ull << 20) - 1234;

class StorageReader : public ::testing::TestWithParam<IoBackend> {
 protected:
  static void SetUpTestSuite() { file_ = new TestFile(std::filesystem::temp_directory_path(), kFileBytes, random_seed()); }
  static void TearDownTestSuite() {
    delete file_;
    file_ = nullptr;
  }

  // The reader of this test's backend, or nullptr (with a note) when it cannot run here.
  std::unique_ptr<FileReader> open(ReaderOptions options = {}) {
    options.backend = GetParam();
    try {
      auto reader = open_file_reader(file_->path(), options).reader;
      std::printf("[ reader   ] %s\n", reader->description().c_str());
      return reader;
    } catch (const Error& e) {
      std::printf("[ reader   ] %s unavailable here: %s\n", std::string(io_backend_name(GetParam())).c_str(), e.what());
      return nullptr;
    }
  }

  void expect_bytes(const uint8_t* data, FileRange r) {
    ASSERT_EQ(std::memcmp(data, file_->content().data() + r.offset, r.bytes), 0)
        << "bytes differ for [" << r.offset << ", " << r.offset + r.bytes << ")";
  }

  static TestFile* file_;
};
TestFile* StorageReader::file_ = nullptr;

FileRange random_range(std::mt19937_64& rng, uint64_t file_bytes, uint64_t max_bytes) {
  FileRange r;
  switch (rng() % 4) {
    case 0:  // ends exactly at the end of the file
      r.bytes = 1 + rng() % max_bytes;
      r.offset = file_bytes - r.bytes;
      break;
    case 1:  // block aligned start
      r.offset = (rng() % file_bytes) / 4096 * 4096;
      r.bytes = 1 + rng() % std::min(max_bytes, file_bytes - r.offset);
      break;
    default:  // anything
      r.offset = rng() % file_bytes;
      r.bytes = 1 + rng() % std::min(max_bytes, file_bytes - r.offset);
  }
  return r;
}

TEST_P(StorageReader, RandomRangesMatchTheFile) {
  auto reader = open();
  if (!reader) GTEST_SKIP() << "backend unavailable here; the auto test covers the fallback";
  std::mt19937_64 rng(random_seed());
  for (int i = 0; i < 150; ++i) {
    const FileRange r = random_range(rng, kFileBytes, (i % 10 == 0) ? (8ull << 20) : 300000);
    Buffer dst = aligned_buffer(reader->staging_bytes(r));
    const uint64_t data_offset = reader->read(r, dst.get());
    EXPECT_EQ(data_offset, r.offset % reader->alignment());
    EXPECT_LE(data_offset + r.bytes, reader->staging_bytes(r));
    expect_bytes(dst.get() + data_offset, r);
  }
  // Small reads at awkward places: the first byte, the last byte, block edges.
  for (const FileRange r : {FileRange{0, 1}, FileRange{kFileBytes - 1, 1}, FileRange{4095, 2}, FileRange{4096, 4096},
                            FileRange{kFileBytes - 5000, 5000}, FileRange{0, kFileBytes}}) {
    Buffer dst = aligned_buffer(reader->staging_bytes(r));
    expect_bytes(dst.get() + reader->read(r, dst.get()), r);
  }
}

TEST_P(StorageReader, ManyConcurrentRequests) {
  ReaderOptions options;
  options.queue_depth = 32;
  options.chunk_bytes = 64 << 10;  // small chunks: many more requests than queue slots
  auto reader = open(options);
  if (!reader) GTEST_SKIP() << "backend unavailable here";
  std::mt19937_64 rng(random_seed());
  struct Pending {
    FileRange range;
    Buffer dst;
    ReadTicket ticket;
  };
  std::vector<Pending> pending;
  for (int i = 0; i < 300; ++i) {
    Pending p;
    p.range = random_range(rng, kFileBytes, 1 << 20);
    p.dst = aligned_buffer(reader->staging_bytes(p.range));
    p.ticket = reader->read_async({p.range, p.dst.get(), nullptr});
    pending.push_back(std::move(p));
  }
  std::shuffle(pending.begin(), pending.end(), rng);  // completion order must not matter
  for (auto& p : pending) {
    reader->wait(p.ticket);
    EXPECT_EQ(p.ticket.data_offset, p.range.offset % reader->alignment());
    expect_bytes(p.dst.get() + p.ticket.data_offset, p.range);
  }
}

TEST_P(StorageReader, ConcurrentSubmittersFromSeveralThreads) {
  auto reader = open();
  if (!reader) GTEST_SKIP() << "backend unavailable here";
  const uint64_t seed = random_seed();
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + uint64_t(t));
      for (int i = 0; i < 40; ++i) {
        const FileRange r = random_range(rng, kFileBytes, 500000);
        Buffer dst = aligned_buffer(reader->staging_bytes(r));
        const uint64_t off = reader->read(r, dst.get());
        if (std::memcmp(dst.get() + off, file_->content().data() + r.offset, r.bytes) != 0) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_P(StorageReader, ReadPastTheEndFailsNamingTheFile) {
  auto reader = open();
  if (!reader) GTEST_SKIP() << "backend unavailable here";
  Buffer dst = aligned_buffer(1 << 20);
  for (const FileRange r : {FileRange{kFileBytes - 10, 11}, FileRange{kFileBytes + 1, 0}, FileRange{kFileBytes * 2, 4096},
                            FileRange{1, UINT64_MAX}}) {
    try {
      reader->read(r, dst.get());
      ADD_FAILURE() << "read of [" << r.offset << ", +" << r.bytes << ") past the end succeeded";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(file_->path()), std::string::npos) << message;
      EXPECT_NE(message.find("past the end"), std::string::npos) << message;
    }
  }
  // Reading nothing at the very end is fine.
  EXPECT_NO_THROW(reader->read({kFileBytes, 0}, dst.get()));
}

TEST_P(StorageReader, MisalignedDestinationIsRefused) {
  auto reader = open();
  if (!reader) GTEST_SKIP() << "backend unavailable here";
  if (reader->alignment() == 1) GTEST_SKIP() << "this reader takes any destination";
  Buffer dst = aligned_buffer(1 << 20);
  EXPECT_THROW(reader->read({0, 100}, dst.get() + 8), Error);
}

TEST_P(StorageReader, BeforeWriteHookRunsFirstAndDoesNotBlockEarlierReads) {
  auto reader = open();
  if (!reader) GTEST_SKIP() << "backend unavailable here";
  const FileRange a{100, 3 << 20}, b{5000, 5 << 20};
  Buffer dst_a = aligned_buffer(reader->staging_bytes(a)), dst_b = aligned_buffer(reader->staging_bytes(b));
  std::memset(dst_b.get(), 0xA5, reader->staging_bytes(b));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> untouched_at_hook{false}, hook_ran{false};
  const ReadTicket ta = reader->read_async({a, dst_a.get(), nullptr});
  const ReadTicket tb = reader->read_async({b, dst_b.get(), [&] {
                                              const uint64_t n = reader->staging_bytes(b);
                                              untouched_at_hook = std::all_of(dst_b.get(), dst_b.get() + n,
                                                                              [](uint8_t v) { return v == 0xA5; });
                                              hook_ran = true;
                                              released.wait();  // like waiting on the H2D copy still reading dst_b
                                            }});
  reader->wait(ta);  // must not need the blocked request
  expect_bytes(dst_a.get() + ta.data_offset, a);
  // The hook holds its request back: nothing of b may have landed yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(reader->done(tb));
  EXPECT_TRUE(std::all_of(dst_b.get(), dst_b.get() + reader->staging_bytes(b), [](uint8_t v) { return v == 0xA5; }));
  release.set_value();
  reader->wait(tb);
  EXPECT_TRUE(hook_ran.load());
  EXPECT_TRUE(untouched_at_hook.load());
  expect_bytes(dst_b.get() + tb.data_offset, b);
}

TEST_P(StorageReader, FailingHookFailsItsTicketOnly) {
  auto reader = open();
  if (!reader) GTEST_SKIP() << "backend unavailable here";
  const FileRange r{0, 1 << 20};
  Buffer dst = aligned_buffer(reader->staging_bytes(r));
  const ReadTicket bad = reader->read_async({r, dst.get(), [] { throw Error("copy event failed"); }});
  try {
    reader->wait(bad);
    ADD_FAILURE() << "a failed hook did not fail the read";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("copy event failed"), std::string::npos) << message;
    EXPECT_NE(message.find(file_->path()), std::string::npos) << message;
  }
  expect_bytes(dst.get() + reader->read(r, dst.get()), r);  // the reader still works
}

TEST_P(StorageReader, TicketsAreWaitedOnce) {
  auto reader = open();
  if (!reader) GTEST_SKIP() << "backend unavailable here";
  Buffer dst = aligned_buffer(1 << 20);
  const ReadTicket t = reader->read_async({{0, 1000}, dst.get(), nullptr});
  reader->wait(t);
  EXPECT_THROW(reader->wait(t), Error);
  EXPECT_THROW(reader->done(t), Error);
}

TEST_P(StorageReader, ReadsIntoRegisteredMemory) {
  auto reader = open();
  if (!reader) GTEST_SKIP() << "backend unavailable here";
  constexpr uint64_t kRegion = 16 << 20;
  Buffer region = aligned_buffer(kRegion);
  const MemoryRegion regions[] = {{region.get(), kRegion}};
  const bool registered = reader->register_memory(regions);
  std::printf("[ reader   ] memory registration %s: %s\n", registered ? "accepted" : "not supported",
              reader->description().c_str());
  std::mt19937_64 rng(random_seed());
  for (int i = 0; i < 40; ++i) {
    const FileRange r = random_range(rng, kFileBytes, 4 << 20);
    const uint64_t slack = (kRegion - reader->staging_bytes(r)) / 4096;
    uint8_t* dst = region.get() + (rng() % (slack + 1)) * 4096;
    expect_bytes(dst + reader->read(r, dst), r);
  }
  // A destination outside the registered region still works.
  Buffer other = aligned_buffer(1 << 20);
  expect_bytes(other.get() + reader->read({12345, 500000}, other.get()), {12345, 500000});
  if (registered) {
    EXPECT_TRUE(reader->register_memory({})) << "unregistering must work";
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, StorageReader, ::testing::Values(IoBackend::Uring, IoBackend::Mmap),
                         [](const auto& info) { return std::string(io_backend_name(info.param)); });

TEST(StorageReaderOpen, AutoPicksAWorkingReaderAndSaysWhy) {
  TestFile file(std::filesystem::temp_directory_path(), 3 << 20, random_seed());
  const OpenedReader opened = open_file_reader(file.path());
  std::printf("[ auto     ] %s: %s%s%s\n", std::string(io_backend_name(opened.reader->backend())).c_str(),
              opened.reader->description().c_str(), opened.notes.empty() ? "" : " -- ", opened.notes.c_str());
  EXPECT_NE(opened.reader->backend(), IoBackend::CuFile) << "auto must not pick cuFile for host destinations";
  Buffer dst = aligned_buffer(3 << 20);
  const FileRange r{777, (3 << 20) - 777};
  const uint64_t off = opened.reader->read(r, dst.get());
  EXPECT_EQ(std::memcmp(dst.get() + off, file.content().data() + r.offset, r.bytes), 0);
}

// tmpfs refuses O_DIRECT on older kernels (and accepts it since 6.6): either
// way auto must give a reader that returns the right bytes, and say which.
TEST(StorageReaderOpen, FallsBackOnFilesystemsWithoutDirectIo) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  TestFile file("/dev/shm", (2 << 20) + 3, random_seed());
  const OpenedReader opened = open_file_reader(file.path());
  std::printf("[ tmpfs    ] %s: %s%s%s\n", std::string(io_backend_name(opened.reader->backend())).c_str(),
              opened.reader->description().c_str(), opened.notes.empty() ? "" : " -- ", opened.notes.c_str());
  if (opened.reader->backend() == IoBackend::Mmap) {
    EXPECT_NE(opened.notes.find("uring not used"), std::string::npos) << opened.notes;
  }
  Buffer dst = aligned_buffer(3 << 20);
  const FileRange r{4097, (2 << 20) - 5000};
  const uint64_t off = opened.reader->read(r, dst.get());
  EXPECT_EQ(std::memcmp(dst.get() + off, file.content().data() + r.offset, r.bytes), 0);
}

// procfs refuses O_DIRECT with EINVAL on every kernel: the fallback runs here
// for certain, whatever /tmp and /dev/shm accept.
TEST(StorageReaderOpen, DirectIoRefusedFallsBackToMmapWithANote) {
  const std::string path = "/proc/version";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no procfs";
  const OpenedReader opened = open_file_reader(path);
  std::printf("[ procfs   ] %s: %s -- %s\n", std::string(io_backend_name(opened.reader->backend())).c_str(),
              opened.reader->description().c_str(), opened.notes.c_str());
  EXPECT_EQ(opened.reader->backend(), IoBackend::Mmap);
  EXPECT_NE(opened.notes.find("refuses O_DIRECT"), std::string::npos) << opened.notes;
  ReaderOptions uring;
  uring.backend = IoBackend::Uring;
  try {
    open_file_reader(path, uring);
    ADD_FAILURE() << "--io uring opened a file that refuses O_DIRECT";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uring is unavailable"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(StorageReaderOpen, CuFileIsTakenOnlyWhenItWorks) {
  TestFile file(std::filesystem::temp_directory_path(), 1 << 20, random_seed());
  ReaderOptions device;
  device.device_destinations = true;
  const OpenedReader opened = open_file_reader(file.path(), device);
  std::printf("[ device   ] %s: %s\n", std::string(io_backend_name(opened.reader->backend())).c_str(), opened.notes.c_str());
  if (opened.reader->backend() != IoBackend::CuFile) {
    EXPECT_NE(opened.notes.find("cufile not used"), std::string::npos) << opened.notes;
  }
  ReaderOptions explicit_cufile;
  explicit_cufile.backend = IoBackend::CuFile;
  try {
    open_file_reader(file.path(), explicit_cufile);
    std::printf("[ cufile   ] available\n");
  } catch (const Error& e) {
    std::printf("[ cufile   ] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("cufile is unavailable"), std::string::npos) << e.what();
  }
}

TEST(StorageReaderOpen, MissingFileAndBadOptions) {
  const std::string missing = "/nonexistent/nt_storage_missing.gguf";
  try {
    open_file_reader(missing);
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  TestFile file(std::filesystem::temp_directory_path(), 8192, random_seed());
  ReaderOptions odd_chunk;
  odd_chunk.chunk_bytes = 1000;
  EXPECT_THROW(open_file_reader(file.path(), odd_chunk), Error);
  EXPECT_EQ(parse_io_backend("uring"), IoBackend::Uring);
  EXPECT_THROW(parse_io_backend("spdk"), Error);
}

TEST(StorageReaderOpen, EmptyFile) {
  TestFile file(std::filesystem::temp_directory_path(), 0, random_seed());
  for (IoBackend b : {IoBackend::Auto, IoBackend::Mmap}) {
    ReaderOptions o;
    o.backend = b;
    auto reader = open_file_reader(file.path(), o).reader;
    Buffer dst = aligned_buffer(4096);
    EXPECT_NO_THROW(reader->read({0, 0}, dst.get()));
    EXPECT_THROW(reader->read({0, 1}, dst.get()), Error);
  }
}

TEST(StorageDiskBench, MeasuresTheFile) {
  TestFile file(std::filesystem::temp_directory_path(), (48ull << 20) + 100, random_seed());
  const DiskBench b = measure_disk_read(file.path(), 40ull << 20);
  std::printf("[ disk     ] %.2f GB/s (%llu bytes in %.4f s, %s, %s)\n", b.gbps, static_cast<unsigned long long>(b.bytes),
              b.seconds, b.reader.c_str(), b.direct ? "O_DIRECT" : "page cache");
  EXPECT_EQ(b.bytes, 40ull << 20);
  EXPECT_GT(b.gbps, 0.0);
  EXPECT_NEAR(b.gbps, double(b.bytes) / b.seconds / 1e9, 1e-9 * b.gbps);
  const DiskBench whole = measure_disk_read(file.path(), 1ull << 40);  // capped at the file
  EXPECT_EQ(whole.bytes, (48ull << 20));
}

}  // namespace
}  // namespace nt
