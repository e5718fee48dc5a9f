// How much of a file the kernel's page cache holds: a file read or written
// recently loads fastest through its mapping, a cold one through O_DIRECT.
#pragma once

#include <string>

namespace nt {

// Fraction (0 to 1) of the pages of `path` resident in the page cache; 0 when
// it cannot be told (the file cannot be opened or mapped, or is empty).
double page_cache_fraction(const std::string& path);

}  // namespace nt
