// A file written under a temporary name beside its final path and renamed
// into place only when complete: an interrupted or failed write never leaves
// a partial file at the final path, nor destroys what was there before.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace nt {

class OutputFile {
 public:
  // `what` names the output in errors ("-o", "--ids-out", "the quantized model").
  // Fails, naming the path and the OS's reason, when the directory does not
  // take a new file.
  OutputFile(std::string path, std::string what);
  ~OutputFile();  // removes the temporary unless committed
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::FILE* stream() { return file_; }
  const std::string& path() const { return path_; }
  // Flushes, closes and renames into place; fails naming the path and the reason.
  void commit();

 private:
  std::string path_, what_, temporary_;
  std::FILE* file_ = nullptr;
};

// Writes `contents` to `path` through an OutputFile.
void write_file_atomically(const std::string& path, std::string_view what, std::string_view contents);

// Refuses an output that is the input itself: the same path, a link to it,
// or another name of the same file. The flags name both in the error.
void refuse_output_over_input(const std::string& input, std::string_view input_what, const std::string& output,
                              std::string_view output_what);

}  // namespace nt
