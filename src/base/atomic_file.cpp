#include <mlo/base/atomic_file.h>

#include <mlo/base/error.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace mlo {
namespace {

// Flushes a file's (or a folder's) data to disk; best effort for folders, which some file
// systems cannot open for syncing.
bool sync(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

void write_path_atomically(const std::string& path,
                           const std::function<void(const std::string& temporary)>& write) {
  const std::string temporary = path + ".tmp";
  write(temporary);
  MLO_CHECK(sync(temporary), "cannot flush '", temporary, "' to disk");
  MLO_CHECK(std::rename(temporary.c_str(), path.c_str()) == 0, "cannot move '", temporary,
            "' to '", path, "'");
  const auto folder = std::filesystem::path(path).parent_path();
  sync(folder.empty() ? std::string(".") : folder.string());
}

void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write) {
  write_path_atomically(path, [&](const std::string& temporary) {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    MLO_CHECK(out.good(), "cannot write '", temporary, "'");
    write(out);
    out.flush();
    MLO_CHECK(out.good(), "cannot write '", temporary, "' (disk full?)");
  });
}

}  // namespace mlo
