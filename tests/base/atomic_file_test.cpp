// write_file_atomically / write_path_atomically (mlo/base/atomic_file.h): a write that fails,
// whether the writer throws or the disk is full, leaves the previous file as it was, no temporary
// file behind, and an error naming the file and the cause.
#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace atomic_file_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mlo_atomic_file_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("Atomic file: written whole, no temporary left", "[base][atomic_file]") {
  const fs::path file = scratch("ok") / "a.txt";
  mlo::write_file_atomically(file.string(), [](std::ostream& out) { out << "first"; });
  mlo::write_file_atomically(file.string(), [](std::ostream& out) { out << "second"; });
  CHECK(read(file) == "second");
  CHECK_FALSE(fs::exists(file.string() + ".tmp"));
}

TEST_CASE("Atomic file: a writer that fails halfway leaves the previous file",
          "[base][atomic_file]") {
  const fs::path file = scratch("throws") / "state.pt";
  mlo::write_file_atomically(file.string(), [](std::ostream& out) { out << "previous"; });
  const auto half = [&](const std::string& temporary) {
    std::ofstream(temporary) << "half of a new fi";
    throw std::runtime_error("the library failed");
  };
  REQUIRE_THROWS_WITH(mlo::write_path_atomically(file.string(), half),
                      Contains("cannot write '" + file.string() + "': the library failed") &&
                          Contains("the previous '" + file.string() + "' is kept unchanged"));
  CHECK(read(file) == "previous");
  CHECK_FALSE(fs::exists(file.string() + ".tmp"));
}

TEST_CASE("Atomic file: a full disk (a file-size limit) is an error naming the file and the cause",
          "[base][atomic_file]") {
  const fs::path file = scratch("full") / "state.pt";
  mlo::write_file_atomically(file.string(), [](std::ostream& out) { out << "previous"; });
  const fs::path message = file.parent_path() / "message.txt";
  // In a child process: RLIMIT_FSIZE of 4 KiB with SIGXFSZ ignored makes writes past it fail
  // with EFBIG, as a full disk fails them with ENOSPC.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 1;
    std::string what = "no error";
    try {
      mlo::write_file_atomically(file.string(),
                                 [](std::ostream& out) { out << std::string(1 << 20, 'x'); });
    } catch (const mlo::Error& e) {
      what = e.what();
      code = 0;
    }
    std::ofstream(message) << what.substr(0, 1000);
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string what = read(message);
  INFO(what);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(what, Contains("cannot write '" + file.string() + "': writing '" + file.string() +
                            ".tmp' failed: File too large") &&
                       Contains("is kept unchanged"));
  CHECK(read(file) == "previous");
  CHECK_FALSE(fs::exists(file.string() + ".tmp"));
}

}  // namespace atomic_file_test
