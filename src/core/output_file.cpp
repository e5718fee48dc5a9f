#include "core/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/interrupt.h"

namespace nt {
namespace {

// The mode a plain fopen would give: 0666 less the umask (mkstemp makes 0600).
mode_t created_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace

OutputFile::OutputFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  if (path_.empty()) fail("{}: the output path is empty", what_);
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail("{} {}: is a directory", what_, path_);
  // Beside the final path, so that the rename stays on one file system.
  std::string pattern = path_ + ".partial-XXXXXX";
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) fail("{} {}: cannot create the file: {}", what_, path_, std::strerror(errno));
  temporary_ = pattern;
  remove_on_signal(temporary_);
  ::fchmod(fd, created_mode());
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    const int error = errno;
    ::close(fd);
    ::unlink(temporary_.c_str());
    keep_on_signal(temporary_);
    fail("{} {}: cannot open the file: {}", what_, path_, std::strerror(error));
  }
}

OutputFile::~OutputFile() {
  if (temporary_.empty()) return;
  if (file_) std::fclose(file_);
  ::unlink(temporary_.c_str());
  keep_on_signal(temporary_);
}

void OutputFile::commit() {
  const bool written = std::fflush(file_) == 0 && !std::ferror(file_);
  const int write_error = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!written || !closed) {
    fail("{} {}: cannot write the file: {}", what_, path_, std::strerror(written ? errno : write_error));
  }
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    fail("{} {}: cannot move the finished file into place: {}", what_, path_, std::strerror(errno));
  }
  keep_on_signal(temporary_);
  temporary_.clear();
}

void write_file_atomically(const std::string& path, std::string_view what, std::string_view contents) {
  OutputFile out(path, std::string(what));
  if (std::fwrite(contents.data(), 1, contents.size(), out.stream()) != contents.size()) {
    fail("{} {}: cannot write the file: {}", what, path, std::strerror(errno));
  }
  out.commit();
}

void refuse_output_over_input(const std::string& input, std::string_view input_what, const std::string& output,
                              std::string_view output_what) {
  struct stat in {}, out {};
  if (::stat(input.c_str(), &in) != 0 || ::stat(output.c_str(), &out) != 0) return;  // no output yet: nothing to lose
  if (in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
    fail("{} {} is the input {} {}: writing it would destroy the input; choose another output path", output_what,
         output, input_what, input);
  }
}

}  // namespace nt
