// Errors: a failed internal invariant names mlo (not LibTorch) and is told apart from user errors.
#include <mlo/base/error.h>

#include <catch2/catch.hpp>

#include <string>

namespace error_test {

TEST_CASE("MLO_INTERNAL_ASSERT: names mlo, the condition and the place, not PyTorch", "[core]") {
  const int expected = 2;
  try {
    MLO_INTERNAL_ASSERT(expected == 3, "value was ", expected);
    FAIL("MLO_INTERNAL_ASSERT did not throw");
  } catch (const mlo::InternalError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("mlo internal error") != std::string::npos);
    CHECK(what.find("expected == 3") != std::string::npos);
    CHECK(what.find("value was 2") != std::string::npos);
    CHECK(what.find("error_test.cpp") != std::string::npos);
    CHECK(what.find("bug in mlo") != std::string::npos);
    CHECK(what.find("PyTorch") == std::string::npos);
  }
}

TEST_CASE("MLO_CHECK: a user error is an mlo::Error, not an internal one", "[core]") {
  CHECK_THROWS_AS([] { MLO_CHECK(false, "bad value ", 7); }(), mlo::Error);
  CHECK_THROWS_WITH([] { MLO_CHECK(false, "bad value ", 7); }(), "bad value 7");
  CHECK_NOTHROW([] { MLO_INTERNAL_ASSERT(true, "never"); }());
}

}  // namespace error_test
