// Three levels in a chain, low -> mid -> top (linear regression throughout):
//   low  (student w):   fits the teacher's predictions on unlabeled inputs
//   mid  (teacher t):   fits the labeled data, with an L2 penalty of strength exp(top.b), and
//                       wants the student to do well on a validation set
//   top  (b):           picks the teacher's regularization for a second validation set
// Each level's parameters enter the loss of the level below (u2l) and the level below's
// parameters enter its own loss (l2u): top gets its hypergradient through mid, mid through low.
//
//   build/examples/three_level [DIR] [--resume] [--overwrite]      (default DIR: runs/three_level)
#include "custom_experiment/distill_problems.h"

#include <mlo/mlo.h>
#include <torch/torch.h>

#include <cstdio>

using distill::mse;
using distill::Student;
using distill::Teacher;
using distill::Top;

int main(int argc, char** argv) {
  return mlo::guard([&] {
    torch::manual_seed(0);
    const int64_t d = 10;
    const auto w_true = torch::randn({d, 1});
    auto make = [&](int64_t n) {
      const auto x = torch::randn({n, d});
      return mlo::Batch(x, x.matmul(w_true) + 0.5 * torch::randn({n, 1}));
    };
    const mlo::Batch labeled = make(40), valid_mid = make(200), valid_top = make(200);
    const mlo::Batch unlabeled(torch::randn({400, d}));

    auto low = std::make_shared<Student>("student", mlo::ProblemConfig().unroll_steps(5));
    low->module(torch::nn::Linear(d, 1))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
        .data(std::vector<mlo::Batch>{unlabeled});
    auto mid = std::make_shared<Teacher>(
        "teacher", mlo::ProblemConfig().unroll_steps(5).method(
                       mlo::NeumannOptions().iterations(3).alpha(0.05)));
    mid->module(torch::nn::Linear(d, 1))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05))
        .data(std::vector<mlo::Batch>{labeled});
    mid->student_valid = valid_mid;
    auto top = std::make_shared<Top>("top");
    top->module(torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)));
    torch::nn::init::constant_(top->log_strength(), -2.0);
    top->optimizer<torch::optim::Adam>(torch::optim::AdamOptions(0.05))
        .data(std::vector<mlo::Batch>{valid_top});

    mlo::Engine engine(mlo::EngineConfig().train_iters(2500).valid_step(500));
    engine.add(top).add(mid).add(low).link(top, mid).link(mid, low);
    engine.validation([&] {
      torch::NoGradGuard no_grad;
      return mlo::Metrics{
          {"valid/student_mse", mse(low->predict(valid_top.data), valid_top.target).item<double>()},
          {"valid/teacher_mse", top->training_step(valid_top).item<double>()},
          {"valid/l2_strength", top->log_strength().exp().item<double>()}};
    });
    mlo::Run run(engine, mlo::RunOptions::from_command_line(argc, argv, "runs/three_level"));
    const mlo::RunResult result = run.start();
    if (!result.interrupted && !result.already_finished) {
      std::printf("steps: student %ld, teacher %ld, top %ld; teacher validation mse %.4f\n",
                  static_cast<long>(low->step_count()), static_cast<long>(mid->step_count()),
                  static_cast<long>(top->step_count()), result.valid.at("valid/teacher_mse"));
    }
  });
}
