// io::save_state / io::load_state: a state file whose bytes were changed is refused, naming the
// file, although LibTorch's own reader would load it (it skips the zip's CRC-32 checks).
#include "support/toy.h"

#include <mlo/io/state.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
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

}  // namespace state_test
