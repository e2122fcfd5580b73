// Tests of the forward-mode products (mlo/hypergrad/forward_mode.h) and the jvp modes of darts,
// sama, neumann and cg: equal to the double-backward products, exact where the finite difference is
// not, and a clear error (or, with mode auto, the reverse-mode route) where LibTorch has no
// forward-mode formula.

#include <mlo/hypergrad.h>
#include <mlo/hypergrad/forward_mode.h>
#include <support/inner_steps.h>
#include <support/levels.h>
#include <support/method_options.h>
#include <support/quadratic.h>
#include <support/relative_error.h>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace forward_mode_test {

using Catch::Matchers::Contains;
using mlo::testing::Quadratic;
using TensorList = std::vector<torch::Tensor>;
using mlo::testing::relative_error;

namespace {

// Upper level: lambda (3), per class.
struct L2Weights : mlo::Problem {
  using mlo::Problem::Problem;
  torch::Tensor lambda() const { return module_as<mlo::testing::ParameterModule>()->tensors.at(0); }
  torch::Tensor training_step(const mlo::Batch&) override { return lambda().sum(); }
};

// Lower level: softmax regression (3 classes, 4 features, float64) whose logits lambda shifts,
// with per-class L2 weights lambda^2: L = CE(x W^T + b + lambda, y) + 1/2 sum_k lambda_k^2
// |W_k|^2 (lambda reaches the cross-entropy's backward). `fused`: LibTorch's cross-entropy
// kernel (whose backward, nll_loss_backward, has no forward-mode formula); else logsumexp minus
// the target's logit.
struct Softmax : mlo::Problem {
  using mlo::Problem::Problem;
  L2Weights* upper = nullptr;
  bool fused = false;
  torch::Tensor x = torch::randn({10, 4}, torch::kDouble);
  torch::Tensor y = torch::randint(3, {10});
  torch::Tensor training_step(const mlo::Batch&) override {
    const auto m = module_as<mlo::testing::ParameterModule>();
    const torch::Tensor w = m->tensors.at(0), b = m->tensors.at(1);
    const torch::Tensor z = torch::addmm(b, x, w.t()) + upper->lambda();
    const torch::Tensor ce =
        fused ? torch::cross_entropy_loss(z, y)
              : (torch::logsumexp(z, 1) - z.gather(1, y.unsqueeze(1)).squeeze(1)).mean();
    return ce + 0.5 * (upper->lambda().pow(2) * w.pow(2).sum(1)).sum();
  }
};

struct SoftmaxPair {
  std::shared_ptr<L2Weights> upper;
  std::shared_ptr<Softmax> lower;
  std::shared_ptr<mlo::detail::LevelRuntime> upper_level, lower_level;
  TensorList v;

  SoftmaxPair(mlo::ProblemConfig config, bool fused) {
    torch::manual_seed(11);
    const auto opts = torch::TensorOptions().dtype(torch::kDouble);
    upper = std::make_shared<L2Weights>("upper");
    upper->module(std::make_shared<mlo::testing::ParameterModule>(
        std::vector<std::pair<std::string, torch::Tensor>>{
            {"lambda", torch::rand({3}, opts) + 0.1}}));
    lower = std::make_shared<Softmax>("lower", std::move(config));
    lower->module(std::make_shared<mlo::testing::ParameterModule>(
        std::vector<std::pair<std::string, torch::Tensor>>{{"w", torch::randn({3, 4}, opts)},
                                                           {"b", torch::randn({3}, opts)}}));
    lower->upper = upper.get();
    lower->fused = fused;
    upper_level = mlo::testing::make_level(*upper);
    lower_level = mlo::testing::make_level(*lower);
    for (const auto& t : lower->parameters()) v.push_back(torch::randn_like(t));
  }

  // -d/dlambda (dL/dw . u) and H u, by double backward in the test.
  TensorList mixed(const TensorList& u) {
    const auto w = lower->parameters();
    const auto g = torch::autograd::grad({lower->training_step(mlo::Batch())}, w, {}, true, true);
    torch::Tensor gu = torch::zeros({}, torch::kDouble);
    for (size_t i = 0; i < g.size(); ++i) gu = gu + (g[i] * u[i]).sum();
    return {-torch::autograd::grad({gu}, {upper->lambda()})[0]};
  }
  TensorList hvp(const TensorList& u) {
    const auto w = lower->parameters();
    const auto g = torch::autograd::grad({lower->training_step(mlo::Batch())}, w, {}, true, true);
    torch::Tensor gu = torch::zeros({}, torch::kDouble);
    for (size_t i = 0; i < g.size(); ++i) gu = gu + (g[i] * u[i]).sum();
    return torch::autograd::grad({gu}, w);
  }
  TensorList apply(const TensorList& u) {
    auto method = lower->config().method().make();
    return method->apply(u, *lower_level, *upper_level);
  }
};

}  // namespace

