#pragma once
// Scratch folders for tests, unique to the process: the suites of two checkouts (or of a plain
// and a sanitizer build) may run at once on one machine without sharing files.

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace mlo_test {

/// `<tmp>/mlo_<name>_<pid>`, absent (removed if an earlier process of this id left it).
inline std::filesystem::path scratch_path(const std::string& name) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("mlo_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(path);
  return path;
}

/// `scratch_path(name)`, created empty.
inline std::filesystem::path scratch_dir(const std::string& name) {
  const std::filesystem::path path = scratch_path(name);
  std::filesystem::create_directories(path);
  return path;
}

/// A scratch folder removed with its content at the end of the scope; each one of a process has
/// its own (`<name>_<n>`).
struct TempDir {
  explicit TempDir(const std::string& name)
      : path(scratch_dir(name + "_" + std::to_string(next()))) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path;

 private:
  static int next() {
    static std::atomic<int> count{0};
    return count++;
  }
};

}  // namespace mlo_test
