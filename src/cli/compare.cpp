#include "compare.h"

#include "plot.h"
#include "seeds.h"

#include <CLI/CLI.hpp>

#include <iostream>

namespace mlo {
namespace cli {

CompareCommand::CompareCommand(CLI::App& app) {
  command_ = app.add_subcommand(
      "compare", "Paired per-seed differences (B - A) of two runs of one experiment: folders of "
      "mlo run --seeds, or two single runs");
  command_->add_option("run_a", a_,
                       "folder of run A (holds seed_<s>/results.json, or one run's results.json)")
      ->required();
  command_->add_option("run_b", b_, "folder of run B")->required();
  command_->add_option("--metric", metrics_,
                       "metric to compare (repeatable; default test/balanced_acc, "
                       "test/rare3_acc, test/acc where a run has them, else every test "
                       "metric both have but per-class ones; validation: "
                       "valid/balanced_acc, ...)");
  command_->add_option("--plot", plot_,
                       "also draw both runs' learning curves into this PNG (as mlo plot does: "
                       "mean over seeds with a min-max band)");
}

bool CompareCommand::parsed() const { return command_->parsed(); }

int CompareCommand::run() const {
  std::cout << compare_runs(a_, b_, metrics_);
  if (!plot_.empty()) {
    PlotOptions options;
    options.out = plot_;
    options.out_option = "--plot";
    const std::string png = plot_runs({a_, b_}, options);
    std::cout << "curves in " << png << "\n";
  }
  return 0;
}

}  // namespace cli
}  // namespace mlo