TEST_CASE("Forward mode: darts jvp is the exact mixed product, without eps", "[hypergrad]") {
  SECTION("the quadratic: B^T v, and the lower parameters untouched") {
    Quadratic q = Quadratic::make(
        mlo::ProblemConfig().method(mlo::DartsOptions().mode(mlo::DartsMode::kJvp)));
    const torch::Tensor w_before = q.lower->w().detach().clone();
    const auto method = q.lower->config().method().make();
    const auto got = method->apply({q.v}, *q.lower_level, *q.upper_level);
    const double error = relative_error(got, {q.b.t().mv(q.v)});
    INFO("relative error " << error);
    CHECK(error < 1e-12);
    CHECK(torch::equal(q.lower->w().detach(), w_before));
    CHECK_FALSE(q.upper->lambda().grad().defined());
  }
  SECTION("softmax regression: double backward's product; the finite difference within O(eps^2)") {
    SoftmaxPair jvp(mlo::ProblemConfig().method(mlo::DartsOptions().mode(mlo::DartsMode::kJvp)),
                    /*fused=*/false);
    const auto want = jvp.mixed(jvp.v);
    const double error = relative_error(jvp.apply(jvp.v), want);
    INFO("jvp: relative error " << error);
    CHECK(error < 1e-10);
    // The central difference's error falls as eps^2: 100x for 10x smaller steps.
    auto fd_error = [&](double alpha) {
      SoftmaxPair fd(mlo::ProblemConfig().method(mlo::DartsOptions().alpha(alpha)), false);
      return relative_error(fd.apply(fd.v), want);
    };
    const double coarse = fd_error(1e-1), fine = fd_error(1e-2);
    INFO("finite difference: relative error " << coarse << " (alpha 0.1), " << fine
                                                << " (alpha 0.01)");
    CHECK(coarse / fine > 50);
    CHECK(coarse / fine < 200);
  }
}

