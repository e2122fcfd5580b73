// io::save_state / io::load_state: a state file whose bytes were changed is refused, naming the
// file, although LibTorch's own reader would load it (it skips the zip's CRC-32 checks).
#include "support/toy.h"

#include <mlo/io/state.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace state_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

constexpr double kInit = 0.123456789012345;  // a value whose 8 bytes occur once in the file

struct Pair {
  mlo::Engine engine{mlo::EngineConfig().train_iters(4)};
  std::shared_ptr<mlo_test::Toy> outer = mlo_test::toy("outer", mlo::ProblemConfig(), nullptr);
  std::shared_ptr<mlo_test::Toy> inner =
      std::make_shared<mlo_test::Toy>("inner", mlo::ProblemConfig(), nullptr, kInit);
  Pair() {
    engine.add(outer).add(inner);
    mlo_test::link(engine, outer, inner);
    engine.initialize();
  }
};

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace

TEST_CASE("State file: a changed byte inside a tensor is refused, naming the file", "[io][state]") {
  const fs::path dir = fs::temp_directory_path() / "mlo_state_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "state.pt";
  {
    Pair pair;
    mlo::io::save_state(file.string(), pair.engine);
  }
  {
    Pair pair;
    CHECK(mlo::io::load_state(file.string(), pair.engine) == 0);  // intact: loads
  }
  // The inner parameter's bytes, found in the file and changed in their last bit.
  std::string bytes = read(file);
  char value[sizeof(double)];
  std::memcpy(value, &kInit, sizeof(double));
  const size_t at = bytes.find(std::string(value, sizeof(double)));
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(std::string(value, sizeof(double)), at + 1) == std::string::npos);
  bytes[at] = static_cast<char>(bytes[at] ^ 1);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  {
    Pair pair;
    REQUIRE_THROWS_WITH(mlo::io::load_state(file.string(), pair.engine),
                        Contains("the state file '" + file.string() + "' is damaged") &&
                            Contains("fails its CRC-32 check"));
  }
  // Cut short: the zip directory at its end is gone.
  fs::resize_file(file, bytes.size() / 2);
  {
    Pair pair;
    REQUIRE_THROWS_WITH(
        mlo::io::load_state(file.string(), pair.engine),
        Contains("the state file '" + file.string() + "' is damaged or incomplete"));
  }
}

TEST_CASE("State file: another run's identity is refused before loading; an unsaid one is not "
          "compared", "[io][state]") {
  const fs::path dir = fs::temp_directory_path() / "mlo_state_identity_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path named = dir / "named.pt", unsaid = dir / "unsaid.pt";
  mlo::io::StateIdentity identity;
  identity.run = "hpo";
  identity.seed = 3;
  identity.last_record = 20;
  {
    Pair pair;
    mlo::io::save_state(named.string(), pair.engine, identity);
    mlo::io::save_state(unsaid.string(), pair.engine);  // as a program that names no run
  }
  {
    Pair pair;
    mlo::io::StateIdentity saved;
    CHECK(mlo::io::load_state(named.string(), pair.engine, identity, &saved) == 0);
    CHECK(saved.run == "hpo");
    CHECK(saved.seed == std::optional<int64_t>(3));
    CHECK(saved.last_record == 20);
  }
  mlo::io::StateIdentity other = identity;
  other.run = "reweighting";
  {
    Pair pair;
    REQUIRE_THROWS_WITH(mlo::io::load_state(named.string(), pair.engine, other),
                        Contains("was saved by a run of 'hpo', and this run is one of "
                                 "'reweighting'"));
  }
  other = identity;
  other.seed = 4;
  {
    Pair pair;
    REQUIRE_THROWS_WITH(mlo::io::load_state(named.string(), pair.engine, other),
                        Contains("was saved by a run of seed 3, and this run's seed is 4"));
  }
  {
    // Nothing said on either side is not compared: a state without a seed or name loads into
    // any run, and a run that says nothing takes any state.
    Pair pair;
    mlo::io::StateIdentity saved;
    CHECK(mlo::io::load_state(unsaid.string(), pair.engine, other, &saved) == 0);
    CHECK(saved.run.empty());
    CHECK_FALSE(saved.seed.has_value());
    Pair again;
    CHECK(mlo::io::load_state(named.string(), again.engine) == 0);
  }
  fs::remove_all(dir);
}

}  // namespace state_test
