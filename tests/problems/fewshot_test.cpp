// The few-shot application (problems/fewshot): iMAML's hypergradient through the engine equals
// its closed form reg (H + reg I)^{-1} v on linear-regression tasks; first-order MAML's equals v;
// the learner restarts from the meta-learner at every task; N-way K-shot tasks are what they
// say; the experiment runs from YAML and refuses bad class lists, and methods that would miss
// the path through the reset.
#include "problems/fewshot/experiment.h"
#include "problems/fewshot/first_order.h"
#include "problems/fewshot/learner.h"
#include "problems/fewshot/task_environment.h"
#include "problems/fewshot/tasks.h"
#include "support/in_memory_state.h"

#include <mlo/mlo.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>

#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <set>

namespace fewshot_test {

namespace fs = mlo::problems::fewshot;
using Catch::Matchers::Contains;

namespace {

// Linear-regression tasks in double precision: y = x w_task + noise, 2 features.
struct LinearTasks : fs::TaskSampler {
  fs::Task sample(at::Generator& g) const override {
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    const at::Tensor w = at::randn({2, 1}, g, f64);
    const auto points = [&](int64_t n) {
      const at::Tensor x = at::randn({n, 2}, g, f64);
      return mlo::Batch(x, x.mm(w) + 0.1 * at::randn({n, 1}, g, f64));
    };
    return {points(6), points(8)};
  }
  int64_t outputs() const override { return 1; }
  bool regression() const override { return true; }
  std::string describe() const override { return "linear"; }
};

// A meta-learner that keeps the gradient of its optimizer step and the learner's parameters
// and batches at that moment.
struct Watching : fs::MetaLearner {
  using fs::MetaLearner::MetaLearner;
  void grad_callback(std::vector<at::Tensor>& grads) override {
    gradient = torch::cat({grads[0].flatten(), grads[1].flatten()}).clone();
    const auto p = learner->module().parameters();
    phi = torch::cat({p[0].flatten(), p[1].flatten()}).detach().clone();
  }
  at::Tensor gradient, phi;
};

torch::nn::Sequential linear() {
  torch::nn::Sequential model(torch::nn::Linear(2, 1));
  model->to(torch::kDouble);
  return model;
}

struct Setup {
  std::shared_ptr<fs::TaskEnvironment> environment;
  std::shared_ptr<fs::Learner> inner;
  std::shared_ptr<Watching> outer;
  std::unique_ptr<mlo::Engine> engine;
};

Setup build(mlo::ProblemConfig inner_config, double reg, int64_t unroll, int64_t iters) {
  torch::manual_seed(1);
  Setup s;
  s.environment = std::make_shared<fs::TaskEnvironment>(std::make_shared<LinearTasks>(), unroll, 5);
  s.inner = std::make_shared<fs::Learner>("inner", inner_config.unroll_steps(unroll), reg, true);
  s.outer = std::make_shared<Watching>("outer");
  s.inner->module(linear()).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05));
  s.outer->module(linear()).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  s.inner->data(s.environment->stream("support"));
  s.outer->data(s.environment->stream("query"));
  s.engine = std::make_unique<mlo::Engine>(mlo::EngineConfig().train_iters(iters));
  s.engine->add(s.outer).add(s.inner).link(s.outer, s.inner).environment(s.environment);
  return s;
}

// [x 1]: the design matrix of the linear model (weight then bias).
at::Tensor design(const at::Tensor& x) {
  return torch::cat({x, torch::ones({x.size(0), 1}, x.options())}, 1);
}

// v = d(query MSE)/d(phi) and H = d^2(support MSE)/d(phi)^2 of the linear model at phi.
std::pair<at::Tensor, at::Tensor> v_and_h(const fs::Task& task, const at::Tensor& phi) {
  const at::Tensor xq = design(task.query.data);
  const at::Tensor residual = xq.mv(phi) - task.query.target.squeeze(1);
  const at::Tensor v = 2.0 / static_cast<double>(xq.size(0)) * xq.t().mv(residual);
  const at::Tensor xs = design(task.support.data);
  const at::Tensor h = 2.0 / static_cast<double>(xs.size(0)) * xs.t().mm(xs);
  return {v, h};
}

}  // namespace

