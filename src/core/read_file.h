// Whole-file reads for command inputs (a text to tokenize or score, a list of ids).
#pragma once

#include <string>

namespace nt {

// The file's bytes; nt::Error naming the file and the system's reason when it
// cannot be opened or read (a directory, no permission).
std::string read_file(const std::string& path);

}  // namespace nt
