#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "runtime/pass_chunks.h"

namespace nt {
namespace {

std::vector<int64_t> sizes(const std::vector<PassChunk>& chunks) {
  std::vector<int64_t> out;
  int64_t at = 0;
  for (const PassChunk& c : chunks) {
    EXPECT_EQ(c.at, at) << "chunks follow each other";
    at += c.n;
    out.push_back(c.n);
  }
  return out;
}

TEST(PassChunks, PromptsRunInChunksOfTheBatchSize) {
  EXPECT_EQ(sizes(pass_chunks(130, false, 64, 2)), (std::vector<int64_t>{64, 64, 2}));
  EXPECT_EQ(sizes(pass_chunks(64, false, 64, 2)), (std::vector<int64_t>{64}));
}

TEST(PassChunks, DecodeStepsSplitIntoNearEqualMicroBatches) {
  EXPECT_EQ(sizes(pass_chunks(9, true, 64, 2)), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(sizes(pass_chunks(8, true, 64, 3)), (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(sizes(pass_chunks(2, true, 64, 3)), (std::vector<int64_t>{1, 1})) << "at most one piece a sequence";
  EXPECT_EQ(sizes(pass_chunks(1, true, 64, 2)), (std::vector<int64_t>{1}));
  EXPECT_EQ(sizes(pass_chunks(8, true, 64, 1)), (std::vector<int64_t>{8})) << "micro-batching off";
  EXPECT_EQ(sizes(pass_chunks(100, true, 64, 2)), (std::vector<int64_t>{64, 36})) << "longer than a chunk: chunks";
}

TEST(PassChunks, RejectsEmptyChunks) {
  EXPECT_THROW(pass_chunks(8, true, 0, 2), Error);
  EXPECT_THROW(pass_chunks(8, true, 64, 0), Error);
}

}  // namespace
}  // namespace nt
