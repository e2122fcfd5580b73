// A callback of your own (mlo/core/callback.h): the ready-made HPO pair (problems/hpo: a
// logistic regression's per-feature L2 weights learned on validation data) trains until its
// weights have settled, then ends finished, as early stopping would: evaluated, results written.
// The callback's state is saved with the run's, so a stopped and resumed run decides at the same
// step as an uninterrupted one.
//
//   build/examples/callback [DIR] [--resume] [--overwrite] [--stop-at STEP]
// writes its run into DIR (default runs/callback).
#include "problems/hpo/logreg.h"

#include <mlo/mlo.h>

#include <cmath>
#include <cstdio>

namespace hpo = mlo::problems::hpo;

// Ends training once an outer step moves the mean of the L2 weights by less than `tolerance`
// of its value.
class FinishWhenSettled : public mlo::Callback {
 public:
  FinishWhenSettled(std::shared_ptr<hpo::LogRegOuter> outer, double tolerance)
      : outer_(std::move(outer)), tolerance_(tolerance) {}

  void on_start(mlo::Engine&) override { outer_steps_ = outer_->optimizer_steps(); }
  mlo::StepDecision on_step_end(mlo::Engine&, const mlo::StepEnd& step) override {
    if (outer_->optimizer_steps() == outer_steps_) return mlo::StepDecision::kContinue;
    outer_steps_ = outer_->optimizer_steps();
    const double mean = outer_->weights().mean().item<double>();
    const bool settled = mean_ > 0 && std::abs(mean - mean_) < tolerance_ * mean_;
    mean_ = mean;
    if (!settled) return mlo::StepDecision::kContinue;
    std::printf("settled at global step %lld: mean L2 weight %.5f\n",
                static_cast<long long>(step.step), mean);
    return mlo::StepDecision::kFinish;
  }
  std::string state_name() const override { return "finish_when_settled"; }
  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("mean", c10::IValue(mean_));
  }
  void load(torch::serialize::InputArchive& archive) override {
    c10::IValue mean;
    archive.read("mean", mean);
    mean_ = mean.toDouble();
  }

 private:
  std::shared_ptr<hpo::LogRegOuter> outer_;
  double tolerance_;
  double mean_ = 0;          // after the latest outer step (0: none yet)
  int64_t outer_steps_ = 0;  // the outer problem's optimizer steps seen
};

int main(int argc, char** argv) {
  return mlo::guard([&] {  // an mlo::Error becomes an error line and exit status 2
    const hpo::LogRegData data = hpo::make_logreg_data(/*samples=*/1000, /*features=*/20);
    const hpo::LogRegHpo pair = hpo::make_logreg_hpo(
        data, mlo::ProblemConfig().unroll_steps(100).method(mlo::CGOptions().iterations(5)));
    mlo::Engine engine(mlo::EngineConfig().train_iters(10000).valid_step(1000));
    engine.add(pair.outer).add(pair.inner).link(/*upper=*/pair.outer, /*lower=*/pair.inner);
    engine.validation(
        [&] { return mlo::Metrics{{"valid/loss", hpo::validation_loss(pair, data)}}; });
    engine.add_callback(std::make_shared<FinishWhenSettled>(pair.outer, /*tolerance=*/5e-3));

    mlo::Run run(engine, mlo::RunOptions::from_command_line(argc, argv, "runs/callback"));
    const mlo::RunResult result = run.start();  // Ctrl-C saves; --resume continues
    if (!result.interrupted && !result.already_finished) {
      std::printf("%lld global steps; validation loss %.4f\n",
                  static_cast<long long>(result.steps), result.valid.at("valid/loss"));
    }
  });
}
