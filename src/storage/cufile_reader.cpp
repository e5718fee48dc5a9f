// GPUDirect Storage through cuFile, loaded with dlopen at run time so that
// builds need neither the CUDA headers nor libcufile. With the nvidia-fs
// kernel module, cuFileRead DMAs from NVMe straight into device memory; without
// it the library runs in "compat mode" (POSIX reads through its own bounce
// buffers), which is why open_file_reader's auto mode takes cuFile only when
// nvidia-fs is loaded. Set NT_CUFILE_LIB to the library's path when it is not
// on the loader's search path (e.g. inside the nvidia-cufile Python wheel).
#include <fmt/format.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/byte_size.h"
#include "storage/pooled_reader.h"
#include "storage/readers.h"

namespace nt {
namespace {

// The few cuFile C API types we use, declared as cufile.h defines them.
struct CuFileError {  // CUfileError_t
  int err;     // CUfileOpError, 0 = CU_FILE_SUCCESS
  int cu_err;  // CUresult
};
struct CuFileDescr {  // CUfileDescr_t
  int type;           // CUfileFileHandleType
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
using CuFileHandle = void*;
constexpr int kCuFileHandleTypeOpaqueFd = 1;

struct CuFileApi {
  CuFileError (*driver_open)() = nullptr;
  CuFileError (*handle_register)(CuFileHandle*, CuFileDescr*) = nullptr;
  void (*handle_deregister)(CuFileHandle) = nullptr;
  CuFileError (*buf_register)(const void*, size_t, int) = nullptr;
  CuFileError (*buf_deregister)(const void*) = nullptr;
  ssize_t (*read)(CuFileHandle, void*, size_t, off_t, off_t) = nullptr;
  std::string unavailable;  // why, when the library cannot be used
};

template <typename Fn>
bool bind(void* lib, const char* name, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  return fn != nullptr;
}

// Loads the library and opens the driver once per process. Neither is ever
// closed: readers on other threads may still be using them at exit.
const CuFileApi& cufile_api() {
  static const CuFileApi api = [] {
    CuFileApi a;
    std::vector<std::string> candidates = {"libcufile.so.0", "libcufile.so"};
    if (const char* env = std::getenv("NT_CUFILE_LIB")) candidates.insert(candidates.begin(), env);
    void* lib = nullptr;
    std::string tried;
    for (const auto& name : candidates) {
      lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      tried += fmt::format("{}{}", tried.empty() ? "" : "; ", dlerror());
    }
    if (!lib) {
      a.unavailable = fmt::format("libcufile cannot be loaded (set NT_CUFILE_LIB to its path): {}", tried);
      return a;
    }
    std::string missing;
    bind(lib, "cuFileDriverOpen", a.driver_open, missing);
    bind(lib, "cuFileHandleRegister", a.handle_register, missing);
    bind(lib, "cuFileHandleDeregister", a.handle_deregister, missing);
    bind(lib, "cuFileBufRegister", a.buf_register, missing);
    bind(lib, "cuFileBufDeregister", a.buf_deregister, missing);
    bind(lib, "cuFileRead", a.read, missing);
    if (!missing.empty()) {
      a.unavailable = "libcufile lacks " + missing;
      return a;
    }
    // Without an NVIDIA driver cuFileDriverOpen can spin forever (seen in VMs
    // without /proc/modules): only ask it when the driver's device node exists.
    if (access("/dev/nvidiactl", F_OK) != 0) {
      a.unavailable = "no NVIDIA driver (/dev/nvidiactl is missing)";
      return a;
    }
    if (const CuFileError e = a.driver_open(); e.err != 0) {
      a.unavailable = fmt::format("cuFileDriverOpen failed (cuFile error {}, CUDA error {}): no GPU or driver?", e.err, e.cu_err);
    }
    return a;
  }();
  return api;
}

class CuFileReader final : public PooledReader {
 public:
  CuFileReader(const std::string& path, uint64_t size, int fd, CuFileHandle handle, const ReaderOptions& o)
      : PooledReader(path, size, o.chunk_bytes), fd_(fd), handle_(handle) {
    start(o.threads);
  }
  ~CuFileReader() override {
    stop();
    deregister_all();
    cufile_api().handle_deregister(handle_);
    close(fd_);
  }

