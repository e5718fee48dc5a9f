#include "cli/logits_file.h"

#include <fmt/core.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace nt::cli {

static_assert(std::endian::native == std::endian::little, "the logits file is little-endian float32");

LogitsFile::LogitsFile(std::string path, int64_t rows, int64_t vocab, int64_t first_position)
    : path_(std::move(path)), file_(std::fopen(path_.c_str(), "wb"), &std::fclose), rows_(rows), vocab_(vocab) {
  if (!file_) fail("--logits-out: cannot create '{}': {}", path_, std::strerror(errno));
  fmt::print(file_.get(), "{{\"dtype\": \"float32\", \"shape\": [{}, {}], \"first_position\": {}}}\n", rows, vocab,
             first_position);
}

void LogitsFile::write_row(std::span<const float> row) {
  if (int64_t(row.size()) != vocab_ || written_ == rows_) fail("{}: row {} does not fit the header's shape", path_, written_);
  if (std::fwrite(row.data(), sizeof(float), row.size(), file_.get()) != row.size()) {
    fail("--logits-out: cannot write '{}': {}", path_, std::strerror(errno));
  }
  ++written_;
}

void LogitsFile::close() {
  if (written_ != rows_) fail("{}: {} of {} rows written", path_, written_, rows_);
  if (std::fclose(file_.release()) != 0) fail("--logits-out: cannot write '{}': {}", path_, std::strerror(errno));
}

}  // namespace nt::cli
