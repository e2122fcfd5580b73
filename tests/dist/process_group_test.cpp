// The c10d process group on loopback: collectives against hand-computed values, data-parallel
// SGD on 2 ranks against 1 process on the global batch, and a dead rank that must not hang the
// others. Each case spawns dist_worker processes, bounded in time.
#include <mlo/base/error.h>
#include <mlo/dist/process_group.h>

#include "support/labelled_values.h"
#include "support/subprocess.h"

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <sstream>

namespace process_group_test {

using Catch::Matchers::Contains;

namespace {

using mlo_test::values;

struct Run {
  std::vector<int> codes;
  std::vector<std::string> logs;
};

// Runs `ranks` workers in `mode` and waits for them in rank order, at most `limit` for each;
// ranks after `wait_ranks` are not waited for, only stopped.
Run run_workers(int ranks, const std::string& mode, const std::string& timeout_ms = "20000",
                std::chrono::milliseconds limit = std::chrono::seconds(60),
                int wait_ranks = -1) {
  const std::string port = std::to_string(mlo_test::free_port());
  std::vector<mlo_test::Child> children;
  for (int r = 0; r < ranks; ++r) {
    const std::string log = "dist_" + mode + "_" + port + "_" + std::to_string(r) + ".log";
    children.push_back(mlo_test::spawn({MLO_DIST_WORKER, mode, timeout_ms},
                                       {{"RANK", std::to_string(r)},
                                        {"WORLD_SIZE", std::to_string(ranks)},
                                        {"LOCAL_RANK", std::to_string(r)},
                                        {"MASTER_ADDR", "127.0.0.1"},
                                        {"MASTER_PORT", port}},
                                       log));
  }
  Run run;
  for (size_t r = 0; r < children.size(); ++r) {
    const bool wait = wait_ranks < 0 || static_cast<int>(r) < wait_ranks;
    run.codes.push_back(
        mlo_test::wait_for(children[r], wait ? limit : std::chrono::milliseconds(1)));
    run.logs.push_back(mlo_test::read_file(children[r].log));
  }
  return run;
}

}  // namespace

TEST_CASE("dist: collectives over 2 Gloo ranks on loopback", "[dist]") {
  const auto run = run_workers(2, "collectives");
  for (int r = 0; r < 2; ++r) {
    INFO(run.logs[r]);
    REQUIRE(run.codes[r] == 0);
    CHECK(values(run.logs[r], "mean_f32") == std::vector<double>{1.5, 1.5, 1.5});
    CHECK(values(run.logs[r], "mean_f64") == std::vector<double>{0, 1.5, 3, 4.5, 6});
    CHECK(values(run.logs[r], "broadcast") == std::vector<double>{17, 17, 17, 17});
    CHECK(values(run.logs[r], "sum_i64") == std::vector<double>{3});
  }
}

TEST_CASE("dist: SGD on 2 ranks with averaged gradients equals 1 process on the global batch",
          "[dist]") {
  // The one-process reference: the same 8 rows, momentum SGD, 5 steps.
  auto x = torch::linspace(-1, 1, 32, torch::kDouble).reshape({8, 4}).sin();
  auto y = torch::linspace(0, 2, 8, torch::kDouble).cos();
  auto w = torch::linspace(0.5, -0.5, 4, torch::kDouble).requires_grad_(true);
  torch::optim::SGD sgd({w}, torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 5; ++step) {
    sgd.zero_grad();
    (x.matmul(w) - y).pow(2).mean().backward();
    sgd.step();
  }
  const auto run = run_workers(2, "train");
  for (int r = 0; r < 2; ++r) {
    INFO(run.logs[r]);
    REQUIRE(run.codes[r] == 0);
    const auto params = values(run.logs[r], "params");
    REQUIRE(params.size() == 4);
    for (int i = 0; i < 4; ++i) CHECK(params[i] == Approx(w[i].item<double>()).epsilon(1e-12));
  }
  // And the reference moved: a test that passes on untrained weights would prove nothing.
  CHECK(torch::allclose(w.detach(), torch::linspace(0.5, -0.5, 4, torch::kDouble)) == false);
}

TEST_CASE("dist: a rank that dies makes the others exit with a clear error, not hang", "[dist]") {
  const auto start = std::chrono::steady_clock::now();
  const auto run = run_workers(2, "die", /*timeout_ms=*/"5000", std::chrono::seconds(30));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(run.logs[0]);
  CHECK(run.codes[1] == 3);
  CHECK(run.codes[0] == 2);  // the worker's exit code for an mlo::Error
  CHECK_THAT(run.logs[0], Contains("rank 0: all_reduce failed (a peer rank died, hangs"));
  CHECK(seconds < 25);
}

TEST_CASE("dist: a rank that hangs makes the others fail after the timeout, not wait forever",
          "[dist]") {
  const auto start = std::chrono::steady_clock::now();
  const auto run = run_workers(2, "hang", /*timeout_ms=*/"3000", std::chrono::seconds(30),
                               /*wait_ranks=*/1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(run.logs[0]);
  CHECK(run.codes[0] == 2);
  CHECK_THAT(run.logs[0], Contains("timeout of 3000 ms"));
  CHECK(seconds >= 2.5);  // it did wait for the peer, as long as it was told
  CHECK(seconds < 20);
}

TEST_CASE("dist: the rendezvous variables are checked, naming the bad one", "[dist]") {
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "two", 1);
  REQUIRE_THROWS_WITH(mlo::dist::Rendezvous::from_env(),
                      Contains("environment variable RANK='two': expected an integer in [0, 1]"));
  setenv("RANK", "2", 1);
  REQUIRE_THROWS_WITH(mlo::dist::Rendezvous::from_env(), Contains("RANK='2'"));
  setenv("RANK", "1", 1);
  setenv("MASTER_PORT", "70000", 1);
  REQUIRE_THROWS_WITH(mlo::dist::Rendezvous::from_env(), Contains("MASTER_PORT='70000'"));
  unsetenv("MASTER_PORT");
  const auto r = mlo::dist::Rendezvous::from_env();
  CHECK(r.rank == 1);
  CHECK(r.world_size == 2);
  CHECK(r.local_rank == 1);
  CHECK(r.master_port == 29500);
  unsetenv("WORLD_SIZE");
  unsetenv("RANK");
  // One process needs no store, and its collectives leave the tensors as they are.
  auto group = mlo::dist::ProcessGroup::connect(mlo::dist::Rendezvous::from_env());
  auto t = torch::full({2}, 3.0);
  group->all_reduce_mean({t});
  CHECK(torch::equal(t, torch::full({2}, 3.0)));
}

}  // namespace process_group_test
