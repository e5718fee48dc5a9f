// upload_weights (the load path: reader -> pinned slots -> H2D -> re-lay)
// against the synchronous upload_matrix_rows, byte for byte on the device:
// several formats, a matrix stacked from parts at unaligned file offsets,
// parts split over slots and several parts sharing one, through every reader
// this machine can open; then its errors and its progress reports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/weights/weight_upload.h"
#include "core/error.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

struct TestMatrix {
  TensorType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;  // the file layout, all rows
  DeviceBuffer memory;
  DeviceMatrix m;
};

// Matrices of several formats written to a file at odd offsets, the second
// half of each matrix's rows before the first (a stacked matrix's parts need
// not be adjacent).
class UploadFixture {
 public:
  UploadFixture() {
    path_ = (std::filesystem::temp_directory_path() / ("nt_weight_upload_" + std::to_string(getpid()) + ".bin")).string();
    const std::pair<TensorType, int64_t> shapes[] = {
        {TensorType::Q4_K, 37}, {TensorType::Q6_K, 19}, {TensorType::F32, 5}, {TensorType::Q8_0, 64}, {TensorType::F16, 3}};
    std::vector<uint8_t> file;
    auto pad = [&](size_t n) {
      for (size_t i = 0; i < n; ++i) file.push_back(uint8_t(test::rng()()));
    };
    for (const auto& [type, rows] : shapes) {
      TestMatrix t{type, rows, 512, test::random_weights(type, rows, 512), {}, {}};
      t.memory = test::poisoned(device_matrix_bytes(type, rows, t.cols));
      t.m = place_device_matrix(type, rows, t.cols, t.memory.get());
      const uint64_t row = row_bytes(type, t.cols);
      const int64_t half = rows / 2;
      pad(1237);
      parts_.push_back({t.m, half, rows - half, file.size()});
      file.insert(file.end(), t.bytes.begin() + long(uint64_t(half) * row), t.bytes.end());
      pad(333);
      parts_.push_back({t.m, 0, half, file.size()});
      file.insert(file.end(), t.bytes.begin(), t.bytes.begin() + long(uint64_t(half) * row));
      matrices_.push_back(std::move(t));
    }
    pad(5000);
    std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
  }
  ~UploadFixture() { std::filesystem::remove(path_); }

  const std::string& path() const { return path_; }
  const std::vector<UploadPart>& parts() const { return parts_; }

  // Each matrix's device bytes equal those of the synchronous upload of its rows.
  void expect_uploaded(const std::string& what) const {
    for (const TestMatrix& t : matrices_) {
      const test::DeviceWeights want = test::upload_weights(t.type, t.bytes, t.rows, t.cols);
      std::vector<uint8_t> got(t.memory.size()), expected(t.memory.size());
      NT_CUDA_CHECK(cudaMemcpy(got.data(), t.memory.get(), got.size(), cudaMemcpyDeviceToHost));
      NT_CUDA_CHECK(cudaMemcpy(expected.data(), want.memory.get(), expected.size(), cudaMemcpyDeviceToHost));
      EXPECT_EQ(got, expected) << what << ": " << tensor_type_name(t.type);
    }
  }

 private:
  std::string path_;
  std::vector<TestMatrix> matrices_;
  std::vector<UploadPart> parts_;
};

TEST(WeightUpload, MatchesTheSynchronousUploadThroughEveryReader) {
  uint64_t largest_part = 0;
  const UploadFixture sizes;
  for (const UploadPart& p : sizes.parts()) {
    largest_part = std::max(largest_part, uint64_t(p.rows) * row_bytes(p.target.type, p.target.cols));
  }
  ASSERT_GT(largest_part, uint64_t(12 << 10)) << "the smallest slots must split a part";
  for (IoBackend backend : {IoBackend::Mmap, IoBackend::Uring}) {
    for (const UploadOptions options : {UploadOptions{12 << 10, 2}, UploadOptions{40 << 10, 3}, UploadOptions{}}) {
      UploadFixture fixture;
      ReaderOptions ro;
      ro.backend = backend;
      std::unique_ptr<FileReader> reader;
      try {
        reader = open_file_reader(fixture.path(), ro).reader;
      } catch (const Error& e) {
        std::printf("[ skipped  ] %s: %s\n", std::string(io_backend_name(backend)).c_str(), e.what());
        break;
      }
      std::vector<uint64_t> reported;
      upload_weights(*reader, fixture.parts(), options, [&](uint64_t done, uint64_t total) {
        EXPECT_EQ(total, upload_bytes(fixture.parts()));
        reported.push_back(done);
      });
      const std::string what = reader->description() + ", slots of " + std::to_string(options.slot_bytes);
      fixture.expect_uploaded(what);
      ASSERT_FALSE(reported.empty()) << what;
      EXPECT_TRUE(std::is_sorted(reported.begin(), reported.end())) << what;
      EXPECT_EQ(reported.back(), upload_bytes(fixture.parts())) << what;
      std::printf("[ reader   ] %s: %zu slots filled\n", what.c_str(), reported.size());
      if (options.slot_bytes == UploadOptions{}.slot_bytes) {
        EXPECT_EQ(reported.size(), 1u) << what << ": parts share a slot";
      }
    }
  }
}

TEST(WeightUpload, NamesTheFileForReadsPastItsEndAndRowsLongerThanASlot) {
  UploadFixture fixture;
  const auto reader = open_file_reader(fixture.path(), ReaderOptions{IoBackend::Mmap}).reader;
  std::vector<UploadPart> past_end = fixture.parts();
  past_end[3].file_offset = reader->file_size() - 100;
  try {
    upload_weights(*reader, past_end, {}, {});
    FAIL() << "expected a read past the end to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fixture.path()), std::string::npos) << e.what();
  }
  try {
    upload_weights(*reader, fixture.parts(), UploadOptions{1024, 2}, {});
    FAIL() << "expected a row longer than the slot to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fixture.path()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nt