TEST_CASE("Fewshot: iMAML's hypergradient through CG is reg (H + reg I)^-1 v",
          "[problems][fewshot]") {
  const double reg = GENERATE(0.5, 2.0);
  CAPTURE(reg);
  // 3 parameters: CG is exact after 3 steps.
  Setup s = build(mlo::ProblemConfig().method(mlo::CGOptions().iterations(3)), reg, 4, 4);
  s.engine->run();
  REQUIRE(s.outer->gradient.defined());
  const auto [v, h] = v_and_h(s.environment->task(), s.outer->phi);
  const at::Tensor expected =
      reg * at::linalg_solve(h + reg * torch::eye(3, h.options()), v.unsqueeze(1)).squeeze(1);
  const double error = (s.outer->gradient - expected).norm().item<double>() /
                       expected.norm().item<double>();
  CAPTURE(s.outer->gradient, expected, error);
  CHECK(error < 1e-10);
}

TEST_CASE("Fewshot: evaluation's adaptation clips each step's gradient norm as asked",
          "[problems][fewshot]") {
  // One SGD step (lr 0.1) on (w x - 100)^2 at x = 1 from w = 0: the gradient is -200, clipped to
  // norm 1 it is -1; the query (x = 1, y = 0) then scores w^2.
  torch::nn::Sequential model(torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)));
  torch::NoGradGuard no_grad;
  model->parameters()[0].zero_();
  const fs::Task task{mlo::Batch(torch::ones({1, 1}), torch::full({1, 1}, 100.0)),
                      mlo::Batch(torch::ones({1, 1}), torch::zeros({1, 1}))};
  mlo::run::OptimizerConfig sgd;
  sgd.lr = 0.1;
  torch::AutoGradMode grad(true);
  CHECK(fs::adapt(model, task, 1, sgd, 0.0, 0.0, true).loss == Approx(400.0).epsilon(1e-5));
  CHECK(fs::adapt(model, task, 1, sgd, 0.0, 1.0, true).loss == Approx(0.01).epsilon(1e-4));
  CHECK(model->parameters()[0].item<double>() == 0.0);  // (the start is left as it was)
}

TEST_CASE("Fewshot: first-order MAML hands v to the meta-learner; mismatched models are refused",
          "[problems][fewshot]") {
  Setup s = build(mlo::ProblemConfig().method(fs::FirstOrderOptions()), 0.0, 3, 3);
  s.engine->run();
  const auto [v, h] = v_and_h(s.environment->task(), s.outer->phi);
  (void)h;
  CHECK((s.outer->gradient - v).abs().max().item<double>() < 1e-12);

  Setup bad = build(mlo::ProblemConfig().method(fs::FirstOrderOptions()), 0.0, 3, 3);
  bad.inner->module(torch::nn::Sequential(torch::nn::Linear(2, 2)))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05));
  CHECK_THROWS_WITH(bad.engine->initialize(),
                    Contains("problem 'inner': method first_order needs the parameters of "
                             "problem 'outer' to match its own"));
}

TEST_CASE("Fewshot: the learner restarts from the meta-learner at every task",
          "[problems][fewshot]") {
  // Unroll 2: the outer steps at global step 2; at step 3 a new task starts from the new theta,
  // where the proximal term's gradient is zero: phi = theta - lr * grad(support MSE)(theta).
  Setup s = build(mlo::ProblemConfig().method(mlo::CGOptions().iterations(3)), 1.0, 2, 3);
  s.engine->run();
  const auto theta_list = s.outer->module().parameters();
  const at::Tensor theta =
      torch::cat({theta_list[0].flatten(), theta_list[1].flatten()}).detach();
  const fs::Task& task = s.environment->task();
  const at::Tensor xs = design(task.support.data);
  const at::Tensor grad = 2.0 / static_cast<double>(xs.size(0)) *
                          xs.t().mv(xs.mv(theta) - task.support.target.squeeze(1));
  const auto phi_list = s.inner->module().parameters();
  const at::Tensor phi = torch::cat({phi_list[0].flatten(), phi_list[1].flatten()}).detach();
  CHECK((phi - (theta - 0.05 * grad)).abs().max().item<double>() < 1e-14);
  CHECK(s.environment->tasks_drawn() == 2);
  // Methods that would hold that reset constant are refused, in C++ as in YAML.
  const auto learner = [](mlo::ProblemConfig config) {
    return std::make_shared<fs::Learner>("inner", std::move(config), 1.0, true);
  };
  CHECK_THROWS_WITH(learner(mlo::ProblemConfig().method(mlo::UnrolledOptions())),
                    Contains("the method 'unrolled' differentiates the inner steps from their"));
  CHECK_THROWS_WITH(learner(mlo::ProblemConfig().method(mlo::ForwardOptions())),
                    Contains("the method 'forward' differentiates the inner steps from their"));
  CHECK_NOTHROW(learner(mlo::ProblemConfig().method(mlo::NeumannOptions())));
}

