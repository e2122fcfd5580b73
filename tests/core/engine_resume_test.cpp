// Saving and resuming an engine mid-run gives, bit for bit, the run that was never interrupted:
// with roll-back (whose pre-unroll snapshot must survive the save), and when a parent's next
// step re-evaluates the loss of a non-leaf child on the batch that child saw before the save.
#include "support/in_memory_state.h"

#include <mlo/mlo.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>

namespace engine_resume_test {

namespace {

struct ScalarImpl : torch::nn::Module {
  explicit ScalarImpl(double value) {
    w = register_parameter("w", torch::full({1}, value, torch::kDouble));
  }
  torch::Tensor w;
};
TORCH_MODULE(Scalar);

// loss = (1 + x^2)(w - 1)^2 + (1 + x) w * sum of the linked problems' w, with x the batch's
// value: the curvature and the mixed derivative both depend on the batch.
struct Node : mlo::Problem {
  Node(std::string name, mlo::ProblemConfig config, double init, uint64_t seed)
      : mlo::Problem(std::move(name), std::move(config)) {
    module(Scalar(init))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05).momentum(0.9));
    torch::manual_seed(seed);
    std::vector<mlo::Batch> batches;
    for (int i = 0; i < 7; ++i) batches.emplace_back(torch::randn({1}, torch::kDouble));
    data(batches);
  }
  torch::Tensor w() const { return module_as<ScalarImpl>()->w; }
  torch::Tensor training_step(const mlo::Batch& batch) override {
    const torch::Tensor x = batch.data.defined() ? batch.data : torch::zeros({1}, torch::kDouble);
    torch::Tensor loss = ((1 + x * x) * (w() - 1).pow(2)).sum();
    for (const auto& in : inputs) loss = loss + ((1 + x) * w() * in->w()).sum();
    return loss;
  }
  std::vector<Node*> inputs;  // non-owning: the engine owns the problems
};

using Nodes = std::vector<std::shared_ptr<Node>>;

void link(mlo::Engine& engine, const std::shared_ptr<Node>& upper,
          const std::shared_ptr<Node>& lower) {
  engine.link(upper, lower);
  upper->inputs.push_back(lower.get());
  lower->inputs.push_back(upper.get());
}

// Builds a fresh graph, runs it to `stop` (saving there) and then, in a second fresh graph that
// loads the saved state, on to `total`; or straight to `total` when `stop` is 0.
using Builder = std::function<Nodes(mlo::Engine&)>;

std::vector<double> run(const Builder& build, int64_t total, int64_t stop) {
  std::string saved;
  if (stop > 0) {
    mlo::Engine engine(mlo::EngineConfig().train_iters(stop));
    build(engine);
    engine.run();
    saved = mlo_test::saved_state(engine);
  }
  mlo::Engine engine(mlo::EngineConfig().train_iters(total));
  const Nodes nodes = build(engine);
  if (stop > 0) {
    mlo_test::load_state(engine, saved);
    REQUIRE(engine.global_step() == stop);
  }
  engine.run();
  std::vector<double> out;
  for (const auto& n : nodes) {
    out.push_back(n->w().item<double>());
    out.push_back(static_cast<double>(n->step_count()));
  }
  return out;
}

void require_identical(const std::vector<double>& resumed, const std::vector<double>& straight) {
  REQUIRE(resumed.size() == straight.size());
  for (size_t i = 0; i < resumed.size(); ++i) {
    INFO("value " << i << ": resumed " << resumed[i] << ", uninterrupted " << straight[i]);
    CHECK(resumed[i] == straight[i]);  // bit for bit
  }
}

// An outer node linked with an inner one that `inner_config` configures (on Adam, lr 0.05, with
// `adam`; else the node's SGD).
Builder outer_over_inner(mlo::ProblemConfig inner_config, bool adam) {
  return [inner_config, adam](mlo::Engine& engine) {
    auto outer = std::make_shared<Node>("outer", mlo::ProblemConfig(), 0.3, 1);
    auto inner = std::make_shared<Node>("inner", inner_config, -0.2, 2);
    if (adam) inner->optimizer<torch::optim::Adam>(torch::optim::AdamOptions(0.05));
    engine.add(outer).add(inner);
    link(engine, outer, inner);
    return Nodes{outer, inner};
  };
}

