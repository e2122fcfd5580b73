#include <mlo/base/atomic_file.h>

#include <mlo/base/error.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
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
  // NOTE: whatever fails (a full disk, a file-size limit, a failed flush or rename), the file
  // at `path` is left as it was and no partial temporary file stays beside it.
  const auto fail = [&](const std::string& what) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    const bool kept = std::filesystem::exists(path, ignored);
    throw Error("cannot write '" + path + "': " + what +
                (kept ? "; the previous '" + path + "' is kept unchanged" : std::string()));
  };
  try {
    write(temporary);
  } catch (const c10::Error& e) {
    fail(e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (!sync(temporary)) fail("cannot flush '" + temporary + "' to disk: " + std::strerror(errno));
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    fail("cannot move '" + temporary + "' over it: " + std::strerror(errno));
  }
  const auto folder = std::filesystem::path(path).parent_path();
  sync(folder.empty() ? std::string(".") : folder.string());
}

void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write) {
  write_path_atomically(path, [&](const std::string& temporary) {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    MLO_CHECK(out.good(), "cannot open '", temporary, "': ", std::strerror(errno));
    errno = 0;
    write(out);
    out.flush();
    // NOTE: errno is that of the failed write (ENOSPC, EFBIG), when nothing reset it since.
    const int error = errno;
    MLO_CHECK(out.good(), "writing '", temporary,
              "' failed: ", error != 0 ? std::strerror(error) : "unknown error", " (disk full?)");
    out.close();
    MLO_CHECK(!out.fail(), "closing '", temporary, "' failed: ", std::strerror(errno));
  });
}

std::string unused_timestamped(const std::string& prefix) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &utc);
  std::string path = prefix + stamp;
  std::error_code error;
  for (int i = 2; std::filesystem::exists(path, error); ++i) {
    path = prefix + stamp + "-" + std::to_string(i);
  }
  return path;
}

std::string move_into_replaced(const std::string& dir, const std::vector<std::string>& names) {
  namespace fs = std::filesystem;
  const fs::path aside = unused_timestamped((fs::path(dir) / "replaced-").string());
  std::error_code error;
  fs::create_directories(aside, error);
  MLO_CHECK(!error, "cannot create '", aside.string(), "': ", error.message());
  for (const auto& name : names) {
    fs::rename(fs::path(dir) / name, aside / name, error);
    MLO_CHECK(!error, "cannot move '", (fs::path(dir) / name).string(), "' into '",
              aside.string(), "': ", error.message());
  }
  return aside.string();
}

}  // namespace mlo
