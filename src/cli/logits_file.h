// The logits file of `run --logits-out`: one line of JSON with the shape, then
// the rows as little-endian float32, row after row:
//   {"dtype": "float32", "shape": [rows, vocab], "first_position": p}\n<rows * vocab floats>
// Row i holds the logits of sequence position p + i (what it predicts next).
// numpy: header = json.loads(f.readline()); np.fromfile(f, "<f4").reshape(header["shape"]).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/output_file.h"

namespace nt::cli {

class LogitsFile {
 public:
  // Creates the file and writes the header; errors name the file.
  LogitsFile(std::string path, int64_t rows, int64_t vocab, int64_t first_position);
  void write_row(std::span<const float> row);
  // Checks that every row came and moves the file into place.
  void close();

 private:
  std::string path_;
  OutputFile file_;
  int64_t rows_, vocab_, written_ = 0;
};

}  // namespace nt::cli
