// The rendezvous store under torchrun (PyPI's, from .venv/ or MLO_TORCHRUN), whose agent
// already serves one (TORCHELASTIC_USE_AGENT_STORE=True): with LibTorch 2.x every worker joins
// the agent's store; with 1.13, whose client cannot speak to it, rank 0 serves mlo's own on
// MASTER_PORT + 1. Either way 3 workers exchange keys through it. No collective backend is
// needed, so this runs in both lanes (the 2.x wheel has no Gloo).
#include "support/scratch.h"
#include "support/subprocess.h"
#include "support/torchrun.h"

#include <mlo/detail/torch_compat.h>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <string>

namespace agent_store_test {

using Catch::Matchers::Contains;

TEST_CASE("dist: under torchrun the workers share a rendezvous store", "[dist][torchrun]") {
  const std::string torchrun = mlo_test::find_torchrun(MLO_SOURCE_DIR);
  if (torchrun.empty()) {
    WARN(mlo_test::kNoTorchrun);
    return;
  }
  const auto dir = mlo_test::scratch_dir("agent_store_test");
  const auto child = mlo_test::spawn(
      {torchrun, "--nproc-per-node", "3", "--master-port", std::to_string(mlo_test::free_port()),
       "--no-python", MLO_DIST_WORKER, "store", "30000"},
      {}, (dir / "torchrun.log").string());
  const int code = mlo_test::wait_for(child, std::chrono::seconds(120));
  const std::string log = mlo_test::read_file(child.log);
  INFO(log);
  REQUIRE(code == 0);
#if MLO_TORCH_AT_LEAST(2, 0)
  const std::string expected = "store agent sum 6 seen 3";
#else
  const std::string expected = "store own sum 6 seen 3";
#endif
  size_t count = 0;
  for (size_t at = log.find(expected); at != std::string::npos; at = log.find(expected, at + 1)) {
    ++count;
  }
  CHECK(count == 3);
}

}  // namespace agent_store_test
