#include "backend/cuda/multi_gpu/nccl_library.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <glob.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "core/error.h"

#if __has_include(<nccl.h>)
#include <nccl.h>  // types and constants only: nothing is linked from it
static_assert(sizeof(ncclUniqueId) == sizeof(nt::nccl::UniqueId));
static_assert(ncclSuccess == nt::nccl::kSuccess && ncclInProgress == nt::nccl::kInProgress &&
              ncclUint8 == nt::nccl::kUint8 && ncclFloat32 == nt::nccl::kFloat32 && ncclSum == nt::nccl::kSum);
#endif

namespace nt {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

std::vector<std::string> expand(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

template <typename F>
void resolve(void* handle, const char* name, F& fn, const std::string& path) {
  dlerror();
  void* symbol = dlsym(handle, name);
  if (!symbol) fail("{} has no {}: not an NCCL 2 library ({})", path, name, dlerror());
  fn = reinterpret_cast<F>(symbol);
}

}  // namespace

std::vector<std::string> nccl_candidate_paths() {
  std::vector<std::string> roots;
  for (const std::string& cuda : {env("CUDA_HOME"), std::string("/usr/local/cuda")}) {
    if (cuda.empty()) continue;
    for (const char* lib : {"/lib/", "/lib64/"}) roots.push_back(cuda + lib + kSoname);
  }
  std::vector<std::string> prefixes;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (!env(var).empty()) prefixes.push_back(env(var));
  }
  if (!env("HOME").empty()) prefixes.push_back(env("HOME") + "/.local");
  for (const char* p : {"/usr/local", "/usr", "/opt/conda"}) prefixes.emplace_back(p);
  std::vector<std::string> paths;
  auto add = [&](const std::string& pattern) {
    for (auto& p : expand(pattern)) {
      if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(std::move(p));  // CUDA_HOME may be /usr/local/cuda
    }
  };
  for (const auto& r : roots) add(r);
  for (const auto& prefix : prefixes) {
    for (const char* packages : {"site-packages", "dist-packages"}) {
      add(fmt::format("{}/lib/python3*/{}/nvidia/nccl/lib/{}", prefix, packages, kSoname));
    }
  }
  return paths;
}

const NcclLibrary& NcclLibrary::get() {
  static std::once_flag once;
  static std::optional<NcclLibrary> library;
  static std::string failure;
  std::call_once(once, [] {
    std::vector<std::string> tried;
    void* handle = nullptr;
    std::string path;
    auto attempt = [&](const std::string& candidate) {
      handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) {
        path = candidate;
      } else {
        tried.push_back(fmt::format("{} ({})", candidate, dlerror()));
      }
      return handle != nullptr;
    };
    const std::string given = env("NT_NCCL_LIBRARY");
    if (!given.empty()) {
      attempt(given);
    } else if (!attempt(kSoname)) {
      for (const auto& candidate : nccl_candidate_paths()) {
        if (attempt(candidate)) break;
      }
    }
    if (!handle) {
      failure = fmt::format("NCCL is needed for several GPUs but was not found; set NT_NCCL_LIBRARY to a {}. Tried: {}{}",
                            kSoname, fmt::join(tried, "; "),
                            given.empty() ? "; no Python nvidia/nccl package under VIRTUAL_ENV, CONDA_PREFIX, ~/.local, "
                                            "/usr/local, /usr or /opt/conda"
                                          : "");
      return;
    }
    try {
      NcclLibrary l;
      l.path_ = path;
      resolve(handle, "ncclGetUniqueId", l.get_unique_id, path);
      resolve(handle, "ncclCommInitRank", l.comm_init_rank, path);
      resolve(handle, "ncclAllReduce", l.all_reduce, path);
      resolve(handle, "ncclBroadcast", l.broadcast, path);
      resolve(handle, "ncclCommDestroy", l.comm_destroy, path);
      resolve(handle, "ncclCommAbort", l.comm_abort, path);
      resolve(handle, "ncclCommGetAsyncError", l.comm_get_async_error, path);
      resolve(handle, "ncclGroupStart", l.group_start, path);
      resolve(handle, "ncclGroupEnd", l.group_end, path);
      resolve(handle, "ncclGetErrorString", l.get_error_string, path);
      nccl::Result (*get_version)(int*) = nullptr;
      resolve(handle, "ncclGetVersion", get_version, path);
      l.check(get_version(&l.version_), "ncclGetVersion");
      library = l;
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!library) throw Error(failure);
  return *library;
}

void NcclLibrary::check(nccl::Result result, const std::string& what) const {
  if (result != nccl::kSuccess) fail("NCCL {} failed: {} (error {}, {})", what, get_error_string(result), result, path_);
}

}  // namespace nt
