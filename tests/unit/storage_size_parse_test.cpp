#include <gtest/gtest.h>

#include <string>

#include "core/byte_size.h"
#include "core/error.h"
#include "storage/host_memory.h"

namespace nt {
namespace {

TEST(StorageSizeParse, UnitsAsDocumented) {
  EXPECT_EQ(parse_size("24GiB", "x"), 24ull * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_size("512MiB", "x"), 512ull * 1024 * 1024);
  EXPECT_EQ(parse_size("1.5GB", "x"), 1500000000ull);
  EXPECT_EQ(parse_size("800M", "x"), 800ull * 1024 * 1024);
  EXPECT_EQ(parse_size("1048576", "x"), 1048576ull);
  EXPECT_EQ(parse_size("17B", "x"), 17ull);
  EXPECT_EQ(parse_size("10kb", "x"), 10000ull);
  EXPECT_EQ(parse_size("4K", "x"), 4096ull);
  EXPECT_EQ(parse_size("2TB", "x"), 2000000000000ull);
  EXPECT_EQ(parse_size("3T", "x"), 3ull << 40);
  EXPECT_EQ(parse_size("1TiB", "x"), 1ull << 40);
  EXPECT_EQ(parse_size("0.5KiB", "x"), 512ull);
  EXPECT_EQ(parse_size("1.5gib", "x"), 3ull << 29);
  EXPECT_EQ(parse_size("  2 GiB ", "x"), 2ull << 30);
  EXPECT_EQ(parse_size("0", "x"), 0ull);
  EXPECT_EQ(parse_size(".25MiB", "x"), 256ull * 1024);
  EXPECT_EQ(parse_size("7.", "x"), 7ull);
  // Rounded to the nearest byte, exactly (no float detour): 0.1 GB is 10^8.
  EXPECT_EQ(parse_size("0.1GB", "x"), 100000000ull);
  EXPECT_EQ(parse_size("1.0000000001KB", "x"), 1000ull);
}

void expect_size_error(const std::string& text, const std::string& fragment) {
  try {
    parse_size(text, "--vram-budget");
    ADD_FAILURE() << "\"" << text << "\" was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--vram-budget"), std::string::npos) << message;
    EXPECT_NE(message.find("\"" + text + "\""), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

TEST(StorageSizeParse, BadStringsGiveClearErrors) {
  expect_size_error("", "empty");
  expect_size_error("   ", "empty");
  expect_size_error("-1GiB", "negative");
  expect_size_error("GiB", "does not start with a number");
  expect_size_error("abc", "does not start with a number");
  expect_size_error("12XB", "unknown unit \"xb\"");
  expect_size_error("1.2.3G", "unknown unit");
  expect_size_error("5 G B", "unknown unit");
  expect_size_error("1e9", "unknown unit");
  expect_size_error("16EiB", "unknown unit");
  expect_size_error("20000000000GiB", "larger than 2^64");
  expect_size_error("18446744073709551616", "larger than 2^64");
  expect_size_error("123456789012345678901234", "too many digits");
}

TEST(StorageSizeParse, LargestValueFits) {
  EXPECT_EQ(parse_size("18446744073709551615", "x"), UINT64_MAX);
  EXPECT_EQ(parse_size("16777215.9999999TiB", "x"), (16777215ull << 40) + 1099511517825ull);
}

TEST(StorageSizeParse, FormatsBinaryUnits) {
  EXPECT_EQ(format_size(17), "17 B");
  EXPECT_EQ(format_size(4096), "4.00 KiB");
  EXPECT_EQ(format_size(512ull << 20), "512.00 MiB");
  EXPECT_EQ(format_size(47ull << 29), "23.50 GiB");
  EXPECT_EQ(format_size(3ull << 40), "3.00 TiB");
}

TEST(StorageHostMemory, ParsesMemAvailable) {
  const std::string meminfo =
      "MemTotal:       24684096 kB\nMemFree:        21503200 kB\nMemAvailable:   23871160 kB\nBuffers: 44980 kB\n";
  EXPECT_EQ(parse_mem_available(meminfo, "meminfo"), 23871160ull * 1024);
  EXPECT_THROW(parse_mem_available("MemTotal: 1 kB\n", "meminfo"), Error);
  EXPECT_THROW(parse_mem_available("MemAvailable: lots\n", "meminfo"), Error);
  EXPECT_GT(host_mem_available(), 0ull);
}

}  // namespace
}  // namespace nt