TEST_CASE("Fewshot: N-way K-shot tasks draw N of the given classes, K + Q disjoint images each",
          "[problems][fewshot]") {
  // 6 classes of 12 images; each image's value is its index, so picks can be traced.
  const at::Tensor labels = torch::arange(72, torch::kLong).floor_divide(12);
  const at::Tensor images = torch::arange(72, torch::kFloat).reshape({72, 1, 1, 1});
  fs::ClassTasks tasks(images, labels, {1, 3, 4, 5}, 3, 2, 4, "tasks");
  at::Generator g = at::detail::createCPUGenerator();
  g.set_current_seed(3);
  const fs::Task task = tasks.sample(g);
  REQUIRE(task.support.size() == 6);
  REQUIRE(task.query.size() == 12);
  std::set<int64_t> picked;
  for (int64_t way = 0; way < 3; ++way) {
    std::set<int64_t> classes;
    for (int64_t i = 0; i < 2; ++i) {
      CHECK(task.support.target[2 * way + i].item<int64_t>() == way);
      const auto index = static_cast<int64_t>(task.support.data[2 * way + i].item<float>());
      classes.insert(index / 12);
      CHECK(picked.insert(index).second);
    }
    for (int64_t i = 0; i < 4; ++i) {
      CHECK(task.query.target[4 * way + i].item<int64_t>() == way);
      const auto index = static_cast<int64_t>(task.query.data[4 * way + i].item<float>());
      classes.insert(index / 12);
      CHECK(picked.insert(index).second);  // support and query disjoint
    }
    REQUIRE(classes.size() == 1);  // one class per way
    const int64_t c = *classes.begin();
    CHECK((c == 1 || c == 3 || c == 4 || c == 5));
  }
  // The same generator state draws the same task.
  at::Generator again = at::detail::createCPUGenerator();
  again.set_current_seed(3);
  CHECK(torch::equal(tasks.sample(again).query.data, task.query.data));
  CHECK_THROWS_WITH(fs::ClassTasks(images, labels, {1, 3}, 3, 2, 4, "tasks"),
                    Contains("3-way tasks need at least 3 classes"));
  CHECK_THROWS_WITH(fs::ClassTasks(images, labels, {1, 3, 4}, 3, 8, 8, "tasks"),
                    Contains("class 1 has 12 images, fewer than shots + queries = 16"));
}

namespace {

const char* const kTinySinusoid = R"(experiment: fewshot
name: tiny_fewshot
seed: 0
threads: 1
engine: {train_iters: 24, valid_step: 12, log_step: 0}
fewshot: {tasks: sinusoid, shots: 5, queries: 5, hidden: 8, eval_tasks: 4, pretrain_steps: 5}
problems:
  inner:
    optimizer: {name: sgd, lr: 0.01}
    unroll_steps: 3
    method: cg
  outer:
    optimizer: {name: adam, lr: 0.001}
    gradient_accumulation: 2
)";

}  // namespace

