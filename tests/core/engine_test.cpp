// Engine: configuration errors at start, validation hook, early stopping, log lines.
#include "support/step_callback.h"
#include "core/level_runtime.h"
#include "support/chain_fit.h"
#include "support/in_memory_state.h"
#include "support/names.h"
#include "support/toy.h"

#include <mlo/nn/chain.h>

#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace engine_test {

using Catch::Matchers::Contains;
using mlo::ProblemConfig;

TEST_CASE("Engine: bad or unsupported settings are refused, naming problem and field",
          "[core][engine]") {
  auto check = [](ProblemConfig config, std::vector<std::string> names) {
    auto p = mlo_test::toy("inner", std::move(config), nullptr);
    mlo::Engine engine;
    engine.add(p);
    REQUIRE_THROWS_WITH(engine.initialize(), mlo_test::Names(std::move(names)));
  };
  check(ProblemConfig().gradient_accumulation(0), {"'inner'", "gradient_accumulation", "0"});
  check(ProblemConfig().gradient_accumulation(2).roll_back(true),
        {"'inner'", "roll_back", "gradient_accumulation"});
  check(ProblemConfig().checkpointing(mlo::Checkpointing::kSqrt),
        {"'inner'", "checkpointing sqrt", "mlo::nn::Chain"});
  check(ProblemConfig().unroll_steps(0), {"'inner'", "unroll_steps", "0"});
  check(ProblemConfig().method(mlo::CGOptions().iterations(0)), {"'inner'", "cg.iterations", "0"});
}

TEST_CASE("Engine: a problem without an optimizer is refused", "[core][engine]") {
  struct NoOpt : mlo::Problem {
    using mlo::Problem::Problem;
    torch::Tensor training_step(const mlo::Batch&) override { return torch::zeros({}); }
  };
  auto p = std::make_shared<NoOpt>("lonely");
  p->module(mlo_test::Scalar(0.0));
  mlo::Engine engine;
  engine.add(p);
  REQUIRE_THROWS_WITH(engine.initialize(), mlo_test::Names({"'lonely'", "optimizer"}));
}

