#include "core/output_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace nt {
namespace {

namespace fs = std::filesystem;

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nt_output_file_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::string contents(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  fs::path dir_;
};

TEST_F(OutputFileTest, AppearsAtItsPathOnlyWhenCommitted) {
  const fs::path path = dir_ / "out.txt";
  {
    std::ofstream(path) << "old";
    OutputFile out(path.string(), "-o");
    std::fputs("new", out.stream());
    std::fflush(out.stream());
    EXPECT_EQ(contents(path), "old");  // the old file is untouched while the new one is written
    EXPECT_EQ(names().size(), 2u);
    out.commit();
  }
  EXPECT_EQ(contents(path), "new");
  EXPECT_EQ(names(), std::vector<std::string>{"out.txt"});
}

TEST_F(OutputFileTest, AnUncommittedFileLeavesNothingBehind) {
  { OutputFile out((dir_ / "out.txt").string(), "-o"); }
  EXPECT_TRUE(names().empty());
}

TEST_F(OutputFileTest, AMissingDirectoryIsNamedWithTheReason) {
  try {
    OutputFile out((dir_ / "absent" / "out.txt").string(), "--ids-out");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ids-out"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
}

TEST_F(OutputFileTest, AnOutputOverItsInputIsRefusedByAnyName) {
  const fs::path in = dir_ / "in.gguf";
  std::ofstream(in) << "model";
  fs::create_symlink(in, dir_ / "link.gguf");
  fs::create_hard_link(in, dir_ / "hard.gguf");
  for (const fs::path& out : {in, dir_ / "link.gguf", dir_ / "hard.gguf", dir_ / "." / "in.gguf"}) {
    EXPECT_THROW(refuse_output_over_input(in.string(), "IN", out.string(), "OUT"), Error) << out;
  }
  EXPECT_NO_THROW(refuse_output_over_input(in.string(), "IN", (dir_ / "other.gguf").string(), "OUT"));
  EXPECT_EQ(contents(in), "model");
}

}  // namespace
}  // namespace nt
