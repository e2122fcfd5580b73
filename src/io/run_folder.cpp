#include "run_folder.h"

#include "run_metadata.h"

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace mlo {
namespace io {
namespace {

namespace fs = std::filesystem;

// The names a run writes (besides config.yaml, which a user's own file may also be called).
bool is_run_file(const std::string& name) {
  static const char* const kNames[] = {kLockFile,       "state.pt",      "metrics.csv",
                                       "metrics.jsonl", "results.json",  "log.txt",
                                       "tb",            "state.pt.tmp"};
  for (const char* known : kNames) {
    if (name == known) return true;
  }
  // (a metrics file that a resume found damaged and moved aside: io/metrics.h; the
  // configurations a run was resumed with: config.resumed.yaml, config.resumed.step<N>.yaml)
  for (const char* prefix : {"metrics.csv.damaged-", "metrics.jsonl.damaged-", "config.resumed."}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return name.rfind("state.rank", 0) == 0 && name.size() > 3 &&
         name.compare(name.size() - 3, 3, ".pt") == 0;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string out = text.str();
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string in_use(const std::string& dir, const std::string& lock_text) {
  const std::string owner = lock_text.substr(0, lock_text.find('\n'));  // (its first line)
  return "'" + dir + "' is in use by another run (" +
         (owner.empty() ? std::string("its owner did not say who it is") : owner) +
         "); wait for it to end, or choose another output folder";
}

// What the folder holds, against what was asked (the half of `check` that the holder of the
// lock repeats once it holds it).
void check_contents(const std::string& dir, bool resume, bool overwrite) {
  std::error_code error;
  const std::vector<std::string> found = RunFolder::run_files(dir);
  const std::vector<std::string> kept = RunFolder::results(dir);
  const fs::path config = fs::path(dir) / "config.yaml";
  if (resume) {
    MLO_CHECK(!found.empty(), "'", dir, "' holds no run to resume (no state, metrics or log of ",
              "one); run without --resume to start one there");
  } else if (!kept.empty() && !overwrite) {
    throw Error("'" + dir + "' holds another run (" + joined(kept) +
                "); continue it with --resume, replace it with --overwrite (its files are moved "
                "into " + dir + "/replaced-<time>/, nothing is deleted), or choose another "
                "output folder");
  } else if (found.empty() && fs::exists(config, error)) {
    throw Error("'" + config.string() + "' exists and was not written by a run (no run files " +
                "beside it): a run records its configuration there and will not write over " +
                "yours; choose another output folder");
  }
}

}  // namespace

std::vector<std::string> RunFolder::results(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& name : run_files(dir)) {
    const bool state = name.rfind("state", 0) == 0 && name.find(".tmp") == std::string::npos;
    bool rows = false;
    if (name == "metrics.csv" || name == "metrics.jsonl") {
      // (more than the CSV's header line: a metric was recorded)
      std::ifstream in(fs::path(dir) / name);
      std::string line;
      int lines = 0;
      while (lines < 2 && std::getline(in, line)) ++lines;
      rows = lines > (name == "metrics.csv" ? 1 : 0);
    }
    if (state || rows || name == "results.json") out.push_back(name);
  }
  return out;
}

std::vector<std::string> RunFolder::run_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return out;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (is_run_file(name)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void RunFolder::check(const std::string& dir, bool resume, bool overwrite) {
  MLO_CHECK(!dir.empty(), "a run needs an output folder (got an empty name)");
  MLO_CHECK(!(resume && overwrite), "'", dir, "': resume continues the run there and ",
            "overwrite replaces it; ask for one of them");
  std::error_code error;
  if (fs::exists(dir, error) && !fs::is_directory(dir, error)) {
    throw Error("'" + dir + "' is a file, not a folder; a run writes a folder of files there");
  }
  // In use by a live run, first: its lock is taken (tried and let go at once; only an existing
  // lock file is opened, so nothing is created).
  const fs::path lock = fs::path(dir) / kLockFile;
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const bool taken = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    if (taken) throw Error(in_use(dir, read_text(lock)));
  }
  check_contents(dir, resume, overwrite);
}

RunFolder::RunFolder(std::string dir, bool resume, bool overwrite) : dir_(std::move(dir)) {
  check(dir_, resume, overwrite);
  const fs::path config = fs::path(dir_) / "config.yaml";
  std::error_code error;
  fs::create_directories(dir_, error);
  MLO_CHECK(!error, "cannot create the output folder '", dir_, "': ", error.message());

  const fs::path lock = fs::path(dir_) / kLockFile;
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  MLO_CHECK(lock_fd_ >= 0, "cannot create the lock file '", lock.string(), "': ",
            std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    const std::string owner = read_text(lock);
    MLO_CHECK(why != EWOULDBLOCK, in_use(dir_, owner));
    throw Error("cannot lock '" + lock.string() + "': " + std::strerror(why));
  }
  // NOTE: checked again under the lock: another run may have written the folder between the
  // check above and the lock.
  std::vector<std::string> found;
  try {
    check_contents(dir_, resume, overwrite);
    found = run_files(dir_);
  } catch (...) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw;
  }
  // A run replaced on request, or one that ended before it saved anything (its log, its
  // configuration) moves aside: everything it wrote, config.yaml too, but the lock file (held,
  // and rewritten below).
  if (!resume && !found.empty()) {
    std::vector<std::string> moved;
    for (const auto& name : found) {
      if (name != kLockFile) moved.push_back(name);
    }
    if (fs::exists(config, error)) moved.push_back("config.yaml");
    // (the lock file alone: the folder was new, or held nothing of a run)
    if (!moved.empty()) replaced_ = move_into_replaced(dir_, moved);
  }
  const std::string owner =
      "process " + std::to_string(::getpid()) + " on " + host_name() + ", since " + utc_now();
  if (::ftruncate(lock_fd_, 0) == 0) {
    const std::string line = owner + "\n" + kLauncherLine + launcher_identity() + "\n";
    if (::pwrite(lock_fd_, line.data(), line.size(), 0) < 0) {
      // (the lock holds either way; only the message a second writer reads is lost)
    }
  }
}

std::string RunFolder::launcher_identity() {
  // The parent's start time (field 22 of /proc/<pid>/stat, in clock ticks since boot) tells a
  // reused pid apart; the command name, field 2, may hold spaces, hence the last ')'.
  const pid_t parent = ::getppid();
  std::string start = "?";
  const std::string stat = read_text(fs::path("/proc") / std::to_string(parent) / "stat");
  const size_t name_end = stat.rfind(')');
  if (name_end != std::string::npos) {
    std::istringstream fields(stat.substr(name_end + 1));
    std::string field;
    for (int i = 3; i <= 22 && fields >> field; ++i) {
      if (i == 22) start = field;
    }
  }
  return host_name() + " " + std::to_string(parent) + " " + start;
}

bool RunFolder::claimed_by_this_launcher(const std::string& dir) {
  std::istringstream lines(read_text(fs::path(dir) / kLockFile));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(kLauncherLine, 0) == 0) {
      return line.substr(std::string(kLauncherLine).size()) == launcher_identity();
    }
  }
  return false;
}

RunFolder::~RunFolder() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // (releases the flock)
}

}  // namespace io
}  // namespace mlo
