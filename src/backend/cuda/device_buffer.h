// Owning handle to a cudaMalloc'ed block. Allocation failures name what was
// being allocated and how much memory the device had left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "runtime/device_layout.h"  // align_device

namespace nt {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const char* what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(other.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Pinned host memory, for asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(size_t bytes, const char* what);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(other.bytes_), mapped_(other.mapped_) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    std::swap(mapped_, other.mapped_);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t size() const { return bytes_; }
  // The buffer as kernels address it (they read and write it across the link).
  void* device_pointer() const;

 private:
  static constexpr size_t kPage = 4096, kHugePage = 2u << 20;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  size_t mapped_ = 0;  // bytes of the registered mapping
};

}  // namespace nt