// `build` run to `total` after a save and load at each of `stops` ends where it ends unsaved.
void require_resumes(const Builder& build, int64_t total, std::initializer_list<int64_t> stops) {
  const auto straight = run(build, total, 0);
  for (int64_t stop : stops) {
    INFO("stopped after global step " << stop);
    require_identical(run(build, total, stop), straight);
  }
}

}  // namespace

TEST_CASE("Resume: roll_back saved mid-unroll resumes bit for bit", "[core][resume]") {
  const Builder build = [](mlo::Engine& engine) {
    auto outer = std::make_shared<Node>("outer", mlo::ProblemConfig(), 0.3, 1);
    auto inner = std::make_shared<Node>(
        "inner",
        mlo::ProblemConfig().unroll_steps(3).roll_back(true).method(mlo::CGOptions().iterations(1)),
        -0.2, 2);
    engine.add(outer).add(inner);
    link(engine, outer, inner);
    return Nodes{outer, inner};
  };
  const auto straight = run(build, 6, 0);
  for (int64_t stop : {1, 2, 3, 4, 5}) {
    INFO("stopped after global step " << stop);
    require_identical(run(build, 6, stop), straight);
  }
}

TEST_CASE("Resume: a parent re-evaluates a non-leaf child on the batch it saw before the save",
          "[core][resume]") {
  // low (U=2) -> mid (U=1) -> top <- side (U=3). mid steps at global steps 2, 4, 6 and is then
  // ready; side is ready at 3 and 6. top steps at 3 and 6, the first time re-evaluating mid's
  // loss on mid's batch of step 2: a run saved after step 2 must have kept it.
  const Builder build = [](mlo::Engine& engine) {
    const auto method = mlo::ProblemConfig().method(mlo::DartsOptions().alpha(0.01));
    auto top = std::make_shared<Node>("top", mlo::ProblemConfig(), 0.4, 3);
    auto mid = std::make_shared<Node>("mid", mlo::ProblemConfig(method).unroll_steps(1), 0.1, 4);
    auto low = std::make_shared<Node>("low", mlo::ProblemConfig(method).unroll_steps(2), -0.3, 5);
    auto side = std::make_shared<Node>("side", mlo::ProblemConfig(method).unroll_steps(3), 0.7, 6);
    engine.add(top).add(mid).add(low).add(side);
    link(engine, top, mid);
    link(engine, mid, low);
    link(engine, top, side);
    return Nodes{top, mid, low, side};
  };
  const auto straight = run(build, 6, 0);
  REQUIRE(straight[1] == 2);  // top stepped twice
  for (int64_t stop : {2, 4, 5}) {
    INFO("stopped after global step " << stop);
    require_identical(run(build, 6, stop), straight);
  }
}

TEST_CASE("Resume: saved between two micro-steps of an accumulation window, bit for bit",
          "[core][resume][accumulation]") {
  // The gradients accumulated so far in the window must survive the save: a lower level with
  // G=2 (saved after an odd micro-step) and an upper level with G=2 (whose window spans two of
  // its own steps, several global steps apart).
  const Builder build = [](mlo::Engine& engine) {
    auto outer = std::make_shared<Node>("outer", mlo::ProblemConfig().gradient_accumulation(2),
                                        0.3, 7);
    auto inner = std::make_shared<Node>(
        "inner",
        mlo::ProblemConfig().unroll_steps(1).gradient_accumulation(2).method(
            mlo::NeumannOptions().iterations(2).alpha(0.2)),
        -0.2, 8);
    engine.add(outer).add(inner);
    link(engine, outer, inner);
    return Nodes{outer, inner};
  };
  const auto straight = run(build, 12, 0);
  REQUIRE(straight[1] == 6);  // outer: 6 micro-steps, 3 optimizer steps
  for (int64_t stop = 1; stop < 12; ++stop) {
    INFO("stopped after global step " << stop);
    require_identical(run(build, 12, stop), straight);
  }
}

