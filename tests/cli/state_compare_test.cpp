// The fault matrix's comparison of two saved states (tests/support/state_compare.h): it must see
// a one-ulp change anywhere in a nested archive, a signed zero, a changed number and a missing
// key, and find two saves of the same engine identical.
#include "support/scratch.h"
#include "support/state_compare.h"
#include "support/toy.h"

#include <mlo/io/state.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

namespace state_compare_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

fs::path scratch(const std::string& name) {
  return mlo_test::scratch_dir("state_compare_test_" + name);
}

// An archive shaped as a saved state: a nested archive holding a tensor and a number.
std::string save(const fs::path& path, const at::Tensor& weight, double lr,
                 bool with_extra = false) {
  torch::serialize::OutputArchive inner;
  inner.write("weight", weight);
  inner.write("lr", c10::IValue(lr));
  torch::serialize::OutputArchive problem;
  problem.write("module", inner);
  torch::serialize::OutputArchive root;
  root.write("problem.a", problem);
  root.write("format", c10::IValue(int64_t{2}));
  if (with_extra) root.write("extra", c10::IValue(true));
  root.save_to(path.string());
  return path.string();
}

}  // namespace

TEST_CASE("State comparison: equal archives, and each kind of difference named by its path",
          "[cli][resume]") {
  const fs::path dir = scratch("kinds");
  const at::Tensor w = torch::tensor({0.25, -1.5, 3.0}, torch::kDouble);
  const std::string base = save(dir / "base.pt", w, 0.1);
  CHECK(mlo_test::state_file_difference(base, save(dir / "same.pt", w.clone(), 0.1)).empty());

  // One ulp in the last element.
  at::Tensor ulp = w.clone();
  ulp[2] = std::nextafter(3.0, 4.0);
  CHECK_THAT(mlo_test::state_file_difference(base, save(dir / "ulp.pt", ulp, 0.1)),
             Contains("problem.a/module/weight: element 2 of 3 differs"));

  // -0.0 against +0.0: equal to torch::equal, not to the bits.
  const std::string plus = save(dir / "plus.pt", torch::tensor({0.0}, torch::kDouble), 0.1);
  const std::string minus = save(dir / "minus.pt", torch::tensor({-0.0}, torch::kDouble), 0.1);
  CHECK_THAT(mlo_test::state_file_difference(plus, minus),
             Contains("element 0 of 1 differs") && Contains("torch::equal would call them equal"));

  // Another dtype, another shape, another number, a key of one side only.
  CHECK_THAT(mlo_test::state_file_difference(base, save(dir / "f.pt", w.to(torch::kFloat), 0.1)),
             Contains("problem.a/module/weight: dtype Double vs Float"));
  CHECK_THAT(mlo_test::state_file_difference(base, save(dir / "s.pt", w.narrow(0, 0, 2), 0.1)),
             Contains("problem.a/module/weight: shape"));
  CHECK_THAT(mlo_test::state_file_difference(base, save(dir / "lr.pt", w, 0.1000001)),
             Contains("problem.a/module/lr: 0.10000000000000001 vs 0.1000000999"));
  CHECK_THAT(mlo_test::state_file_difference(base, save(dir / "extra.pt", w, 0.1, true)),
             Contains("extra: only in the second"));
}

TEST_CASE("State comparison: two saves of an engine are identical, a step later they differ",
          "[cli][resume]") {
  const fs::path dir = scratch("engine");
  mlo::Engine engine(mlo::EngineConfig().train_iters(10));
  const auto trace = std::make_shared<mlo_test::Trace>();
  const auto outer = mlo_test::toy("outer", mlo::ProblemConfig(), trace);
  const auto inner = mlo_test::toy("inner", mlo::ProblemConfig().unroll_steps(2), trace);
  engine.add(outer).add(inner);
  mlo_test::link(engine, outer, inner);
  engine.initialize();
  engine.step();
  mlo::io::save_state((dir / "a.pt").string(), engine);
  mlo::io::save_state((dir / "b.pt").string(), engine);
  CHECK(mlo_test::state_file_difference((dir / "a.pt").string(), (dir / "b.pt").string()).empty());
  engine.step();  // the outer problem steps too: both levels' parameters move
  mlo::io::save_state((dir / "c.pt").string(), engine);
  CHECK_THAT(mlo_test::state_file_difference((dir / "a.pt").string(), (dir / "c.pt").string()),
             Contains("engine/"));
}

TEST_CASE("State comparison: optimizers match their parameters by position, not by address",
          "[cli][resume]") {
  const fs::path dir = scratch("optimizer");
  // Two identical models and momentum optimizers at different addresses, one step each.
  const auto trained = [&](double gradient, const std::string& file) {
    torch::manual_seed(0);
    torch::nn::Linear model(3, 2);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (auto& p : model->parameters()) p.mutable_grad() = torch::full_like(p, gradient);
    sgd.step();
    torch::serialize::OutputArchive archive;
    sgd.save(archive);
    archive.save_to((dir / file).string());
    return (dir / file).string();
  };
  const std::string a = trained(1.0, "a.pt");
  CHECK(mlo_test::state_file_difference(a, trained(1.0, "b.pt")).empty());
  CHECK_THAT(mlo_test::state_file_difference(a, trained(2.0, "c.pt")),
             Contains("state/group 0 param 0/momentum_buffer: element 0 of 6 differs"));
}

}  // namespace state_compare_test
