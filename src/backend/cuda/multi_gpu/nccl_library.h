// NCCL, loaded at run time with dlopen: the binary has no link-time NCCL
// dependency, so it runs where NCCL is absent, and finds NCCL where it exists
// only inside a Python package (PyTorch's nvidia-nccl wheel). Search order:
//   1. NT_NCCL_LIBRARY, a path to libnccl.so.2 (nothing else is tried when set)
//   2. libnccl.so.2 through the default loader path (LD_LIBRARY_PATH, ldconfig)
//   3. the CUDA toolkit's lib and lib64 folders (CUDA_HOME, /usr/local/cuda)
//   4. nvidia/nccl/lib of Python site-packages and dist-packages folders under
//      VIRTUAL_ENV, CONDA_PREFIX, ~/.local, /usr/local, /usr and /opt/conda
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace nt {

// The part of NCCL's C ABI we call (nccl.h of NCCL 2; nccl_library.cpp
// checks these against nccl.h where the header is installed).
namespace nccl {
using Result = int;
constexpr Result kSuccess = 0;
constexpr Result kInProgress = 7;  // ncclInProgress
constexpr int kUint8 = 1;    // ncclUint8
constexpr int kFloat32 = 7;  // ncclFloat32
constexpr int kSum = 0;      // ncclSum
struct UniqueId {
  char internal[128];
};
struct CommHandle;  // ncclComm, opaque
using Comm = CommHandle*;
}  // namespace nccl

class NcclLibrary {
 public:
  // The process's NCCL, loaded on first use; throws nt::Error listing every
  // place it looked and why each failed.
  static const NcclLibrary& get();

  const std::string& path() const { return path_; }
  int version() const { return version_; }  // e.g. 22703 for 2.27.3

  // Throws nt::Error with `what` and NCCL's message when `result` is not success.
  void check(nccl::Result result, const std::string& what) const;

  nccl::Result (*get_unique_id)(nccl::UniqueId*) = nullptr;
  nccl::Result (*comm_init_rank)(nccl::Comm*, int n_ranks, nccl::UniqueId, int rank) = nullptr;
  nccl::Result (*all_reduce)(const void*, void*, size_t, int type, int op, nccl::Comm, cudaStream_t) = nullptr;
  nccl::Result (*broadcast)(const void*, void*, size_t, int type, int root, nccl::Comm, cudaStream_t) = nullptr;
  nccl::Result (*comm_destroy)(nccl::Comm) = nullptr;
  nccl::Result (*comm_abort)(nccl::Comm) = nullptr;
  nccl::Result (*comm_get_async_error)(nccl::Comm, nccl::Result*) = nullptr;
  nccl::Result (*group_start)() = nullptr;
  nccl::Result (*group_end)() = nullptr;
  const char* (*get_error_string)(nccl::Result) = nullptr;

 private:
  NcclLibrary() = default;
  std::string path_;
  int version_ = 0;
};

// The paths tried after NT_NCCL_LIBRARY and the loader path, in order
// (the globs of the header's step 3 and 4, expanded); exposed for the report.
std::vector<std::string> nccl_candidate_paths();

}  // namespace nt
