// Hypergradients through three levels: the top problem's gradient is the sum over its paths of
// the chained method applications, checked against the closed form on scalar quadratics.
//
//   low:  L_low(l; m, t) = a/2 l^2 - b l t - c l m        (t = top, m = mid parameters)
//   mid:  L_mid(m; l, t) = d/2 m^2 - e m l - f m t
//   top:  L_top(t; m)    = 1/2 (m - g)^2
// Edges: link(top, mid), link(mid, low), u2l(top, low). Paths of top:
//   [top, mid, top]        -> -(d2 L_mid / dt dm) H_mid^-1 v = f/d * v
//   [top, mid, low, top]   -> (b/a) * (e/d) * v
// with v = dL_top/dm = m - g. DARTS takes H^-1 = I: (f + b e) v.
#include <mlo/mlo.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace three_level_test {

namespace {

constexpr double a = 2.0, b = 0.7, c = 0.3, d = 1.5, e = 0.4, f = 0.9, g = 3.0;

struct ScalarImpl : torch::nn::Module {
  explicit ScalarImpl(double value) {
    w = register_parameter("w", torch::full({1}, value, torch::kDouble));
  }
  torch::Tensor w;
};
TORCH_MODULE(Scalar);

struct Level : mlo::Problem {
  Level(std::string name, mlo::ProblemConfig config, double init)
      : mlo::Problem(std::move(name), std::move(config)) {
    module(Scalar(init)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  }
  torch::Tensor w() const { return module_as<ScalarImpl>()->w; }
  Level* top = nullptr;  // non-owning handles: the engine owns the problems
  Level* mid = nullptr;
  Level* low = nullptr;
};

struct Low : Level {
  using Level::Level;
  torch::Tensor training_step(const mlo::Batch&) override {
    return (0.5 * a * w().pow(2) - b * w() * top->w() - c * w() * mid->w()).sum();
  }
};

struct Mid : Level {
  using Level::Level;
  torch::Tensor training_step(const mlo::Batch&) override {
    return (0.5 * d * w().pow(2) - e * w() * low->w() - f * w() * top->w()).sum();
  }
};

struct Top : Level {
  using Level::Level;
  std::vector<double> grads, mids;  // top's gradient and mid's parameter at each top step
  torch::Tensor training_step(const mlo::Batch&) override {
    return (0.5 * (mid->w() - g).pow(2)).sum();
  }
  void grad_callback(std::vector<torch::Tensor>& gr) override {
    grads.push_back(gr[0].item<double>());
    mids.push_back(mid->w().item<double>());
  }
};

void run_and_check(const mlo::ProblemConfig& method, double factor) {
  auto low = std::make_shared<Low>("low", mlo::ProblemConfig(method).unroll_steps(2), 0.2);
  auto mid = std::make_shared<Mid>("mid", mlo::ProblemConfig(method).unroll_steps(2), -0.4);
  auto top = std::make_shared<Top>("top", mlo::ProblemConfig(), 0.5);
  for (Level* p : std::vector<Level*>{low.get(), mid.get(), top.get()}) {
    p->top = top.get();
    p->mid = mid.get();
    p->low = low.get();
  }
  mlo::Engine engine(mlo::EngineConfig().train_iters(12));
  engine.add(top).add(mid).add(low).link(top, mid).link(mid, low).u2l(top, low);
  engine.run();
  REQUIRE(top->grads.size() == 3);
  for (size_t i = 0; i < top->grads.size(); ++i) {
    const double expected = factor * (top->mids[i] - g);
    INFO("top step " << i + 1 << ": gradient " << top->grads[i] << ", expected " << expected);
    CHECK(top->grads[i] == Approx(expected).epsilon(1e-8));
  }
}

}  // namespace

TEST_CASE("Three levels: DARTS sums both paths of the top problem", "[core][hypergrad]") {
  run_and_check(mlo::ProblemConfig().method(mlo::DartsOptions().alpha(0.01)), f + b * e);
}

TEST_CASE("Three levels: CG chains exact inverse Hessians through mid and low",
          "[core][hypergrad]") {
  // One CG step is exact for a 1-dimensional system.
  run_and_check(mlo::ProblemConfig().method(mlo::CGOptions().iterations(1).alpha(0.3)),
                f / d + (b / a) * (e / d));
}

}  // namespace three_level_test
