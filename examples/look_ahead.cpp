// Three levels in a chain, with a top level that scores the learner's look-ahead:
//   learner  (an MLP classifier, theta): weighted cross-entropy on training data whose labels
//            are 40% noise; each sample's weight comes from the weighter
//   weighter (a Meta-Weight-Net, phi): maps a sample's loss to its weight; trained on the
//            learner's loss on a small clean meta set, plus exp(psi) |phi|^2
//   top      (psi, one number): the penalty's log-strength; trained on the learner's loss on a
//            clean validation set one SGD step ahead, theta' = theta - lr dL_learner/dtheta
//            (theta, phi), which `mlo::functional_call` evaluates without touching the
//            learner's module
// A chain's top level gets a hypergradient only through what its loss reads: it reads phi
// through theta' (the path [top, weighter, top]) and theta (the path [top, learner, weighter,
// top]). Prints, for 3 seeds, the learner's validation and held-out loss after 2000 steps with
// the top frozen (its learning rate 0: strength 1) and learned, and the mean paired difference.
//
//   build/examples/look_ahead
#include <mlo/mlo.h>
#include <mlo/nn/mwn.h>
#include <torch/torch.h>

#include <cstdio>

namespace {

constexpr double kLookAheadLr = 0.1;  // the learner's learning rate (plain SGD)

struct Weighter;
struct Top;

struct MlpImpl : torch::nn::Module {
  MlpImpl() : hidden(register_module("hidden", torch::nn::Linear(8, 32))),
              out(register_module("out", torch::nn::Linear(32, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return out(torch::relu(hidden(x))); }
  torch::nn::Linear hidden, out;
};

struct Learner : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Weighter> weighter{this, "weighter"};
  std::shared_ptr<MlpImpl> mlp() const { return module_as<MlpImpl>(); }
  torch::Tensor training_step(const mlo::Batch& b) override;
};

struct Weighter : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Learner> learner{this, "learner"};
  mlo::Handle<Top> top{this, "top"};
  torch::Tensor weights(const torch::Tensor& losses) {
    return module_as<mlo::nn::MWNImpl>()->forward(losses.detach().unsqueeze(1)).squeeze(1);
  }
  torch::Tensor training_step(const mlo::Batch& b) override;
};

struct Top : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Learner> learner{this, "learner"};
  torch::Tensor log_strength() const { return module().parameters()[0]; }
  torch::Tensor training_step(const mlo::Batch& b) override {
    // The learner one step ahead on its latest batch, as a function of theta and phi.
    const auto theta = learner->parameters();
    const auto g = torch::autograd::grad({learner->training_step(learner->current_batch())},
                                         theta, {}, /*retain_graph=*/true, /*create_graph=*/true);
    std::vector<torch::Tensor> ahead;
    for (size_t i = 0; i < theta.size(); ++i) ahead.push_back(theta[i] - kLookAheadLr * g[i]);
    return torch::cross_entropy_loss(mlo::functional_call(learner->mlp(), ahead, b.data),
                                     b.target);
  }
};

torch::Tensor Learner::training_step(const mlo::Batch& b) {
  const auto losses =
      torch::cross_entropy_loss(mlp()->forward(b.data), b.target, {}, at::Reduction::None);
  const auto w = weighter->weights(losses);
  return (w * losses).sum() / w.sum().detach().clamp_min(1e-8);
}

torch::Tensor Weighter::training_step(const mlo::Batch& b) {
  torch::Tensor penalty = torch::zeros({});
  for (const auto& p : parameters()) penalty = penalty + p.pow(2).sum();
  return torch::cross_entropy_loss(learner->mlp()->forward(b.data), b.target) +
         top->log_strength().exp().sum() * penalty;
}

struct Result {
  double valid, held_out, strength;
};

Result train(int seed, double top_lr) {
  torch::manual_seed(seed);
  const auto centers = 2.0 * torch::randn({3, 8});
  auto make = [&](int64_t n, double noise) {
    const auto y = torch::randint(3, {n}, torch::kLong);
    const auto x = centers.index_select(0, y) + 1.5 * torch::randn({n, 8});
    const auto flip = torch::rand({n}) < noise;
    return mlo::Batch(x, torch::where(flip, torch::randint(3, {n}, torch::kLong), y));
  };
  const mlo::Batch train = make(2000, 0.4), meta = make(60, 0), valid = make(300, 0),
                   held_out = make(1000, 0);
  auto batches = [](const mlo::Batch& all, int64_t size) {
    std::vector<mlo::Batch> out;
    for (int64_t i = 0; i + size <= all.data.size(0); i += size) {
      out.emplace_back(all.data.slice(0, i, i + size), all.target.slice(0, i, i + size));
    }
    return out;
  };

  auto learner = std::make_shared<Learner>("learner", mlo::ProblemConfig().method("darts"));
  learner->module(std::make_shared<MlpImpl>())
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(kLookAheadLr))
      .data(batches(train, 100));
  auto weighter = std::make_shared<Weighter>(
      "weighter", mlo::ProblemConfig().unroll_steps(5).method("darts"));
  weighter->module(mlo::nn::MWN(mlo::nn::MWNOptions(32)))
      .optimizer<torch::optim::Adam>(torch::optim::AdamOptions(1e-3))
      .data(std::vector<mlo::Batch>{meta});
  auto top = std::make_shared<Top>("top");
  top->module(torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)));
  torch::nn::init::zeros_(top->log_strength());
  top->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(top_lr))
      .data(std::vector<mlo::Batch>{valid});

  mlo::Engine engine(mlo::EngineConfig().train_iters(2000).log_step(0));
  engine.add(top).add(weighter).add(learner);
  engine.link(/*upper=*/weighter, /*lower=*/learner).link(/*upper=*/top, /*lower=*/weighter);
  engine.l2u(/*lower=*/learner, /*upper=*/top);  // the top's loss reads theta too
  engine.run();
  torch::NoGradGuard no_grad;
  learner->eval();
  auto loss = [&](const mlo::Batch& b) {
    return torch::cross_entropy_loss(learner->mlp()->forward(b.data), b.target).item<double>();
  };
  return {loss(valid), loss(held_out), top->log_strength().exp().item<double>()};
}

}  // namespace

int main() {
  return mlo::guard([&] {
    double sum = 0;
    for (int seed = 0; seed < 3; ++seed) {
      const Result frozen = train(seed, /*top_lr=*/0.0);
      const Result learned = train(seed, /*top_lr=*/1.0);
      std::printf("seed %d  top frozen:  validation loss %.4f  held-out loss %.4f  strength %.4f\n",
                  seed, frozen.valid, frozen.held_out, frozen.strength);
      std::printf("seed %d  top learned: validation loss %.4f  held-out loss %.4f  strength %.4f\n",
                  seed, learned.valid, learned.held_out, learned.strength);
      sum += learned.held_out - frozen.held_out;
    }
    std::printf("held-out loss, learned - frozen, mean over 3 seeds: %+.4f\n", sum / 3);
  });
}