TEST_CASE("Engine: a parameter that gets no gradient is an error naming it, not a zero",
          "[core][engine]") {
  // A lower-level loss that misses a trainable parameter (here the bias; in the wild, a weight
  // whose autocast cast had no history) would train it with a silent zero gradient.
  struct WeightOnly : mlo::Problem {
    using mlo::Problem::Problem;
    torch::Tensor training_step(const mlo::Batch& b) override {
      return b.data.matmul(module_as<torch::nn::LinearImpl>()->weight.t()).pow(2).mean();
    }
  };
  auto p = std::make_shared<WeightOnly>("fit");
  p->module(torch::nn::Linear(3, 1)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  p->data(std::vector<mlo::Batch>{mlo::Batch(torch::ones({2, 3}))});
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(p);
  REQUIRE_THROWS_WITH(engine.run(), mlo_test::Names({"'fit'", "'bias'"}));
  // Frozen on purpose: fine.
  auto q = std::make_shared<WeightOnly>("frozen_bias");
  auto linear = torch::nn::Linear(3, 1);
  linear->bias.set_requires_grad(false);
  q->module(linear).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  q->data(std::vector<mlo::Batch>{mlo::Batch(torch::ones({2, 3}))});
  mlo::Engine ok(mlo::EngineConfig().train_iters(1));
  ok.add(q);
  REQUIRE_NOTHROW(ok.run());
  // Accepted on purpose: the bias trains with a zero gradient (stays where it was).
  auto r = std::make_shared<WeightOnly>(
      "unused_bias", ProblemConfig().allow_unused_parameters(true));
  r->module(torch::nn::Linear(3, 1)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  r->data(std::vector<mlo::Batch>{mlo::Batch(torch::ones({2, 3}))});
  const auto bias = r->module_as<torch::nn::LinearImpl>()->bias.detach().clone();
  mlo::Engine accepting(mlo::EngineConfig().train_iters(1));
  accepting.add(r);
  REQUIRE_NOTHROW(accepting.run());
  CHECK(torch::equal(r->module_as<torch::nn::LinearImpl>()->bias, bias));
}

TEST_CASE("Engine: LibTorch's failed allocation in a step is an error naming the problem, the "
          "step and the bytes",
          "[core][engine]") {
  struct Greedy : mlo::Problem {
    using mlo::Problem::Problem;
    int calls = 0;
    torch::Tensor training_step(const mlo::Batch& b) override {
      // (what LibTorch's CPU allocator throws when malloc fails), in the third step
      TORCH_CHECK(++calls < 3, "DefaultCPUAllocator: can't allocate memory: you tried to ",
                  "allocate 123456789 bytes.");
      return module_as<torch::nn::LinearImpl>()->forward(b.data).pow(2).mean();
    }
  };
  auto p = std::make_shared<Greedy>("greedy");
  p->module(torch::nn::Linear(3, 1)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  p->data(std::vector<mlo::Batch>{mlo::Batch(torch::ones({2, 3}))});
  mlo::Engine engine(mlo::EngineConfig().train_iters(5));
  engine.add(p);
  try {
    engine.run();
    FAIL("no error");
  } catch (const mlo::OutOfMemory& e) {
    CHECK(e.problem() == "greedy");
    CHECK_THAT(e.what(), mlo_test::Names({"'greedy'", "global step 3", "123456789 bytes"}));
    CHECK(std::string(e.what()).find('\n') == std::string::npos);  // no LibTorch trace
  }
  CHECK(p->calls == 3);
  // So is one in a validation: named with the step it followed, and the problems train again.
  auto v = mlo_test::toy("v", ProblemConfig(), nullptr);
  mlo::Engine validating(mlo::EngineConfig().train_iters(10).valid_step(4));
  validating.add(v).validation([]() -> mlo::Metrics {
    TORCH_CHECK(false, "DefaultCPUAllocator: can't allocate memory: you tried to ",
                "allocate 987654321 bytes.");
  });
  try {
    validating.run();
    FAIL("no error");
  } catch (const mlo::OutOfMemory& e) {
    CHECK(e.problem().empty());
    CHECK_THAT(e.what(), mlo_test::Names({"global step 4", "987654321 bytes"}));
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
  CHECK(v->step_count() == 4);
  CHECK(v->is_training());
  // Any other LibTorch error passes through as it was.
  struct Broken : mlo::Problem {
    using mlo::Problem::Problem;
    torch::Tensor training_step(const mlo::Batch& b) override {
      return b.data.matmul(torch::ones({4, 1}));
    }
  };
  auto q = std::make_shared<Broken>("broken");
  q->module(torch::nn::Linear(3, 1)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  q->data(std::vector<mlo::Batch>{mlo::Batch(torch::ones({2, 3}))});
  mlo::Engine other(mlo::EngineConfig().train_iters(1));
  other.add(q);
  CHECK_THROWS_AS(other.run(), c10::Error);
}

TEST_CASE("Engine: validation runs every valid_step in eval mode", "[core][engine]") {
  auto p = mlo_test::toy("p", ProblemConfig(), nullptr);
  std::vector<int64_t> at;
  mlo::Engine engine(mlo::EngineConfig().train_iters(10).valid_step(3));
  engine.add(p).validation([&] {
    CHECK_FALSE(p->is_training());
    at.push_back(p->step_count());
    return mlo::Metrics{{"loss", p->last_loss()}};
  });
  engine.run();
  CHECK(at == std::vector<int64_t>{3, 6, 9});
  CHECK(p->is_training());
  CHECK(engine.last_validation().count("loss") == 1);
}

TEST_CASE("Engine: early stopping stops after `tolerance` validations without improvement",
          "[core][engine]") {
  SECTION("mode min") {
    auto p = mlo_test::toy("p", ProblemConfig(), nullptr);
    const std::vector<double> values = {5, 4, 3, 3.5, 3.2, 3.1, 1, 1};
    size_t calls = 0;
    mlo::Engine engine(mlo::EngineConfig().train_iters(100).valid_step(1).early_stopping(
        mlo::EarlyStopping().metric("err").mode(mlo::Mode::kMin).tolerance(3)));
    engine.add(p).validation([&] { return mlo::Metrics{{"err", values.at(calls++)}}; });
    engine.run();
    CHECK(engine.stopped_early());
    CHECK(calls == 6);  // best 3 at the 3rd validation, then 3 without improvement
    CHECK(engine.global_step() == 6);
    CHECK(*engine.best_metric() == 3.0);
  }
  SECTION("mode max with min_delta") {
    auto p = mlo_test::toy("p", ProblemConfig(), nullptr);
    const std::vector<double> values = {0.5, 0.7, 0.705, 0.709, 0.8, 0.8, 0.8};
    size_t calls = 0;
    mlo::Engine engine(mlo::EngineConfig().train_iters(7).valid_step(1).early_stopping(
        mlo::EarlyStopping().metric("acc").mode(mlo::Mode::kMax).tolerance(2).min_delta(0.01)));
    engine.add(p).validation([&] { return mlo::Metrics{{"acc", values.at(calls++)}}; });
    engine.run();
    CHECK(engine.stopped_early());
    CHECK(calls == 4);  // 0.705 and 0.709 are within min_delta of 0.7
  }
  SECTION("an unknown metric is named") {
    auto p = mlo_test::toy("p", ProblemConfig(), nullptr);
    mlo::Engine engine(mlo::EngineConfig().train_iters(2).valid_step(1).early_stopping(
        mlo::EarlyStopping().metric("acc")));
    engine.add(p).validation([] { return mlo::Metrics{{"loss", 1.0}}; });
    REQUIRE_THROWS_WITH(engine.run(), mlo_test::Names({"early_stopping", "'acc'", "loss"}));
  }
  SECTION("early stopping without validation is refused at start") {
    auto p = mlo_test::toy("p", ProblemConfig(), nullptr);
    mlo::Engine engine(mlo::EngineConfig().early_stopping(mlo::EarlyStopping()));
    engine.add(p);
    REQUIRE_THROWS_WITH(engine.initialize(),
                        mlo_test::Names({"early_stopping", "engine.validation(...)"}));
    auto q = mlo_test::toy("q", ProblemConfig(), nullptr);
    mlo::Engine never(mlo::EngineConfig().valid_step(0).early_stopping(mlo::EarlyStopping()));
    never.add(q).validation([] { return mlo::Metrics{{"valid/loss", 1.0}}; });
    REQUIRE_THROWS_WITH(never.initialize(), mlo_test::Names({"early_stopping", "valid_step"}));
  }
}

TEST_CASE("Engine: data-parallel setups a method cannot serve exactly are refused",
          "[core][engine][dist]") {
  // One process (no rendezvous variables): a group of one rank, enough for the checks.
  auto check = [](mlo::dist::Strategy strategy, ProblemConfig config,
                  std::vector<std::string> names) {
    auto outer = mlo_test::toy("outer", ProblemConfig(), nullptr);
    auto inner = mlo_test::toy("inner", std::move(config), nullptr);
    mlo::Engine engine(mlo::EngineConfig().strategy(strategy));
    engine.add(outer).add(inner);
    mlo_test::link(engine, outer, inner);
    REQUIRE_THROWS_WITH(engine.initialize(), mlo_test::Names(std::move(names)));
  };
  check(mlo::dist::Strategy::kDistributed, ProblemConfig().method("unrolled"),
        {"'inner'", "unrolled", "data parallel"});
  check(mlo::dist::Strategy::kZero1, ProblemConfig().method("sama"), {"'inner'", "sama", "zero1"});
  // zero3 shards the parameters of Chains only; a toy's Scalar is served as zero2.
  check(mlo::dist::Strategy::kZero3, ProblemConfig().method("sama"),
        {"'inner'", "sama", "zero3", "mlo::nn::Chain", "zero2"});
  check(mlo::dist::Strategy::kDefault, ProblemConfig().offload(mlo::Offload::kCpu),
        {"'inner'", "offload", "engine.strategy zero3", "data_parallel", "strategy default"});
  // Opting the level out makes both fine.
  for (auto strategy : {mlo::dist::Strategy::kDistributed, mlo::dist::Strategy::kZero2}) {
    auto outer = mlo_test::toy("outer", ProblemConfig(), nullptr);
    auto inner = mlo_test::toy(
        "inner", ProblemConfig().method("unrolled").data_parallel(false), nullptr);
    mlo::Engine engine(mlo::EngineConfig().strategy(strategy));
    engine.add(outer).add(inner);
    mlo_test::link(engine, outer, inner);
    REQUIRE_NOTHROW(engine.initialize());
    CHECK(engine.world_size() == 1);
    // (the group a level averages over is the engine's runtime's: core/level_runtime.h)
    const mlo::detail::LevelRuntime* inner_level = mlo::detail::runtime_of(*inner);
    const mlo::detail::LevelRuntime* outer_level = mlo::detail::runtime_of(*outer);
    REQUIRE(inner_level != nullptr);
    REQUIRE(outer_level != nullptr);
    CHECK(inner_level->group() == nullptr);
    CHECK(outer_level->group() == engine.group());
  }
}

TEST_CASE("Engine: a ZeRO state resumes only on the same split, a complete one not under ZeRO",
          "[core][engine][dist]") {
  using mlo::dist::Strategy;
  auto saved = [](Strategy strategy) {
    auto p = mlo_test::toy("inner", ProblemConfig(), nullptr);
    mlo::Engine engine(mlo::EngineConfig().train_iters(2).strategy(strategy));
    engine.add(p);
    engine.run();
    return mlo_test::saved_state(engine);
  };
  auto load = [](Strategy strategy, const std::string& bytes) {
    auto p = mlo_test::toy("inner", ProblemConfig(), nullptr);
    mlo::Engine engine(mlo::EngineConfig().train_iters(4).strategy(strategy));
    engine.add(p);
    mlo_test::load_state(engine, bytes);
    return engine.global_step();
  };
  const std::string zero1 = saved(Strategy::kZero1), complete = saved(Strategy::kDistributed);
  CHECK(load(Strategy::kZero1, zero1) == 2);
  CHECK(load(Strategy::kDefault, complete) == 2);
  REQUIRE_THROWS_WITH(load(Strategy::kDefault, zero1),
                      mlo_test::Names({"zero1 on 1 rank", "default on 1"}));
  REQUIRE_THROWS_WITH(load(Strategy::kZero2, complete),
                      mlo_test::Names({"distributed", "complete optimizer state", "zero2"}));
}

namespace {

// Collects the log lines written while alive (info and above), then restores the logger.
struct CapturedLog {
  CapturedLog() : previous(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
    sink->set_pattern("%v");
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous); }
  // The lines that start with `prefix`.
  std::vector<std::string> lines(const std::string& prefix) const {
    std::vector<std::string> out;
    std::istringstream in(text.str());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) == 0) out.push_back(line);
    }
    return out;
  }
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> previous;
};

// Records many metrics; its console line declares one of them beside the generic ones.
struct Chatty : mlo_test::Toy {
  using Toy::Toy;
  torch::Tensor training_step(const mlo::Batch& batch) override {
    log_metric("zeta", 1.0 / 3.0);
    log_metric("acc", 0.123456);
    log_metric("alpha", 2.0);
    for (int k = 0; k < 10; ++k) log_metric("curve/l=" + std::to_string(k), 0.1 * k);
    return Toy::training_step(batch);
  }
  std::vector<std::string> headline_metrics() const override {
    auto names = Problem::headline_metrics();
    names.push_back("zeta");
    return names;
  }
};

}  // namespace

TEST_CASE("Engine: a problem's log line holds its headline metrics, in their order",
          "[core][engine]") {
  auto p = std::make_shared<Chatty>("inner", ProblemConfig(), nullptr, 0.5, 0.1);
  mlo::Engine engine(mlo::EngineConfig().train_iters(4).log_step(2));
  engine.add(p);
  CapturedLog log;
  engine.run();
  const auto lines = log.lines("[step ");
  REQUIRE(lines.size() == 2);
  const std::string loss = mlo::format_metric(p->last_loss());
  CHECK(lines[1] == "[step 4] inner  local 4  loss " + loss + "  acc 0.1235  lr 0.1  zeta 0.3333");
  // Every metric still reaches metrics() (the run's files), only the line is short.
  CHECK(p->metrics().size() == 15);
}

TEST_CASE("Engine: restore_best puts back the best validation's parameters, also after a resume",
          "[core][engine]") {
  // Validations at steps 1..4 read 1, 3, 2, 2.5 (max): the best is step 2's.
  const std::vector<double> values = {1, 3, 2, 2.5};
  auto params_of = [](const mlo::Problem& p) {
    std::vector<torch::Tensor> out;
    for (const auto& t : p.module().parameters()) out.push_back(t.detach().clone());
    return out;
  };
  auto equal = [](const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!torch::equal(a[i], b[i])) return false;
    }
    return true;
  };
  auto rule = [](bool restore) {
    return mlo::EarlyStopping().metric("acc").mode(mlo::Mode::kMax).tolerance(10).restore_best(
        restore);
  };
  auto p = mlo_test::toy("p", ProblemConfig(), nullptr);
  size_t calls = 0;
  std::vector<std::vector<torch::Tensor>> at_step{{}};
  mlo::Engine engine(mlo::EngineConfig().train_iters(4).valid_step(1).early_stopping(rule(true)));
  engine.add(p).validation([&] { return mlo::Metrics{{"acc", values.at(calls++)}}; });
  mlo_test::on_step(engine, [&](int64_t) {
    at_step.push_back(params_of(*p));
    return true;
  });
  engine.run();
  REQUIRE(at_step.size() == 5);
  REQUIRE_FALSE(equal(at_step[2], at_step[4]));  // training moved on after the best
  const auto last = params_of(*p);
  const std::string saved = mlo_test::saved_state(engine);

  CHECK(engine.restore_best() == 2);
  CHECK(equal(params_of(*p), at_step[2]));
  CHECK(engine.global_step() == 4);  // only the parameters go back

  // A fresh engine with `restore` loading that state.
  struct Resumed {
    std::shared_ptr<mlo_test::Toy> problem;
    std::unique_ptr<mlo::Engine> engine;
  };
  auto resume = [&](bool restore) {
    Resumed r{mlo_test::toy("p", ProblemConfig(), nullptr),
              std::make_unique<mlo::Engine>(
                  mlo::EngineConfig().train_iters(4).valid_step(1).early_stopping(rule(restore)))};
    r.engine->add(r.problem).validation([] { return mlo::Metrics{{"acc", 0.0}}; });
    mlo_test::load_state(*r.engine, saved);
    return r;
  };
  // The saved state (taken after training, before the restore) resumes at step 4 with the last
  // parameters and still restores step 2's.
  auto resumed = resume(true);
  CHECK(equal(params_of(*resumed.problem), last));
  CHECK(resumed.engine->restore_best() == 2);
  CHECK(equal(params_of(*resumed.problem), at_step[2]));

  // The same state resumed with restore_best off neither keeps nor restores the saved best.
  auto off = resume(false);
  CHECK(off.engine->restore_best() == -1);
  CHECK(equal(params_of(*off.problem), last));

  // Without restore_best nothing is kept and nothing changes.
  auto r = mlo_test::toy("p", ProblemConfig(), nullptr);
  calls = 0;
  mlo::Engine plain(mlo::EngineConfig().train_iters(4).valid_step(1).early_stopping(rule(false)));
  plain.add(r).validation([&] { return mlo::Metrics{{"acc", values.at(calls++)}}; });
  plain.run();
  const auto before = params_of(*r);
  CHECK(plain.restore_best() == -1);
  CHECK(equal(params_of(*r), before));
}

