// libFuzzer target over `mlo run`'s configuration reader (mlo::run::parse_run_config).
//
// Input: YAML text, optionally followed by a NUL byte and `--set` overrides, one per line.
// Contract checked: every rejection is an mlo::Error; anything else thrown, or a crash, is a
// finding. An accepted config must also survive the writer: to_yaml() reads back to the same
// resolved YAML. Built and run by scripts/fuzz.sh (clang, -fsanitize=fuzzer,address,undefined).
#include <mlo/base/error.h>
#include <mlo/run/yaml.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "yaml_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    std::istringstream lines(input.substr(nul + 1));
    for (std::string line; std::getline(lines, line);) overrides.push_back(line);
  }

  std::string resolved;
  try {
    resolved = mlo::run::to_yaml(mlo::run::parse_run_config(yaml, "fuzz.yaml", overrides));
  } catch (const mlo::Error&) {
    return 0;  // a named rejection: what the reader promises
  } catch (const std::exception& e) {
    finding((std::string("escaped ") + typeid(e).name()).c_str(), e.what());
  } catch (...) {
    finding("escaped a non-standard exception", "");
  }

  try {
    const std::string again = mlo::run::to_yaml(mlo::run::parse_run_config(resolved, "resolved"));
    if (again != resolved) finding("to_yaml does not read back the same", resolved);
  } catch (const std::exception& e) {
    finding("the written config does not read back", std::string(e.what()) + "\n" + resolved);
  }
  return 0;
}
