// Constructors of the FileReader implementations, for open_file_reader. Each
// returns nullptr and sets `why` when it cannot serve this file here.
#pragma once

#include <memory>
#include <string>

#include "storage/io_reader.h"

namespace nt {

std::unique_ptr<FileReader> open_cufile_reader(const std::string& path, const ReaderOptions& options, std::string* why);
std::unique_ptr<FileReader> open_uring_reader(const std::string& path, const ReaderOptions& options, std::string* why);
std::unique_ptr<FileReader> open_mmap_reader(const std::string& path, const ReaderOptions& options, std::string* why);

// True when the nvidia-fs kernel module (real GPUDirect Storage) is loaded.
bool gpudirect_storage_driver_loaded();

}  // namespace nt