TEST_CASE("Engine: the validation line holds the named metrics and the early-stopping one",
          "[core][engine]") {
  auto p = mlo_test::toy("inner", ProblemConfig(), nullptr);
  mlo::Engine engine(mlo::EngineConfig().train_iters(2).valid_step(1).early_stopping(
      mlo::EarlyStopping().metric("valid/c").mode(mlo::Mode::kMax).tolerance(5)));
  engine.add(p).validation(
      [] {
        return mlo::Metrics{{"valid/a", 1.0}, {"valid/b", 2.0 / 3.0}, {"valid/c", 0.25}};
      },
      {"valid/b"});
  CapturedLog log;
  engine.run();
  const auto lines = log.lines("[validation]");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "[validation] step 1  valid/b 0.6667  valid/c 0.25");
  CHECK(engine.last_validation().count("valid/a") == 1);
}

TEST_CASE("Engine: a metric that is not finite in an evaluation is a warning naming it and the "
          "step",
          "[core][engine]") {
  auto p = mlo_test::toy("inner", ProblemConfig(), nullptr);
  mlo::Engine engine(mlo::EngineConfig().train_iters(2).valid_step(2));
  engine.add(p).validation([] {
    return mlo::Metrics{{"valid/mse", std::nan("")}, {"valid/fine", 1.0}};
  });
  CapturedLog log;
  engine.run();
  const auto warnings = log.lines("mlo: evaluated after");
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], mlo_test::Names({"global step 2", "valid/mse", "nan"}));
  CHECK(warnings[0].find("valid/fine") == std::string::npos);
}

