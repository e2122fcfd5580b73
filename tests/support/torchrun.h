#pragma once
// Test helper: the torchrun that launcher tests start: MLO_TORCHRUN, else the 2.x lane's
// <source>/.venv/bin/torchrun (PyPI's torch); "" when neither exists, and the reason to print
// when a test skips for want of it.

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace mlo_test {

inline std::string find_torchrun(const std::string& source_dir) {
  if (const char* set = std::getenv("MLO_TORCHRUN"); set != nullptr && *set != '\0') return set;
  const std::string venv = source_dir + "/.venv/bin/torchrun";
  return access(venv.c_str(), X_OK) == 0 ? venv : "";
}

inline constexpr const char* kNoTorchrun =
    "SKIPPED: no torchrun (set MLO_TORCHRUN, or make the 2.x lane's .venv: scripts/test.sh "
    "--torch2)";

}  // namespace mlo_test
