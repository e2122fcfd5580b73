// Links that cannot silently point the wrong way. Three levels as a new user writes them: a
// learner (linear regression on weighted samples), a weighter (per-sample weights 2 sigmoid(phi),
// trained on the learner's validation loss plus a penalty exp(psi) |phi|^2 / 100) and a
// regularizer psi on top (scoring the learner's one-step look-ahead on a second validation set).
// Each loss reads its neighbours' parameters, so every declared edge is real on the autograd
// graph whichever way `link` is written; written the wrong way round (the learner above the
// weighter), no step of the weighter can depend on the learner (the gradient of its loss with
// respect to phi is the penalty's alone), and the learner's hypergradient through it is exactly
// zero at every step.
#include <mlo/mlo.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

namespace link_direction_test {

using Catch::Matchers::Contains;

namespace {

constexpr int64_t kDim = 3;
constexpr int64_t kSamples = 8;

struct VectorImpl : torch::nn::Module {
  VectorImpl(int64_t size, double value) {
    v = register_parameter("v", torch::full({size}, value, torch::kDouble));
  }
  torch::Tensor v;
};
TORCH_MODULE(Vector);

struct Data {
  torch::Tensor x, y, xv, yv, x2, y2;
  Data() {
    auto gen = at::detail::createCPUGenerator(7);
    const auto w = torch::randn({kDim}, gen, torch::kDouble);
    auto make = [&](torch::Tensor& x, torch::Tensor& y) {
      x = torch::randn({kSamples, kDim}, gen, torch::kDouble);
      y = x.matmul(w) + 0.3 * torch::randn({kSamples}, gen, torch::kDouble);
    };
    make(x, y);
    make(xv, yv);
    make(x2, y2);
  }
};

struct Reg;
struct Weighter;

struct Learner : mlo::Problem {
  using mlo::Problem::Problem;
  const Data* sets = nullptr;
  Weighter* weighter = nullptr;
  torch::Tensor theta() const { return module_as<VectorImpl>()->v; }
  // The weighted loss at parameters `theta` (the look-ahead calls it at other parameters).
  torch::Tensor loss_at(const torch::Tensor& theta);
  torch::Tensor training_step(const mlo::Batch&) override { return loss_at(theta()); }
};

struct Weighter : mlo::Problem {
  using mlo::Problem::Problem;
  const Data* sets = nullptr;
  Learner* learner = nullptr;
  Reg* reg = nullptr;
  torch::Tensor phi() const { return module_as<VectorImpl>()->v; }
  torch::Tensor weights() const { return 2 * torch::sigmoid(phi()); }
  torch::Tensor training_step(const mlo::Batch&) override;
};

struct Reg : mlo::Problem {
  using mlo::Problem::Problem;
  const Data* sets = nullptr;
  Learner* learner = nullptr;
  torch::Tensor psi() const { return module_as<VectorImpl>()->v; }
  torch::Tensor training_step(const mlo::Batch&) override {
    // The learner's one-step look-ahead, scored on the second validation set.
    const torch::Tensor theta = learner->theta();
    const torch::Tensor g = torch::autograd::grad({learner->loss_at(theta)}, {theta},
                                                  /*grad_outputs=*/{}, /*retain_graph=*/true,
                                                  /*create_graph=*/true)[0];
    const torch::Tensor ahead = theta - 0.1 * g;
    return (sets->x2.matmul(ahead) - sets->y2).pow(2).mean();
  }
};

torch::Tensor Learner::loss_at(const torch::Tensor& theta) {
  return (weighter->weights() * (sets->x.matmul(theta) - sets->y).pow(2)).mean();
}

torch::Tensor Weighter::training_step(const mlo::Batch&) {
  return (sets->xv.matmul(learner->theta()) - sets->yv).pow(2).mean() +
         0.01 * reg->psi().exp().sum() * phi().pow(2).sum();
}

struct Chain {
  Data data;
  std::shared_ptr<Learner> learner;
  std::shared_ptr<Weighter> weighter;
  std::shared_ptr<Reg> reg;
  explicit Chain(const mlo::ProblemConfig& method) {
    learner = std::make_shared<Learner>("learner", mlo::ProblemConfig(method).unroll_steps(4));
    weighter = std::make_shared<Weighter>("weighter", mlo::ProblemConfig(method));
    reg = std::make_shared<Reg>("reg", mlo::ProblemConfig(method));
    learner->module(Vector(kDim, 0.0)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
    weighter->module(Vector(kSamples, 0.0))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(1.0));
    reg->module(Vector(1, 0.0)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(1.0));
    learner->sets = weighter->sets = reg->sets = &data;
    learner->weighter = weighter.get();
    weighter->learner = reg->learner = learner.get();
    weighter->reg = reg.get();
  }
};

// Collects the log lines written while alive (warnings and above), then restores the logger.
struct CapturedLog {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> previous;
  CapturedLog() : previous(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
    sink->set_pattern("%v");
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_level(spdlog::level::warn);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous); }
};

}  // namespace

