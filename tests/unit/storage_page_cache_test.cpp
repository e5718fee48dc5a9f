// page_cache_fraction on files the test writes: a file just written is in the
// page cache; one dropped from it (where the filesystem can drop it) is not.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "storage/page_cache.h"

namespace nt {
namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + std::to_string(getpid()))).string();
}

TEST(PageCache, AFileJustWrittenIsInItAndADroppedOneIsNot) {
  const std::string path = temp_path("nt_page_cache_");
  const std::vector<char> bytes(8 << 20, 'x');
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  EXPECT_EQ(page_cache_fraction(path), 1.0);

  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  struct statfs fs {};
  ASSERT_EQ(fstatfs(fd, &fs), 0);
  fdatasync(fd);  // dirty pages cannot be dropped
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  if (fs.f_type == TMPFS_MAGIC) {
    EXPECT_EQ(page_cache_fraction(path), 1.0) << "tmpfs keeps its files in memory";
  } else {
    EXPECT_LT(page_cache_fraction(path), 0.5);
  }
  std::filesystem::remove(path);
}

TEST(PageCache, MissingAndEmptyFilesCountAsCold) {
  const std::string path = temp_path("nt_page_cache_empty_");
  EXPECT_EQ(page_cache_fraction(path), 0.0);
  std::ofstream(path).close();
  EXPECT_EQ(page_cache_fraction(path), 0.0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace nt
