#include <mlo/run/fields.h>

#include <algorithm>
#include <sstream>

namespace mlo {
namespace run {

Check<int64_t> at_least(int64_t low) {
  return [low](const int64_t& v) {
    std::ostringstream out;
    if (v < low) out << "must be >= " << low << ", got " << v;
    return out.str();
  };
}

Check<double> positive() {
  return [](const double& v) {
    std::ostringstream out;
    if (!(v > 0)) out << "must be > 0, got " << v;
    return out.str();
  };
}

Check<double> non_negative() {
  return [](const double& v) {
    std::ostringstream out;
    if (!(v >= 0)) out << "must be >= 0, got " << v;
    return out.str();
  };
}

Check<double> in_range(double low, double high) {
  return [low, high](const double& v) {
    std::ostringstream out;
    if (!(v >= low && v <= high)) out << "must be in [" << low << ", " << high << "], got " << v;
    return out.str();
  };
}

Check<std::string> one_of(std::vector<std::string> choices) {
  return [choices](const std::string& v) {
    if (std::find(choices.begin(), choices.end(), v) != choices.end()) return std::string();
    std::string out = "must be one of ";
    for (size_t i = 0; i < choices.size(); ++i) out += (i ? ", " : "") + choices[i];
    return out + "; got '" + v + "'";
  };
}

}  // namespace run
}  // namespace mlo