TEST_CASE("Forward mode: sama jvp is the exact mixed product along J v, without eps",
          "[hypergrad][sama]") {
  // SAMA's direction J v reads the lower optimizer's state after its latest step: three steps of
  // SGD with momentum, or of Adam, then the product along it.
  const bool adam = GENERATE(false, true);
  CAPTURE(adam);
  struct Stepped {
    SoftmaxPair pair;
    mlo::hypergrad::Sama sama;
    Stepped(mlo::SamaOptions options, bool adam)
        : pair(mlo::ProblemConfig().method(options), /*fused=*/false), sama(options) {
      if (adam) {
        pair.lower->optimizer<torch::optim::Adam>(torch::optim::AdamOptions(0.05).eps(1e-3));
      } else {
        pair.lower->optimizer<torch::optim::SGD>(
            torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
      }
      pair.lower_level =
          mlo::testing::make_level(*pair.lower, {pair.lower.get(), pair.upper.get()});
      mlo::testing::run_unroll(*pair.lower_level, &sama, 3);
    }
    TensorList apply() { return sama.apply(pair.v, *pair.lower_level, *pair.upper_level); }
  };
  Stepped jvp(mlo::SamaOptions().mode(mlo::MixedMode::kJvp), adam);
  const TensorList direction = jvp.sama.precondition(jvp.pair.v, *jvp.pair.lower_level);
  const TensorList want = jvp.pair.mixed(direction);
  const TensorList w_before = {jvp.pair.lower->parameters()[0].detach().clone()};
  const double error = relative_error(jvp.apply(), want);
  INFO("jvp: relative error " << error);
  CHECK(error < 1e-10);
  CHECK(torch::equal(jvp.pair.lower->parameters()[0].detach(), w_before[0]));
  // The finite difference along the same direction: its error falls as eps^2.
  auto fd_error = [&](double alpha) {
    Stepped fd(mlo::SamaOptions().alpha(alpha), adam);
    return relative_error(fd.apply(), want);
  };
  const double coarse = fd_error(1e-1), fine = fd_error(1e-2);
  INFO("finite difference: relative error " << coarse << " (alpha 0.1), " << fine
                                              << " (alpha 0.01)");
  CHECK(coarse / fine > 50);
  CHECK(coarse / fine < 200);
}

TEST_CASE("Forward mode: forward-over-reverse Hessian-vector products equal double backward's",
          "[hypergrad]") {
  SECTION("the quadratic: A u") {
    Quadratic q = Quadratic::make(mlo::ProblemConfig());
    const auto got = mlo::hypergrad::forward_hvp(*q.lower_level, {q.v}, "test");
    const double error = relative_error(got, {q.a.mv(q.v)});
    INFO("relative error " << error);
    CHECK(error < 1e-12);
  }
  SECTION("softmax regression") {
    SoftmaxPair p(mlo::ProblemConfig(), /*fused=*/false);
    const auto got = mlo::hypergrad::forward_hvp(*p.lower_level, p.v, "test");
    const double error = relative_error(got, p.hvp(p.v));
    INFO("relative error " << error);
    CHECK(error < 1e-10);
  }
  SECTION("neumann and cg with mode jvp equal mode double_backward") {
    const bool use_cg = GENERATE(false, true);
    INFO((use_cg ? "cg" : "neumann"));
    auto config = [&](mlo::HvpMode mode) {
      return use_cg ? mlo::ProblemConfig().method(mlo::CGOptions().iterations(5).mode(mode))
                    : mlo::ProblemConfig().method(
                          mlo::NeumannOptions().iterations(5).alpha(0.5).mode(mode));
    };
    SoftmaxPair reverse(config(mlo::HvpMode::kDoubleBackward), false);
    SoftmaxPair forward(config(mlo::HvpMode::kJvp), false);
    const auto want = reverse.apply(reverse.v);
    const double error = relative_error(forward.apply(forward.v), want);
    INFO("relative error " << error);
    CHECK(error < 1e-10);
  }
}

TEST_CASE("Forward mode: a backward operator without a forward-mode formula", "[hypergrad]") {
  // LibTorch's fused cross-entropy: its backward (nll_loss_backward) has no forward-mode formula.
  const std::string lane = std::string("LibTorch ") + TORCH_VERSION;
  SECTION("darts: jvp names the operator and the LibTorch; auto takes the finite difference") {
    SoftmaxPair jvp(mlo::ProblemConfig().method(mlo::DartsOptions().mode(mlo::DartsMode::kJvp)),
                    /*fused=*/true);
    CHECK_THROWS_AS(jvp.apply(jvp.v), mlo::hypergrad::ForwardModeUnsupported);
    CHECK_THROWS_WITH(jvp.apply(jvp.v), Contains("darts (mode jvp): problem 'lower'") &&
                                            Contains(lane) && Contains("'nll_loss_backward'"));
    SoftmaxPair fd(mlo::ProblemConfig().method(mlo::DartsOptions()), true);
    SoftmaxPair automatic(
        mlo::ProblemConfig().method(mlo::DartsOptions().mode(mlo::DartsMode::kAuto)), true);
    const auto method = automatic.lower->config().method().make();
    for (int k = 0; k < 2; ++k) {  // (the second call goes straight to the finite difference)
      const auto got = method->apply(automatic.v, *automatic.lower_level,
                                     *automatic.upper_level);
      CHECK(torch::equal(got[0], fd.apply(fd.v)[0]));
    }
  }
  SECTION("sama: jvp names the operator; auto takes the finite difference") {
    auto apply = [](mlo::MixedMode mode) {
      SoftmaxPair pair(mlo::ProblemConfig(), /*fused=*/true);
      pair.lower->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
      pair.lower_level =
          mlo::testing::make_level(*pair.lower, {pair.lower.get(), pair.upper.get()});
      mlo::hypergrad::Sama sama(mlo::SamaOptions().mode(mode));
      mlo::testing::run_unroll(*pair.lower_level, &sama, 2);
      return sama.apply(pair.v, *pair.lower_level, *pair.upper_level);
    };
    CHECK_THROWS_WITH(apply(mlo::MixedMode::kJvp), Contains("sama (mode jvp): problem 'lower'") &&
                                                     Contains(lane) &&
                                                     Contains("'nll_loss_backward'"));
    CHECK(torch::equal(apply(mlo::MixedMode::kAuto)[0],
                       apply(mlo::MixedMode::kFiniteDifference)[0]));
  }
  SECTION("cg: jvp names the operator; auto takes double backward's products") {
    auto config = [](mlo::HvpMode mode) {
      return mlo::ProblemConfig().method(mlo::CGOptions().iterations(4).mode(mode));
    };
    SoftmaxPair jvp(config(mlo::HvpMode::kJvp), true);
    CHECK_THROWS_WITH(jvp.apply(jvp.v), Contains("cg (mode jvp)") && Contains(lane) &&
                                            Contains("'nll_loss_backward'"));
    SoftmaxPair reverse(config(mlo::HvpMode::kDoubleBackward), true);
    SoftmaxPair automatic(config(mlo::HvpMode::kAuto), true);
    CHECK(torch::equal(automatic.apply(automatic.v)[0], reverse.apply(reverse.v)[0]));
  }
}

TEST_CASE("Forward mode: the mode names", "[hypergrad]") {
  CHECK(mlo::from_string<mlo::DartsMode>("jvp") == mlo::DartsMode::kJvp);
  CHECK_THROWS_WITH(mlo::from_string<mlo::MixedMode>("exact", "problems.inner.sama.mode"),
                    "problems.inner.sama.mode: unknown mixed-product mode 'exact'; "
                    "valid names: finite_difference, jvp, auto");
  CHECK(mlo::from_string<mlo::HvpMode>("double_backward") == mlo::HvpMode::kDoubleBackward);
  CHECK_THROWS_WITH(mlo::from_string<mlo::HvpMode>("forward", "problems.inner.cg.mode"),
                    "problems.inner.cg.mode: unknown Hessian-vector product mode 'forward'; "
                    "valid names: double_backward, jvp, auto");
}

}  // namespace forward_mode_test