TEST_CASE("Fewshot: the experiment from YAML; sinusoid and synthetic image classes",
          "[problems][fewshot][run]") {
  SECTION("sinusoid") {
    auto experiment = mlo::run::make_experiment(
        mlo::run::parse_run_config(kTinySinusoid, "tiny.yaml"));
    experiment->engine().run();
    const mlo::Metrics test = experiment->evaluate(mlo::run::EvalSet::kTest);
    for (const char* name : {"mse", "scratch_mse", "finetune_mse", "loss"}) {
      INFO(name);
      REQUIRE(test.count(name) == 1);
      CHECK(std::isfinite(test.at(name)));
      CHECK(test.at(name) > 0.0);
    }
    // Evaluation leaves the meta-learner as it was: a second one gives the same numbers.
    CHECK(experiment->evaluate(mlo::run::EvalSet::kTest) == test);
    CHECK_THAT(experiment->report(test, {}), Contains("scratch"));
  }
  SECTION("image classes, first-order") {
    auto experiment = mlo::run::make_experiment(mlo::run::parse_run_config(
        kTinySinusoid, "tiny.yaml",
        {"fewshot.tasks=classes", "data.dataset=synthetic", "fewshot.ways=3",
         "fewshot.shots=2", "fewshot.queries=3", "fewshot.channels=4",
         "fewshot.train_classes=[0, 1, 2, 3]", "fewshot.test_classes=[5, 6, 7]",
         "problems.inner.method=first_order", "fewshot.reg=0"}));
    experiment->engine().run();
    const mlo::Metrics valid = experiment->evaluate(mlo::run::EvalSet::kValid);
    for (const char* name : {"valid/acc", "valid/scratch_acc", "valid/finetune_acc"}) {
      INFO(name);
      REQUIRE(valid.count(name) == 1);
      CHECK(valid.at(name) >= 0.0);
      CHECK(valid.at(name) <= 1.0);
    }
  }
  SECTION("bad class lists, schedules and methods are refused, naming the key") {
    const auto refused = [](std::vector<std::string> overrides, const std::string& what) {
      CHECK_THROWS_WITH(
          mlo::run::make_experiment(mlo::run::parse_run_config(kTinySinusoid, "tiny.yaml",
                                                               overrides)),
          Contains(what));
    };
    refused({"fewshot.tasks=classes", "fewshot.test_classes=[4, 5, 6, 7, 8]"},
            "fewshot.test_classes: class 4 is also a training class");
    refused({"fewshot.tasks=classes", "fewshot.ways=6"},
            "fewshot.train_classes: 6-way tasks need at least 6 classes");
    refused({"problems.inner.warmup_steps=2"}, "problems.inner.warmup_steps: must be 0");
    refused({"fewshot.reg=0"}, "fewshot.reg: 0 leaves theta out of the inner loss");
    for (const char* method : {"unrolled", "forward"}) {
      refused({std::string("problems.inner.method=") + method},
              std::string("problems.inner.method: '") + method +
                  "' differentiates the inner steps from their start");
    }
    for (const char* method : {"cg", "neumann", "darts", "sama"}) {  // the implicit ones pass
      INFO(method);
      CHECK_NOTHROW(mlo::run::make_experiment(mlo::run::parse_run_config(
          kTinySinusoid, "tiny.yaml", {std::string("problems.inner.method=") + method})));
    }
    refused({"fewshot.tasks=classes", "data.dataset=synthetic", "fewshot.ways=3",
             "fewshot.train_classes=[0, 1, 12]", "fewshot.test_classes=[5, 6, 7]"},
            "fewshot.train_classes: class 12 is not a class of synthetic (classes 0..9)");
  }
}

namespace {

std::vector<at::Tensor> parameters_of(mlo::run::Experiment& experiment, const char* name) {
  std::vector<at::Tensor> out;
  for (const auto& p : experiment.problem(name)->module().parameters()) {
    out.push_back(p.detach().clone());
  }
  return out;
}

}  // namespace

TEST_CASE("Fewshot: a run saved anywhere in a task resumes bit for bit",
          "[problems][fewshot][resume]") {
  const auto build = [](int64_t iters) {
    return mlo::run::make_experiment(mlo::run::parse_run_config(
        kTinySinusoid, "tiny.yaml", {"engine.train_iters=" + std::to_string(iters),
                                     "engine.valid_step=0"}));
  };
  auto straight = build(24);
  straight->engine().run();
  // (tasks of 3 steps, 2 per meta-batch) inside a task; at a task's end inside a meta-batch;
  // inside a task after two meta-batches
  const int64_t stop = GENERATE(7, 9, 13);
  CAPTURE(stop);
  std::string saved;
  {
    auto first = build(stop);
    first->engine().run();
    saved = mlo_test::saved_state(first->engine());
  }
  auto resumed = build(24);
  mlo_test::load_state(resumed->engine(), saved);
  resumed->engine().run();
  for (const char* name : {"outer", "inner"}) {
    const auto a = parameters_of(*resumed, name);
    const auto b = parameters_of(*straight, name);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(name << " tensor " << i);
      CHECK(torch::equal(a[i], b[i]));
    }
  }
}

}  // namespace fewshot_test