TEST_CASE("a chain linked the right way trains every level", "[core][link]") {
  for (const auto& method : {mlo::ProblemConfig().method(mlo::DartsOptions()),
                             mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(3))}) {
    Chain chain(method);
    mlo::Engine engine(mlo::EngineConfig().train_iters(40).log_step(0));
    engine.add(chain.reg).add(chain.weighter).add(chain.learner);
    engine.link(chain.weighter, chain.learner).link(chain.reg, chain.weighter);
    CapturedLog log;
    engine.run();
    CHECK(chain.learner->step_count() == 40);
    CHECK(chain.weighter->step_count() == 10);
    CHECK(chain.weighter->phi().abs().max().item<double>() > 1e-4);
    CHECK(std::abs(chain.reg->psi().item<double>()) > 1e-8);
    CHECK(log.text.str().find("hypergradient") == std::string::npos);
  }
}

TEST_CASE("a chain whose lower pair is linked the wrong way round is refused at the first "
          "hypergradient, naming both problems and the direction",
          "[core][link]") {
  for (const auto& method : {mlo::ProblemConfig().method(mlo::DartsOptions()),
                             mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(3)),
                             mlo::ProblemConfig().method(mlo::CGOptions().iterations(2))}) {
    Chain chain(method);
    mlo::Engine engine(mlo::EngineConfig().train_iters(40).log_step(0));
    engine.add(chain.reg).add(chain.weighter).add(chain.learner);
    // The lower pair written the wrong way round: the learner above the weighter.
    engine.link(chain.reg, chain.weighter).link(chain.learner, chain.weighter);
    std::string what;
    try {
      engine.run();
    } catch (const mlo::Error& e) {
      what = e.what();
    }
    INFO(what);
    CHECK_THAT(what, Contains("'learner'") && Contains("'weighter'") &&
                         Contains("link(weighter, learner)"));
    // The weighter is the leaf and steps every global step; the learner's first step (its first
    // hypergradient) is the weighter's first.
    CHECK(engine.global_step() <= 1);
    CHECK(chain.learner->optimizer_steps() == 0);
  }
}

TEST_CASE("an upper problem whose hypergradient stays exactly zero gets a warning naming it",
          "[core][link]") {
  // lower w: 1/2 (w - 1)^2 + t^2 w; upper t: (w - 3)^2. d^2 L_lower / dt dw = 2t is 0 at t = 0,
  // so t's hypergradient is exactly 0 and t stays at 0: the edge is real, its value zero.
  struct Lower : mlo::Problem {
    using mlo::Problem::Problem;
    mlo::Problem* upper = nullptr;
    torch::Tensor training_step(const mlo::Batch&) override {
      const auto w = module_as<VectorImpl>()->v;
      const auto t = upper->module_as<VectorImpl>()->v;
      return (0.5 * (w - 1).pow(2) + t.pow(2) * w).sum();
    }
  };
  struct Upper : mlo::Problem {
    using mlo::Problem::Problem;
    mlo::Problem* lower = nullptr;
    torch::Tensor training_step(const mlo::Batch&) override {
      return (lower->module_as<VectorImpl>()->v - 3).pow(2).sum();
    }
  };
  auto lower = std::make_shared<Lower>("inner", mlo::ProblemConfig().unroll_steps(2));
  auto upper = std::make_shared<Upper>("outer");
  lower->module(Vector(1, 0.0)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  upper->module(Vector(1, 0.0)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  lower->upper = upper.get();
  upper->lower = lower.get();
  mlo::Engine engine(mlo::EngineConfig().train_iters(20).log_step(0));
  engine.add(upper).add(lower).link(upper, lower);
  CapturedLog log;
  engine.run();
  CHECK(upper->optimizer_steps() == 10);
  CHECK(upper->module_as<VectorImpl>()->v.item<double>() == 0.0);
  const std::string text = log.text.str();
  INFO(text);
  CHECK_THAT(text, Contains("'outer'") && Contains("'inner'"));
  // One line, not one per step.
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
}

TEST_CASE("current_batch before a problem's first step is an error naming the problem",
          "[core][link]") {
  Chain chain{mlo::ProblemConfig()};
  std::string what;
  try {
    (void)chain.weighter->current_batch();
  } catch (const mlo::Error& e) {
    what = e.what();
  }
  CHECK_THAT(what, Contains("'weighter'"));
  chain.learner->data(std::vector<mlo::Batch>{mlo::Batch(torch::ones({2, kDim}))});
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(chain.reg).add(chain.weighter).add(chain.learner);
  engine.link(chain.weighter, chain.learner).link(chain.reg, chain.weighter);
  engine.run();
  CHECK(chain.learner->current_batch().data.size(0) == 2);
}

}  // namespace link_direction_test
