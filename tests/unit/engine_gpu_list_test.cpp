// --gpus and per-GPU sizes: lists as people type them, and errors that name
// the flag and the bad item for everything else.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "engine/gpu_list.h"
#include "error_text.h"

namespace nt {
namespace {

using test::error_of;

constexpr uint64_t GiB = 1ull << 30;

TEST(GpuList, ParsesIndicesInOrder) {
  EXPECT_EQ(parse_gpu_ids("0,1", "--gpus"), (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_gpu_ids(" 3 , 1,2 ", "--gpus"), (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(parse_gpu_ids("5", "--gpus"), (std::vector<int>{5}));
}

TEST(GpuList, RejectsBadSyntaxNamingTheFlagAndItem) {
  for (const auto& [text, item] : {std::pair{"0,x", "'x'"}, std::pair{"-1", "'-1'"}, std::pair{"0,1.5", "'1.5'"},
                                   std::pair{"0;1", "'0;1'"}, std::pair{"1e3", "'1e3'"}}) {
    const std::string e = error_of([&] { parse_gpu_ids(text, "--gpus"); });
    EXPECT_NE(e.find("--gpus"), std::string::npos) << text << ": " << e;
    EXPECT_NE(e.find(item), std::string::npos) << text << ": " << e;
  }
  for (const char* text : {"", "0,", ",1", "0,,1", " "}) {
    const std::string e = error_of([&] { parse_gpu_ids(text, "--gpus"); });
    EXPECT_NE(e.find("empty item"), std::string::npos) << "'" << text << "': " << e;
  }
}

TEST(GpuList, KeepsARepeatedGpu) {
  EXPECT_EQ(parse_gpu_ids("0,1,0", "--gpus"), (std::vector<int>{0, 1, 0}));  // stages sharing GPU 0
}

TEST(GpuList, SizesOneForAllOrOnePerGpu) {
  const std::vector<int> two{0, 1};
  EXPECT_EQ(parse_per_gpu_sizes("24GiB", two, "--vram-budget"), (std::vector<uint64_t>{24 * GiB, 24 * GiB}));
  EXPECT_EQ(parse_per_gpu_sizes("24GiB, 20GiB", two, "--vram-budget"), (std::vector<uint64_t>{24 * GiB, 20 * GiB}));
  const std::string count = error_of([&] { parse_per_gpu_sizes("1GiB,2GiB,3GiB", two, "--vram-budget"); });
  EXPECT_NE(count.find("3 values for 2 GPUs"), std::string::npos) << count;
  const std::string bad = error_of([&] { parse_per_gpu_sizes("1GiB,lots", two, "--vram-budget"); });
  EXPECT_NE(bad.find("--vram-budget"), std::string::npos) << bad;
  EXPECT_NE(bad.find("lots"), std::string::npos) << bad;
}

}  // namespace
}  // namespace nt
