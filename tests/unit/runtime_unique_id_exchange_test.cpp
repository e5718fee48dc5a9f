// The communicator id hand-off: hex round trips, malformed ids and absent
// files are errors naming the file, and a reader waiting before the writer
// publishes gets the whole id.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "core/error.h"
#include "error_text.h"
#include "runtime/unique_id_exchange.h"

namespace nt {
namespace {

using test::error_of;

std::vector<uint8_t> random_id() {
  std::mt19937 rng(5);
  std::vector<uint8_t> id(128);
  for (auto& b : id) b = uint8_t(rng());
  id[0] = 0x00, id[1] = 0xff, id[2] = 0xa5;  // both ends of each digit
  return id;
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + "." + std::to_string(getpid()))).string();
}

TEST(UniqueIdExchange, HexRoundTrips) {
  const auto id = random_id();
  const std::string hex = to_hex(id);
  EXPECT_EQ(hex.substr(0, 6), "00ffa5");
  EXPECT_EQ(from_hex(hex, id.size(), "test"), id);
  EXPECT_EQ(from_hex("  " + hex + "\n", id.size(), "test"), id);
}

TEST(UniqueIdExchange, MalformedIdsNameTheSource) {
  std::string hex = to_hex(random_id());
  EXPECT_NE(error_of([&] { from_hex(hex.substr(2), 128, "id.txt"); }).find("id.txt: expected a 128-byte id"), std::string::npos);
  hex[10] = 'g';
  const std::string e = error_of([&] { from_hex(hex, 128, "id.txt"); });
  EXPECT_NE(e.find("id.txt"), std::string::npos) << e;
  EXPECT_NE(e.find("offset 10"), std::string::npos) << e;
}

TEST(UniqueIdExchange, ReaderWaitingBeforeThePublisherGetsTheId) {
  const std::string path = temp_path("nt_unique_id");
  std::filesystem::remove(path);
  const auto id = random_id();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    publish_unique_id(path, id);
  });
  EXPECT_EQ(wait_for_unique_id(path, id.size(), 30), id);
  writer.join();
  std::filesystem::remove(path);
}

TEST(UniqueIdExchange, AbsentOrBadFilesAreErrorsNamingTheFile) {
  const std::string path = temp_path("nt_unique_id_absent");
  std::filesystem::remove(path);
  const std::string absent = error_of([&] { wait_for_unique_id(path, 128, 0.05); });
  EXPECT_NE(absent.find(path), std::string::npos) << absent;
  EXPECT_NE(absent.find("rank 0"), std::string::npos) << absent;
  std::ofstream(path) << "not an id\n";
  const std::string bad = error_of([&] { wait_for_unique_id(path, 128, 1); });
  EXPECT_NE(bad.find(path), std::string::npos) << bad;
  std::filesystem::remove(path);
  EXPECT_NE(error_of([] { publish_unique_id("/nonexistent-dir/id", random_id()); }).find("/nonexistent-dir"),
            std::string::npos);
}

}  // namespace
}  // namespace nt
