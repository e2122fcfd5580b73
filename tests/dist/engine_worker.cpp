// One rank of the data-parallel engine tests (engine_dist_test spawns them; without RANK and
// WORLD_SIZE it is the 1-process reference on the global batch). Usage:
//
//   engine_worker PAIR STRATEGY [METHOD]
//
// PAIR: `hpo` (logistic regression with per-feature L2 decays, tuned on a validation loss),
// `reweight` (an MLP classifier trained on a weighted loss; a weight net learns the weights on a
// meta batch) or `three` (three scalar levels with per-sample coefficients: a two-hop path).
// STRATEGY: default | distributed | zero1 | zero2 | zero3. METHOD: darts | neumann | cg | sama,
// each with `_jvp` for its forward-mode products (mode jvp).
// The reweighting pair's networks are mlo::nn::Chains (zero3 shards them block by block). Each
// rank reads
// its contiguous shard of every global batch; the lower level accumulates 2 micro-batches per
// optimizer step. Prints the final parameters of both levels (gathered under zero3), the bytes of
// parameters (`param_bytes`) and optimizer state (`state_bytes`) each level holds, and the most
// gradient bytes a level held at an optimizer step (`grad_bytes`).
// With MLO_TEST_OPT_OUT=upper (or lower), that level of the hpo or reweight pair opts out of data
// parallelism (`data_parallel(false)`) and reads the full global batches on every rank. With
// MLO_TEST_DIE_AT=K, rank 1 exits abruptly after global step K. With MLO_TEST_SAVE=FILE, rank 0
// saves the engine's state after global step MLO_TEST_SAVE_AT (default 3) into FILE (under
// zero1/zero2/zero3 every rank saves its own, FILE.rankR); with MLO_TEST_LOAD=FILE, every rank
// loads FILE (FILE.rankR) before training. With MLO_TEST_CHECKPOINT=1 the lower level checkpoints
// its first two blocks.
#include <mlo/base/error.h>
#include <mlo/mlo.h>
#include <mlo/dist/process_group.h>
#include <mlo/io/state.h>
#include <mlo/nn/chain.h>

#include <support/quadratic.h>
#include <support/step_callback.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <string>

namespace {

using mlo::testing::ParameterModule;
using Params = std::vector<std::pair<std::string, torch::Tensor>>;
const auto kDouble = torch::TensorOptions().dtype(torch::kFloat64);

// A fixed data set: rows of features, binary or 3-class labels.
torch::Tensor features(int64_t rows, int64_t dims, double phase) {
  return (torch::arange(rows * dims, kDouble).reshape({rows, dims}) * 0.37 + phase).sin();
}

// Global batch k of `size` rows (cycling over the data), then this rank's contiguous shard.
mlo::Batch shard(const torch::Tensor& x, const torch::Tensor& y, int64_t k, int64_t size,
                 int rank, int world) {
  const int64_t n = x.size(0);
  const auto rows = (torch::arange(size, torch::kLong) + k * size).remainder(n);
  const int64_t per = size / world;
  const auto mine = rows.narrow(0, rank * per, per);
  return mlo::Batch(x.index_select(0, mine), y.index_select(0, mine));
}

// The global batches cycle with period lcm(n, size) / size; one period of this rank's shards, as a
// stream whose position a saved state keeps (a resumed run goes on with the same batches).
std::shared_ptr<mlo::BatchStream> stream(torch::Tensor x, torch::Tensor y, int64_t size, int rank,
                                         int world) {
  const int64_t n = x.size(0);
  const int64_t period = n / std::gcd(n, size);
  std::vector<mlo::Batch> batches;
  for (int64_t k = 0; k < period; ++k) batches.push_back(shard(x, y, k, size, rank, world));
  return std::make_shared<mlo::VectorStream>(std::move(batches));
}

// Counts the bytes of the gradients a level holds when it steps (undefined ones are not held).
struct GradBytes {
  int64_t most = 0;
  void see(const std::vector<at::Tensor>& grads) {
    int64_t bytes = 0;
    for (const auto& g : grads) {
      if (g.defined()) bytes += g.numel() * static_cast<int64_t>(g.element_size());
    }
    most = std::max(most, bytes);
  }
};

// ---- hpo: L(w, b; lambda) = BCE(x w + b, y) + 1/2 sum_j exp(lambda_j) w_j^2 ---------------------

struct Decay : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Problem* lower = nullptr;
  GradBytes grads;
  torch::Tensor lambda() const { return module_as<ParameterModule>()->tensors.at(0); }
  torch::Tensor training_step(const mlo::Batch& b) override {
    const auto& p = lower->module_as<ParameterModule>()->tensors;
    return torch::binary_cross_entropy_with_logits(b.data.mv(p[0]) + p[1], b.target);
  }
  void grad_callback(std::vector<at::Tensor>& g) override { grads.see(g); }
};

