#pragma once
/// \file
/// Numbers as text for people and files (base layer): the shortest decimal that reads back as the
/// same double, so a resolved config says `lr: 0.1` (not 0.10000000000000001) and an error says
/// "got 1.5" (not "got 1.500000"), without losing a bit.

#include <string>

namespace mlo {

/// The shortest decimal text that reads back (strtod, JSON) as exactly `value`: "0.1", "1",
/// "1e-05", "0.30000000000000004", "-0". Shortest in characters, as `std::to_chars` chooses
/// between fixed and exponent forms: a large whole number may come out in full
/// ("1152921504606846976"). Non-finite values: "nan", "inf", "-inf". (YAML 1.1 readers take
/// "1" and "1e-05" for no float; the config writer adds a point.)
///
/// ```
/// MLO_CHECK(lr > 0, "lr must be > 0, got ", mlo::number_text(lr));
/// ```
std::string number_text(double value);

}  // namespace mlo
