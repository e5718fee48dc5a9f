#include "storage/page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/align.h"

namespace nt {

double page_cache_fraction(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  const bool sized = fstat(fd, &st) == 0 && st.st_size > 0;
  void* map = sized ? mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return 0;
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const uint64_t bytes = uint64_t(st.st_size), pages = ceil_div(bytes, page);
  // One byte per page; the file is looked at in 1 GiB windows to bound the vector.
  const uint64_t window = (1ull << 30) / page;
  std::vector<unsigned char> resident(size_t(std::min(pages, window)));
  uint64_t in_cache = 0;
  bool ok = true;
  for (uint64_t first = 0; first < pages && ok; first += window) {
    const uint64_t n = std::min(window, pages - first);
    ok = mincore(static_cast<uint8_t*>(map) + first * page, std::min(n * page, bytes - first * page), resident.data()) == 0;
    for (uint64_t i = 0; ok && i < n; ++i) in_cache += resident[i] & 1;
  }
  munmap(map, bytes);
  return ok ? double(in_cache) / double(pages) : 0;
}

}  // namespace nt