struct Logistic : mlo::Problem {
  using mlo::Problem::Problem;
  Decay* upper = nullptr;
  GradBytes grads;
  torch::Tensor training_step(const mlo::Batch& b) override {
    const auto& p = module_as<ParameterModule>()->tensors;
    const auto fit = torch::binary_cross_entropy_with_logits(b.data.mv(p[0]) + p[1], b.target);
    return fit + 0.5 * (upper->lambda().exp() * p[0] * p[0]).sum();
  }
  void grad_callback(std::vector<at::Tensor>& g) override { grads.see(g); }
};

// ---- reweight: mean_i sigmoid(net(l_i)) l_i on the classifier; mean CE on the meta batch -------

// second(tanh(first(x))), as an mlo::nn::Chain: zero3 shards its two Linear blocks.
using Mlp = mlo::nn::ChainImpl;
std::shared_ptr<Mlp> mlp(int64_t in, int64_t hidden, int64_t out) {
  mlo::nn::Chain chain;
  chain->push_back("first", torch::nn::Linear(in, hidden))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("second", torch::nn::Linear(hidden, out));
  chain->to(torch::kFloat64);
  return chain.ptr();
}

torch::Tensor per_sample_ce(const torch::Tensor& logits, const torch::Tensor& target) {
  return -torch::log_softmax(logits, 1).gather(1, target.unsqueeze(1)).squeeze(1);
}

struct WeightNet : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Problem* lower = nullptr;
  GradBytes grads;
  torch::Tensor weights(const torch::Tensor& losses) {
    return torch::sigmoid(module_as<Mlp>()->forward(losses.detach().unsqueeze(1))).squeeze(1);
  }
  torch::Tensor training_step(const mlo::Batch& b) override {
    return per_sample_ce(lower->module_as<Mlp>()->forward(b.data), b.target).mean();
  }
  void grad_callback(std::vector<at::Tensor>& g) override { grads.see(g); }
};

struct Classifier : mlo::Problem {
  using mlo::Problem::Problem;
  WeightNet* upper = nullptr;
  GradBytes grads;
  torch::Tensor training_step(const mlo::Batch& b) override {
    const auto losses = per_sample_ce(module_as<Mlp>()->forward(b.data), b.target);
    return (upper->weights(losses) * losses).mean();
  }
  void grad_callback(std::vector<at::Tensor>& g) override { grads.see(g); }
};

// ---- three: scalar levels whose coefficients depend on each sample (so every hop of the deeper
// path [top, mid, low, top] depends on its level's batch, tests/core/three_level_test.cpp's
// quadratics with per-sample coefficients) ---------------------------------------------------

struct Scalar : torch::nn::Module {
  explicit Scalar(double value) { w = register_parameter("w", torch::full({1}, value, kDouble)); }
  torch::Tensor w;
};

struct Level : mlo::Problem {
  Level(std::string name, mlo::ProblemConfig config, double init)
      : mlo::Problem(std::move(name), std::move(config)) {
    module(std::make_shared<Scalar>(init))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.2).momentum(0.5));
  }
  torch::Tensor w() const { return module_as<Scalar>()->w; }
  Level* top = nullptr;  // non-owning handles: the engine owns the problems
  Level* mid = nullptr;
  Level* low = nullptr;
};

struct Low : Level {
  using Level::Level;
  torch::Tensor training_step(const mlo::Batch& b) override {
    const auto x = b.data.squeeze(1);
    return (0.5 * 2.0 * (1 + 0.3 * x) * w().pow(2) - 0.7 * (1 + x) * w() * top->w() -
            0.3 * (1 - 0.5 * x) * w() * mid->w())
        .mean();
  }
};

struct Mid : Level {
  using Level::Level;
  torch::Tensor training_step(const mlo::Batch& b) override {
    const auto x = b.data.squeeze(1);
    return (0.5 * 1.5 * (1 + 0.2 * x) * w().pow(2) - 0.4 * (1 - x) * w() * low->w() -
            0.9 * (1 + 0.5 * x) * w() * top->w())
        .mean();
  }
};

struct Top : Level {
  using Level::Level;
  torch::Tensor training_step(const mlo::Batch& b) override {
    return (0.5 * (mid->w() - 3.0 - b.data.squeeze(1)).pow(2)).mean();
  }
};

