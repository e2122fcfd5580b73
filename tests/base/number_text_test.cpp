// number_text: the shortest decimal that reads back exactly, checked against strtod over values
// whose shortest forms are known and over random bit patterns; no shorter text reads back.
#include <mlo/base/number_text.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>

namespace number_text_test {

namespace {

double read_back(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

// The number of significant digits in a decimal text ("0.0012" -> 2, "1e-05" -> 1).
int significant_digits(const std::string& text) {
  const std::string mantissa = text.substr(0, text.find_first_of("eE"));
  int digits = 0;
  bool leading = true;
  for (const char c : mantissa) {
    if (c < '0' || c > '9') continue;
    if (leading && c == '0') continue;
    leading = false;
    ++digits;
  }
  return digits;
}

}  // namespace

TEST_CASE("number_text: known shortest forms", "[base]") {
  CHECK(mlo::number_text(0.1) == "0.1");
  CHECK(mlo::number_text(1.0) == "1");
  CHECK(mlo::number_text(-2.5) == "-2.5");
  CHECK(mlo::number_text(0.0) == "0");
  CHECK(mlo::number_text(-0.0) == "-0");
  CHECK(mlo::number_text(1e-5) == "1e-05");
  CHECK(mlo::number_text(0.1 + 0.2) == "0.30000000000000004");  // 17 digits are needed here
  CHECK(mlo::number_text(5e-4) == "5e-04");                     // shorter than 0.0005
  CHECK(mlo::number_text(0.05) == "0.05");
  CHECK(mlo::number_text(1e22) == "1e+22");
  CHECK(mlo::number_text(std::numeric_limits<double>::quiet_NaN()) == "nan");
  CHECK(mlo::number_text(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(mlo::number_text(-std::numeric_limits<double>::infinity()) == "-inf");
}

TEST_CASE("number_text: random doubles read back exactly, and one digit fewer does not", "[base]") {
  std::mt19937_64 bits(7);
  int checked = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t pattern = bits();
    double value = 0;
    std::memcpy(&value, &pattern, sizeof(value));
    if (!std::isfinite(value)) continue;
    const std::string text = mlo::number_text(value);
    INFO("bits " << pattern << " text " << text);
    REQUIRE(read_back(text) == value);
    // Minimal: printed with one significant digit fewer, no text reads back as the value. (A
    // large integer may come in fixed notation, all its digits, when that is fewer characters
    // than the exponent form; only forms with a point or an exponent are minimal in digits.)
    const int digits = significant_digits(text);
    if (digits > 1 && text.find_first_of(".e") != std::string::npos) {
      char shorter[64];
      std::snprintf(shorter, sizeof(shorter), "%.*e", digits - 2, value);
      CHECK(read_back(shorter) != value);
    }
    ++checked;
  }
  CHECK(checked > 19000);
}

}  // namespace number_text_test