namespace {

using mlo_test::ChainFit;  // (tests/support/chain_fit.h)

std::shared_ptr<ChainFit> chain_fit(ProblemConfig config) {
  torch::manual_seed(5);
  mlo::nn::Chain chain;
  chain->push_back("first", torch::nn::Linear(3, 4))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("second", torch::nn::Linear(4, 1));
  auto p = std::make_shared<ChainFit>("fit", std::move(config));
  p->module(chain).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
  std::vector<mlo::Batch> batches;
  for (int i = 0; i < 3; ++i) batches.emplace_back(torch::randn({5, 3}));
  p->data(batches);
  return p;
}

}  // namespace

TEST_CASE("Engine: zero3 on one process trains a Chain exactly as one process does",
          "[core][engine][dist]") {
  // A group of one rank: each block's flat vector is one shard, gathered by a copy; the
  // optimizer steps the flat shards, the same arithmetic element by element.
  auto plain = chain_fit(ProblemConfig());
  auto sharded = chain_fit(ProblemConfig());
  mlo::Engine a(mlo::EngineConfig().train_iters(4));
  mlo::Engine b(mlo::EngineConfig().train_iters(4).strategy(mlo::dist::Strategy::kZero3));
  a.add(plain);
  b.add(sharded);
  a.run();
  b.run();
  REQUIRE(b.level(*sharded).shards_parameters());
  CHECK_FALSE(a.level(*plain).shards_parameters());
  // Two blocks with parameters: two flat shards (4 * 3 + 4 and 4 + 1 elements).
  const auto shards = sharded->parameters();
  REQUIRE(shards.size() == 2);
  CHECK(shards[0].numel() == 16);
  CHECK(shards[1].numel() == 5);
  CHECK_THAT(sharded->parameter_name(shards[1]), Contains("shard 1 of 1 of block 'second'"));
  // The module's own parameters hold no values between uses.
  for (const auto& p : sharded->module().parameters()) CHECK(p.numel() == 0);
  const auto want = plain->full_parameters(), got = sharded->full_parameters();
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(torch::equal(want[i], got[i]));
  CHECK(plain->last_loss() == sharded->last_loss());
  // (the parameters moved: equal runs that did nothing would prove nothing)
  CHECK_FALSE(torch::equal(chain_fit(ProblemConfig())->full_parameters()[0], got[0]));
  // Evaluation outside the engine goes through the gathers too.
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 3});
  CHECK(torch::equal(plain->module_as<mlo::nn::ChainImpl>()->forward(x),
                     sharded->module_as<mlo::nn::ChainImpl>()->forward(x)));
}

