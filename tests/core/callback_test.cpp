// The engine's callbacks: the documented order of calls, what each decision does to the run
// loop, their state saved and restored with the engine's, and the misuses refused.
#include "support/in_memory_state.h"
#include "support/toy.h"

#include <mlo/mlo.h>

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

namespace callback_test {

namespace {

using mlo::StepDecision;

// Records every call as "<name> <event> <step>"; decides `decision` at `at`.
struct Recording : mlo::Callback {
  Recording(std::string name, std::shared_ptr<std::vector<std::string>> log)
      : name(std::move(name)), log(std::move(log)) {}
  void on_start(mlo::Engine& engine) override {
    log->push_back(name + " start " + std::to_string(engine.global_step()));
  }
  StepDecision on_step_end(mlo::Engine&, const mlo::StepEnd& step) override {
    log->push_back(name + " step " + std::to_string(step.step));
    return step.step == at ? decision : StepDecision::kContinue;
  }
  void on_validation(mlo::Engine&, const mlo::Validation& v) override {
    log->push_back(name + " validation " + std::to_string(v.step) + " " +
                   std::to_string(v.metrics.at("valid/step")));
  }
  void on_end(mlo::Engine&, const mlo::StepEnd& last) override {
    log->push_back(name + " end " + std::to_string(last.step));
  }
  std::string name;
  std::shared_ptr<std::vector<std::string>> log;
  int64_t at = -1;
  StepDecision decision = StepDecision::kContinue;
};

// A callback with state: the sum of the global steps it has seen.
struct Summing : mlo::Callback {
  StepDecision on_step_end(mlo::Engine&, const mlo::StepEnd& step) override {
    sum += step.step;
    return StepDecision::kContinue;
  }
  std::string state_name() const override { return "summing"; }
  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("sum", c10::IValue(sum));
  }
  void load(torch::serialize::InputArchive& archive) override {
    c10::IValue value;
    archive.read("sum", value);
    sum = value.toInt();
  }
  int64_t sum = 0;
};

// An engine of one problem that validates every other step (its metric: the step).
std::unique_ptr<mlo::Engine> engine_of(int64_t train_iters) {
  auto engine = std::make_unique<mlo::Engine>(
      mlo::EngineConfig().train_iters(train_iters).valid_step(2).log_step(0));
  mlo::Engine* e = engine.get();
  engine->add(mlo_test::toy("p", mlo::ProblemConfig(), nullptr)).validation([e] {
    return mlo::Metrics{{"valid/step", static_cast<double>(e->global_step())}};
  });
  return engine;
}

}  // namespace

TEST_CASE("Callback: called in the documented order, validation before the step's end",
          "[core][callback]") {
  auto log = std::make_shared<std::vector<std::string>>();
  auto engine = engine_of(3);
  engine->add_callback(std::make_shared<Recording>("a", log))
      .add_callback(std::make_shared<Recording>("b", log));
  engine->run();
  CHECK(*log == std::vector<std::string>{"a start 0", "b start 0", "a step 1", "b step 1",
                                         "a validation 2 2.000000", "b validation 2 2.000000",
                                         "a step 2", "b step 2", "a step 3", "b step 3",
                                         "a end 3", "b end 3"});
}

TEST_CASE("Callback: finish ends training as early stopping does; pause stops to go on later",
          "[core][callback]") {
  auto log = std::make_shared<std::vector<std::string>>();
  for (const StepDecision decision : {StepDecision::kFinish, StepDecision::kPause}) {
    CAPTURE(static_cast<int>(decision));
    auto engine = engine_of(10);
    auto asks = std::make_shared<Recording>("a", log);
    asks->at = 4;
    asks->decision = decision;
    auto after = std::make_shared<Recording>("b", log);
    engine->add_callback(asks).add_callback(after);
    log->clear();
    engine->run();
    CHECK(engine->global_step() == 4);
    CHECK(engine->stopped_early() == (decision == StepDecision::kFinish));
    // (every callback still sees the step at which one asked)
    CHECK(log->at(log->size() - 3) == "b step 4");
    CHECK(log->back() == "b end 4");
    // A paused engine goes on when run again; a finished one does not.
    engine->run();
    CHECK(engine->global_step() == (decision == StepDecision::kPause ? 10 : 4));
  }
}

TEST_CASE("Callback: its state is saved with the engine's and restored on resume",
          "[core][callback]") {
  auto whole = engine_of(6);
  auto uninterrupted = std::make_shared<Summing>();
  whole->add_callback(uninterrupted);
  whole->run();
  REQUIRE(uninterrupted->sum == 21);

  auto first = engine_of(6);
  auto before = std::make_shared<Summing>();
  auto pause = std::make_shared<Recording>("p", std::make_shared<std::vector<std::string>>());
  pause->at = 4;
  pause->decision = StepDecision::kPause;
  first->add_callback(before).add_callback(pause);
  first->run();
  REQUIRE(before->sum == 10);
  const std::string saved = mlo_test::saved_state(*first);

  auto second = engine_of(6);
  auto after = std::make_shared<Summing>();
  second->add_callback(after);
  mlo_test::load_state(*second, saved);
  CHECK(after->sum == 10);
  second->run();
  CHECK(after->sum == uninterrupted->sum);

  // A callback added after the state was saved keeps its initial state.
  auto plain = engine_of(6);
  plain->run();
  auto third = engine_of(6);
  auto added = std::make_shared<Summing>();
  added->sum = 7;
  third->add_callback(added);
  mlo_test::load_state(*third, mlo_test::saved_state(*plain));
  CHECK(added->sum == 7);
  CHECK(third->global_step() == 6);
}

TEST_CASE("Callback: two states under one name, a null callback and changes during a run are "
          "refused",
          "[core][callback]") {
  auto engine = engine_of(3);
  engine->add_callback(std::make_shared<Summing>());
  CHECK_THROWS_AS(engine->add_callback(std::make_shared<Summing>()), mlo::Error);
  CHECK_THROWS_AS(engine->add_callback(nullptr), mlo::Error);
  struct Adds : mlo::Callback {
    void on_start(mlo::Engine& e) override { e.add_callback(std::make_shared<Adds>()); }
  };
  engine->add_callback(std::make_shared<Adds>());
  CHECK_THROWS_AS(engine->run(), mlo::Error);
  // Removed, it is called no more.
  auto log = std::make_shared<std::vector<std::string>>();
  auto other = engine_of(2);
  auto recording = std::make_shared<Recording>("r", log);
  other->add_callback(recording).remove_callback(*recording);
  other->run();
  CHECK(log->empty());
}

}  // namespace callback_test