TEST_CASE("Resume: unrolled saved at an unroll boundary resumes bit for bit; mid-unroll refused",
          "[core][resume][unrolled]") {
  const Builder build = [](mlo::Engine& engine) {
    auto outer = std::make_shared<Node>("outer", mlo::ProblemConfig(), 0.3, 1);
    auto inner = std::make_shared<Node>(
        "inner", mlo::ProblemConfig().unroll_steps(3).method(mlo::UnrolledOptions()), -0.2, 2);
    engine.add(outer).add(inner);
    link(engine, outer, inner);
    return Nodes{outer, inner};
  };
  const auto straight = run(build, 9, 0);
  for (int64_t stop : {3, 6}) {
    INFO("stopped after global step " << stop);
    require_identical(run(build, 9, stop), straight);
  }
  // The resumed unroll's start state is gone: refused, not a silent zero hypergradient.
  for (int64_t stop : {1, 2, 4, 5}) {
    INFO("stopped after global step " << stop);
    REQUIRE_THROWS_WITH(run(build, 9, stop),
                        "problem 'inner': unrolled cannot resume in the middle of an unroll (the "
                        "inner trajectory's start state is not saved); save at an unroll boundary "
                        "(save_step a multiple of unroll_steps) or restart");
  }
}

TEST_CASE("Resume: forward saved anywhere in an unroll resumes bit for bit",
          "[core][resume][forward]") {
  // The tangents d w / d lambda of the unroll so far are part of the saved state (`method.inner`).
  const bool adam = GENERATE(false, true);
  CAPTURE(adam);
  require_resumes(
      outer_over_inner(mlo::ProblemConfig().unroll_steps(4).method(mlo::ForwardOptions()), adam),
      10, {1, 2, 3, 4, 5, 6, 7, 9});
}

TEST_CASE("Resume: sama with Adam, saved anywhere in an unroll, resumes bit for bit",
          "[core][resume]") {
  // The preconditioner reads the gradient and rates of the lower problem's latest optimizer
  // step. The engine saves that record with its state (`method.inner`); in these schedules the
  // lower problem also steps again before every parent step, which refreshes it.
  const bool roll_back = GENERATE(false, true);
  CAPTURE(roll_back);
  require_resumes(
      outer_over_inner(
          mlo::ProblemConfig().unroll_steps(3).roll_back(roll_back).method(mlo::SamaOptions()),
          /*adam=*/true),
      7, {1, 2, 3, 4, 5, 6});
}

TEST_CASE("Resume: the jvp modes, saved anywhere in an unroll, resume bit for bit",
          "[core][resume]") {
  // Forward-mode products keep nothing between hypergradients; sama's record of the latest
  // step is saved as in reverse mode.
  const int which = GENERATE(0, 1, 2, 3);
  const std::vector<mlo::ProblemConfig> methods = {
      mlo::ProblemConfig().method(mlo::DartsOptions().mode(mlo::MixedMode::kJvp)),
      mlo::ProblemConfig().method(mlo::SamaOptions().mode(mlo::MixedMode::kJvp)),
      mlo::ProblemConfig().method(
          mlo::NeumannOptions().iterations(3).alpha(0.5).mode(mlo::HvpMode::kJvp)),
      mlo::ProblemConfig().method(mlo::CGOptions().iterations(2).mode(mlo::HvpMode::kJvp))};
  CAPTURE(methods[which].method().name());
  require_resumes(
      outer_over_inner(mlo::ProblemConfig(methods[which]).unroll_steps(3), /*adam=*/true), 7,
      {1, 2, 3, 4, 5, 6});
}

}  // namespace engine_resume_test
