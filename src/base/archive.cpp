#include <mlo/base/archive.h>

#include <mlo/base/error.h>

#include <torch/serialize/input-archive.h>

namespace mlo {
namespace archive {
namespace {

template <typename Check>
c10::IValue read(torch::serialize::InputArchive& archive, const std::string& key,
                 const std::string& owner, const char* type, Check check) {
  c10::IValue value;
  MLO_CHECK(archive.try_read(key, value), owner, ": the saved state has no '", key,
            "' (saved by another version or another experiment?)");
  MLO_CHECK(check(value), owner, ": the saved '", key, "' is not ", type, " (", value.tagKind(),
            ")");
  return value;
}

}  // namespace

int64_t read_int(torch::serialize::InputArchive& archive, const std::string& key,
                 const std::string& owner) {
  return read(archive, key, owner, "an integer", [](const c10::IValue& v) { return v.isInt(); })
      .toInt();
}

double read_double(torch::serialize::InputArchive& archive, const std::string& key,
                   const std::string& owner) {
  return read(archive, key, owner, "a number", [](const c10::IValue& v) { return v.isDouble(); })
      .toDouble();
}

bool read_bool(torch::serialize::InputArchive& archive, const std::string& key,
               const std::string& owner) {
  return read(archive, key, owner, "a boolean", [](const c10::IValue& v) { return v.isBool(); })
      .toBool();
}

std::string read_string(torch::serialize::InputArchive& archive, const std::string& key,
                        const std::string& owner) {
  return read(archive, key, owner, "a string", [](const c10::IValue& v) { return v.isString(); })
      .toStringRef();
}

std::vector<int64_t> read_ints(torch::serialize::InputArchive& archive, const std::string& key,
                               const std::string& owner) {
  return read(archive, key, owner, "a list of integers",
              [](const c10::IValue& v) { return v.isIntList(); })
      .toIntVector();
}

std::vector<double> read_doubles(torch::serialize::InputArchive& archive, const std::string& key,
                                 const std::string& owner) {
  return read(archive, key, owner, "a list of numbers",
              [](const c10::IValue& v) { return v.isDoubleList(); })
      .toDoubleVector();
}

}  // namespace archive
}  // namespace mlo