TEST_CASE("Engine: zero3 refuses checkpointing plans made from each rank's own timings",
          "[core][engine][dist]") {
  for (auto strategy : {mlo::Checkpointing::kOptimal, mlo::Checkpointing::kMinMemory}) {
    auto p = chain_fit(ProblemConfig().checkpointing(strategy));
    mlo::Engine engine(mlo::EngineConfig().strategy(mlo::dist::Strategy::kZero3));
    engine.add(p);
    REQUIRE_THROWS_WITH(engine.initialize(),
                        mlo_test::Names({"'fit'", "checkpointing",
                                         std::string(mlo::to_string(strategy)), "zero3",
                                         "uniform", "sqrt"}));
  }
  // A plan from the block count alone is the same on every rank.
  auto p = chain_fit(ProblemConfig().checkpointing(mlo::Checkpointing::kSqrt));
  mlo::Engine engine(mlo::EngineConfig().train_iters(2).strategy(mlo::dist::Strategy::kZero3));
  engine.add(p);
  REQUIRE_NOTHROW(engine.run());
}

TEST_CASE("Engine: offload cpu on a model that is on the CPU is refused", "[core][engine][dist]") {
  auto p = chain_fit(ProblemConfig().offload(mlo::Offload::kCpu));
  mlo::Engine engine(mlo::EngineConfig().strategy(mlo::dist::Strategy::kZero3));
  engine.add(p);
  REQUIRE_THROWS_WITH(engine.initialize(),
                      mlo_test::Names({"'fit'", "offload cpu", "device cuda", "offload none"}));
}

}  // namespace engine_test

