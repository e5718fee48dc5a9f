#include "cli/logits_file.h"

#include <fmt/core.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace nt::cli {

static_assert(std::endian::native == std::endian::little, "the logits file is little-endian float32");

LogitsFile::LogitsFile(std::string path, int64_t rows, int64_t vocab, int64_t first_position)
    : path_(std::move(path)), file_(path_, "--logits-out"), rows_(rows), vocab_(vocab) {
  fmt::print(file_.stream(), "{{\"dtype\": \"float32\", \"shape\": [{}, {}], \"first_position\": {}}}\n", rows, vocab,
             first_position);
}

void LogitsFile::write_row(std::span<const float> row) {
  if (int64_t(row.size()) != vocab_ || written_ == rows_) fail("{}: row {} does not fit the header's shape", path_, written_);
  if (std::fwrite(row.data(), sizeof(float), row.size(), file_.stream()) != row.size()) {
    fail("--logits-out: cannot write '{}': {}", path_, std::strerror(errno));
  }
  ++written_;
}

void LogitsFile::close() {
  if (written_ != rows_) fail("{}: {} of {} rows written", path_, written_, rows_);
  file_.commit();
}

}  // namespace nt::cli