  IoBackend backend() const override { return IoBackend::CuFile; }
  std::string description() const override {
    return fmt::format("cuFile{}, {} threads x {} requests", gpudirect_storage_driver_loaded() ? " (GPUDirect)" : " (compat mode)",
                       threads(), format_size(chunk_bytes()));
  }
  bool direct() const override { return true; }
  bool accepts_device_memory() const override { return true; }
  uint64_t alignment() const override { return 4096; }

  // cuFileBufRegister pins device buffers for DMA once instead of per read.
  // Call while no reads are in flight.
  bool register_memory(std::span<const MemoryRegion> regions) override {
    std::lock_guard lock(regions_mutex_);
    deregister_all_locked();
    for (const MemoryRegion& r : regions) {
      if (cufile_api().buf_register(r.base, r.bytes, 0).err != 0) {
        deregister_all_locked();
        return false;
      }
      regions_.push_back(r);
    }
    return true;
  }

 private:
  std::string read_chunk(const ReadChunk& c) override {
    // Registered memory is addressed as (registered base, offset), as cuFile requires.
    void* base = c.dst;
    off_t base_offset = 0;
    {
      std::lock_guard lock(regions_mutex_);
      for (const MemoryRegion& r : regions_) {
        const auto* b = static_cast<uint8_t*>(r.base);
        if (c.dst >= b && c.dst + c.bytes <= b + r.bytes) {
          base = r.base;
          base_offset = off_t(c.dst - b);
        }
      }
    }
    uint64_t done = 0;
    while (done < c.bytes) {
      const ssize_t n = cufile_api().read(handle_, base, c.bytes - done, off_t(c.file_offset + done), base_offset + off_t(done));
      if (n <= 0) {
        const std::string cause = n == 0    ? std::string("unexpected end of file")
                                  : n == -1 ? std::string(std::strerror(errno))
                                            : fmt::format("cuFile error {}", -n);
        return fmt::format("{}: cuFile read of {} bytes at byte {} failed: {}", path(), c.bytes - done, c.file_offset + done, cause);
      }
      done += uint64_t(n);
    }
    return {};
  }

  void deregister_all() {
    std::lock_guard lock(regions_mutex_);
    deregister_all_locked();
  }
  void deregister_all_locked() {
    for (const MemoryRegion& r : regions_) cufile_api().buf_deregister(r.base);
    regions_.clear();
  }

  int fd_;
  CuFileHandle handle_;
  std::mutex regions_mutex_;
  std::vector<MemoryRegion> regions_;
};

}  // namespace

bool gpudirect_storage_driver_loaded() { return access("/proc/driver/nvidia-fs", F_OK) == 0; }

std::unique_ptr<FileReader> open_cufile_reader(const std::string& path, const ReaderOptions& options, std::string* why) {
  const CuFileApi& api = cufile_api();
  if (!api.unavailable.empty()) {
    *why = api.unavailable;
    return nullptr;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);  // cuFile requires O_DIRECT descriptors
  if (fd < 0) {
    *why = fmt::format("cannot open {} with O_DIRECT: {}", path, std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    *why = fmt::format("cannot stat {}: {}", path, std::strerror(errno));
    close(fd);
    return nullptr;
  }
  CuFileDescr descr{};
  descr.type = kCuFileHandleTypeOpaqueFd;
  descr.handle.fd = fd;
  CuFileHandle handle = nullptr;
  if (const CuFileError e = api.handle_register(&handle, &descr); e.err != 0) {
    *why = fmt::format("cuFileHandleRegister refused {} (cuFile error {}): its filesystem may not support GPUDirect Storage",
                       path, e.err);
    close(fd);
    return nullptr;
  }
  return std::make_unique<CuFileReader>(path, uint64_t(st.st_size), fd, handle, options);
}

}  // namespace nt
