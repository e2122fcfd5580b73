#pragma once
// Part of the mlo tool (src/cli): the `mlo compare RUN_A RUN_B [--metric M]... [--plot FILE]`
// subcommand (paired per-seed differences of two multi-seed runs, seeds.h; with --plot, their
// learning curves as `mlo plot` draws them).

#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mlo {
namespace cli {

/// Registers `compare` on `app`; after parsing, `run()` prints the comparison if it was given.
class CompareCommand {
 public:
  explicit CompareCommand(CLI::App& app);
  /// Whether the command line chose `compare`.
  bool parsed() const;
  /// Prints the paired comparison; returns the exit status.
  int run() const;

 private:
  CLI::App* command_;
  std::string a_, b_;
  std::vector<std::string> metrics_;
  std::string plot_;
};

}  // namespace cli
}  // namespace mlo