namespace engine_test {

namespace {

// A Toy that remembers its parameter as it was when its optimizer step began.
struct Remembering : mlo_test::Toy {
  using mlo_test::Toy::Toy;
  void grad_callback(std::vector<torch::Tensor>& grads) override {
    (void)grads;
    before_step = value();
  }
  double before_step = 0.0;
};

}  // namespace

TEST_CASE("Engine: every upper problem's metrics hold its hypergradient's norm and its methods' "
          "diagnostics",
          "[core][engine][diagnostics]") {
  // Toy pair: L_lower = (w_l - 1)^2 + w_l w_u, L_upper = (w_u - 1)^2 + w_u w_l. H = 2, the mixed
  // second derivative is 1 and v = dL_upper/dw_l = w_u, so the implicit hypergradient is
  // -w_u / 2, exact for CG after one step and for Neumann as K grows.
  const int64_t accumulation = GENERATE(1, 2);
  CAPTURE(accumulation);
  SECTION("cg: one step solves the 1-D system and stops early") {
    auto upper = std::make_shared<Remembering>(
        "upper", ProblemConfig().gradient_accumulation(accumulation), nullptr, 0.7, 0.1);
    auto lower = mlo_test::toy("lower",
                               ProblemConfig().method(mlo::CGOptions().iterations(3)), nullptr);
    mlo::Engine engine(mlo::EngineConfig().train_iters(2 * accumulation));
    engine.add(upper).add(lower);
    mlo_test::link(engine, upper, lower);
    engine.run();
    const mlo::Metrics& m = upper->metrics();
    // (the metric is of the step's own loss: without the window's 1/G)
    CHECK(m.at("hypergrad/norm") == Approx(std::abs(upper->before_step) / 2).epsilon(1e-12));
    CHECK(m.at("hypergrad/lower/iterations") == 1);
    CHECK(m.at("hypergrad/lower/stopped_early") == 1);
    CHECK(m.at("hypergrad/lower/residual") < 1e-14);
    CHECK(m.at("hypergrad/lower/negative_curvature") == 0);
    CHECK(m.at("hypergrad/lower/fell_back") == 0);
    CHECK(m.count("hypergrad/lower/jvp_fell_back") == 0);  // (mode double_backward)
    // A lower problem with no problem below it gets neither.
    CHECK(lower->metrics().count("hypergrad/norm") == 0);
  }
  SECTION("neumann: the last term shrinks by |1 - alpha H| per term") {
    auto upper = std::make_shared<Remembering>(
        "upper", ProblemConfig().gradient_accumulation(accumulation), nullptr, 0.7, 0.1);
    auto lower = mlo_test::toy(
        "lower", ProblemConfig().method(mlo::NeumannOptions().iterations(3).alpha(0.1)),
        nullptr);
    mlo::Engine engine(mlo::EngineConfig().train_iters(2 * accumulation));
    engine.add(upper).add(lower);
    mlo_test::link(engine, upper, lower);
    engine.run();
    const mlo::Metrics& m = upper->metrics();
    // p = alpha sum_{k=0..3} (1 - 2 alpha)^k v = 0.1 (1 + 0.8 + 0.64 + 0.512) w_u, and the
    // mixed term is 1: |hypergradient| = 0.2952 |w_u|; the last term is 0.8^3 v.
    CHECK(m.at("hypergrad/norm") == Approx(0.2952 * std::abs(upper->before_step)).epsilon(1e-12));
    CHECK(m.at("hypergrad/lower/iterations") == 3);
    CHECK(m.at("hypergrad/lower/term_ratio") == Approx(0.512).epsilon(1e-12));
    CHECK(m.at("hypergrad/lower/negative_curvature") == 0);
  }
}

}  // namespace engine_test