void print(const std::string& label, const std::vector<at::Tensor>& tensors) {
  std::cout << label;
  for (const auto& t : tensors) {
    const auto flat = t.detach().to(torch::kDouble).reshape({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) std::printf(" %.17g", flat[i].item<double>());
  }
  std::cout << std::endl;
}

mlo::ProblemConfig lower_config(const std::string& method) {
  auto config = mlo::ProblemConfig().unroll_steps(2).gradient_accumulation(2);
  // MLO_TEST_CHECKPOINT=1: the lower level's chain runs its first two blocks checkpointed.
  if (const char* on = std::getenv("MLO_TEST_CHECKPOINT"); on != nullptr && std::string(on) == "1") {
    config.checkpointing(
        mlo::CheckpointingOptions(mlo::Checkpointing::kUniform).segments(2));
  }
  const std::string suffix = "_jvp";
  const bool jvp = method.size() > suffix.size() &&
                   method.compare(method.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string name = jvp ? method.substr(0, method.size() - suffix.size()) : method;
  const auto hvp = jvp ? mlo::HvpMode::kJvp : mlo::HvpMode::kDoubleBackward;
  const auto mixed = jvp ? mlo::MixedMode::kJvp : mlo::MixedMode::kFiniteDifference;
  if (name == "neumann") {
    return config.method(mlo::NeumannOptions().iterations(3).alpha(0.5).mode(hvp));
  }
  if (name == "cg") return config.method(mlo::CGOptions().iterations(3).mode(hvp));
  if (name == "sama") return config.method(mlo::SamaOptions().mode(mixed));
  MLO_CHECK(name == "darts", "unknown method '", method, "'");
  return config.method(mlo::DartsOptions().mode(mixed));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: engine_worker hpo|reweight STRATEGY [darts|neumann|cg]" << std::endl;
    return 64;
  }
  const std::string pair = argv[1];
  const auto strategy = mlo::from_string<mlo::dist::Strategy>(argv[2]);
  const std::string method = argc > 3 ? argv[3] : "darts";
  const auto where = mlo::dist::Rendezvous::from_env();
  const int rank = where.rank, world = where.world_size;
  const char* die_at = std::getenv("MLO_TEST_DIE_AT");
  const char* save_to = std::getenv("MLO_TEST_SAVE");
  const char* load_from = std::getenv("MLO_TEST_LOAD");
  const std::string opt_out =
      std::getenv("MLO_TEST_OPT_OUT") ? std::getenv("MLO_TEST_OPT_OUT") : "";
  if (!opt_out.empty() && opt_out != "upper" && opt_out != "lower") {
    std::cerr << "MLO_TEST_OPT_OUT must be upper or lower, got '" << opt_out << "'" << std::endl;
    return 64;
  }
  // An opted-out level reads the whole global batch on every rank, as in one process.
  const bool upper_shared = opt_out == "upper", lower_shared = opt_out == "lower";
  const int upper_rank = upper_shared ? 0 : rank, upper_world = upper_shared ? 1 : world;
  const int lower_rank = lower_shared ? 0 : rank, lower_world = lower_shared ? 1 : world;
  const auto upper_config = mlo::ProblemConfig().data_parallel(!upper_shared);
  try {
    torch::manual_seed(3 + rank);  // ranks draw different initial weights: rank 0's must win
    mlo::Engine engine(mlo::EngineConfig().train_iters(6).strategy(strategy).timeout_s(20));
    std::shared_ptr<mlo::Problem> upper, lower;
    std::function<void()> report;
    if (pair == "hpo") {
      auto decay = std::make_shared<Decay>("decay", upper_config);
      auto logistic =
          std::make_shared<Logistic>("logistic", lower_config(method).data_parallel(!lower_shared));
      decay->lower = logistic.get();
      logistic->upper = decay.get();
      decay->module(std::make_shared<ParameterModule>(Params{{"lambda", 0.1 * torch::randn({5}, kDouble)}}))
          .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(2.0).momentum(0.5));
      logistic
          ->module(std::make_shared<ParameterModule>(
              Params{{"w", 0.2 * torch::randn({5}, kDouble)}, {"b", torch::zeros({1}, kDouble)}}))
          .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.3).momentum(0.9));
      const auto x = features(40, 5, 0.0), xv = features(24, 5, 1.3);
      const auto y = (x.sum(1) > 0.2).to(torch::kFloat64), yv = (xv.sum(1) > 0.2).to(torch::kFloat64);
      logistic->data(stream(x, y, 8, lower_rank, lower_world));
      decay->data(stream(xv, yv, 8, upper_rank, upper_world));
      upper = decay;
      lower = logistic;
      report = [&, decay, logistic] {
        std::cout << "grad_bytes " << decay->grads.most << " " << logistic->grads.most << std::endl;
      };
    } else if (pair == "reweight") {
      auto net = std::make_shared<WeightNet>("weights", upper_config);
      auto classifier = std::make_shared<Classifier>(
          "classifier", lower_config(method).data_parallel(!lower_shared));
      net->lower = classifier.get();
      classifier->upper = net.get();
      classifier->module(mlp(6, 16, 3)).optimizer<torch::optim::SGD>(
          torch::optim::SGDOptions(0.2).momentum(0.9).weight_decay(1e-3));
      auto weights = mlp(1, 8, 1);
      // SGD, not Adam: Adam's first steps are about lr * sign(g), blind to the errors in the
      // hypergradient's magnitude that the test must see.
      net->module(weights).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(20.0).momentum(0.5));
      const auto x = features(48, 6, 0.4), xm = features(16, 6, 2.1);
      const auto y = (x.narrow(1, 0, 3).argmax(1)), ym = (xm.narrow(1, 0, 3).argmax(1));
      classifier->data(stream(x, y, 8, lower_rank, lower_world));
      net->data(stream(xm, ym, 4, upper_rank, upper_world));
      upper = net;
      lower = classifier;
      report = [&, net, classifier] {
        std::cout << "grad_bytes " << net->grads.most << " " << classifier->grads.most << std::endl;
      };
    } else if (pair == "three") {
      if (!opt_out.empty()) {
        std::cerr << "MLO_TEST_OPT_OUT applies to the hpo and reweight pairs" << std::endl;
        return 64;
      }
      auto low = std::make_shared<Low>("low", lower_config(method).gradient_accumulation(1), 0.2);
      auto mid = std::make_shared<Mid>("mid", lower_config(method).gradient_accumulation(1), -0.4);
      auto top = std::make_shared<Top>("top", mlo::ProblemConfig(), 0.5);
      for (Level* p : std::vector<Level*>{low.get(), mid.get(), top.get()}) {
        p->top = top.get();
        p->mid = mid.get();
        p->low = low.get();
      }
      const auto y = torch::zeros({8}, torch::kLong);
      low->data(stream(features(8, 1, 0.3), y, 4, rank, world));
      mid->data(stream(features(8, 1, 1.9), y, 4, rank, world));
      top->data(stream(features(8, 1, 2.7), y, 4, rank, world));
      engine.add(top).add(mid).add(low).link(top, mid).link(mid, low).u2l(top, low);
      upper = top;
      lower = low;
      report = [] { std::cout << "grad_bytes 0 0" << std::endl; };
    } else {
      std::cerr << "unknown pair '" << pair << "'" << std::endl;
      return 64;
    }
    if (pair != "three") engine.add(upper).add(lower).link(upper, lower);
    if (die_at != nullptr) {
      const int64_t at = std::atoll(die_at);
      mlo_test::on_step(engine, [rank, at](int64_t step) {
        if (rank == 1 && step == at) std::_Exit(3);  // a crash: no goodbye to the group
        return true;
      });
    }
    const bool per_rank = mlo::dist::shards_optimizer_state(strategy);
    const auto rank_file = [per_rank, rank](const std::string& file) {
      return per_rank ? file + ".rank" + std::to_string(rank) : file;
    };
    if (save_to != nullptr) {
      const char* at_text = std::getenv("MLO_TEST_SAVE_AT");
      const int64_t at = at_text != nullptr ? std::atoll(at_text) : 3;
      mlo_test::on_step(engine, [&engine, rank, per_rank, at,
                                 file = rank_file(save_to)](int64_t step) {
        if ((rank == 0 || per_rank) && step == at) mlo::io::save_state(file, engine);
        return true;
      });
    }
    if (load_from != nullptr) mlo::io::load_state(rank_file(load_from), engine);
    print("upper_start", upper->full_parameters());
    engine.run();
    print("upper", upper->full_parameters());
    print("lower", lower->full_parameters());
    std::cout << "param_bytes " << upper->footprint().parameters << " "
              << lower->footprint().parameters << std::endl;
    std::cout << "state_bytes " << upper->footprint().optimizer_state << " "
              << lower->footprint().optimizer_state << std::endl;
    report();
    std::cout << "global_step " << engine.global_step() << std::endl;
  } catch (const mlo::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 2;
  }
  return 0;
}
