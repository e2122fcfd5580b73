#include "gnuplot.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <vector>

namespace mlo {
namespace {

// Runs `program args...` and waits; returns its exit status (127 when it could not start).
int run_program(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace

std::string run_gnuplot(const std::string& script, const std::string& drawn,
                        const std::string& png) {
  std::string quoted = "'";
  for (const char c : drawn) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  const int status = run_program({"gnuplot", "-e", "outfile = " + quoted + "'", script});
  std::error_code ignored;
  if (status == 127) {
    std::filesystem::remove(drawn, ignored);
    return "gnuplot is not installed (apt-get install gnuplot-nox): no PNG; the script " + script +
           " draws it";
  }
  // (`drawn` may exist, empty, beforehand: the caller's own new file for gnuplot to fill)
  std::error_code absent;
  const auto size = std::filesystem::file_size(drawn, absent);
  if (status != 0 || absent || size == 0) {
    std::filesystem::remove(drawn, ignored);
    return "gnuplot failed (exit status " + std::to_string(status) + ") on " + script;
  }
  // (mkstemp made `drawn` 0600: the picture gets the mode of any new file, as its script has)
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::chmod(drawn.c_str(), 0666 & ~mask);
  std::error_code error;
  std::filesystem::rename(drawn, png, error);
  if (error) {
    std::filesystem::remove(drawn, ignored);
    return "cannot move the chart to " + png + ": " + error.message();
  }
  return "";
}

}  // namespace mlo
