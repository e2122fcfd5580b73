// Writing a configuration as YAML: the schema (schema.h) drives a writer that emits every key.
#include <mlo/run/yaml.h>

#include <mlo/base/number_text.h>

#include "schema.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <sstream>

namespace mlo {
namespace run {
namespace {

// Writes the schema's values as YAML.
class Writer : public Fields {
 public:
  explicit Writer(YAML::Emitter& out) : out_(out) {}

  void operator()(const char* key, int64_t& value, const Check<int64_t>&) override {
    emit(key, value);
  }
  void operator()(const char* key, double& value, const Check<double>&) override {
    emit(key, value);
  }
  void operator()(const char* key, bool& value) override { emit(key, value); }
  void operator()(const char* key, std::string& value, const Check<std::string>&) override {
    emit(key, value);
  }
  void operator()(const char* key, std::vector<int64_t>& value) override { emit(key, value); }
  void operator()(const char* key,
                  std::map<std::string, std::vector<std::string>>& value) override {
    emit(key, value);
  }

  void section(const char* key, const std::function<void(Fields&)>& body) override {
    out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
    body(*this);
    out_ << YAML::EndMap;
  }

  void entries(const char* key, const std::vector<std::string>& existing,
               const std::function<void(const std::string&, Fields&)>& body) override {
    out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
    for (const auto& name : existing) {
      out_ << YAML::Key << name << YAML::Value << YAML::BeginMap;
      body(name, *this);
      out_ << YAML::EndMap;
    }
    out_ << YAML::EndMap;
  }

 private:
  template <typename T>
  void emit(const char* key, const T& value) {
    out_ << YAML::Key << key << YAML::Value;
    write(value);
  }

  template <typename T>
  void write(const T& value) {
    out_ << value;
  }
  void write(const double& value) {
    if (!std::isfinite(value)) {  // YAML's spellings (the reader refuses them, naming the key)
      out_ << (std::isnan(value) ? ".nan" : value > 0 ? ".inf" : "-.inf");
      return;
    }
    std::string s = number_text(value);
    // Keep it a float for every YAML reader: YAML 1.1's (PyYAML's) needs a point, "5.0e-04".
    const auto exponent = s.find('e');
    if (s.find('.') == std::string::npos) {
      if (exponent == std::string::npos) {
        s += ".0";
      } else {
        s.insert(exponent, ".0");
      }
    }
    out_ << s;
  }
  void write(const std::vector<int64_t>& value) {
    out_ << YAML::Flow << YAML::BeginSeq;
    for (const auto v : value) out_ << v;
    out_ << YAML::EndSeq;
  }
  void write(const std::map<std::string, std::vector<std::string>>& value) {
    out_ << YAML::BeginMap;
    for (const auto& [k, list] : value) {
      out_ << YAML::Key << k << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const auto& item : list) out_ << item;
      out_ << YAML::EndSeq;
    }
    out_ << YAML::EndMap;
  }

  YAML::Emitter& out_;
};

}  // namespace

std::string to_yaml(const run::RunConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  Writer writer(out);
  run::RunConfig copy = config;
  // A config built in code may have no settings yet: write the experiment's defaults.
  if (!copy.settings) copy.settings = run::SettingsHolder(run::make_settings(copy.experiment));
  // Each problem's method sections: the selected method's, and any other set to values other
  // than its defaults (a section left at its defaults is not written, so that a file written
  // by a program with a method of its own names that method only where it is used or set).
  for (auto& [name, problem] : copy.problems) {
    for (auto it = problem.methods.begin(); it != problem.methods.end();) {
      if (!it->second) {
        it = problem.methods.erase(it);
        continue;
      }
      if (it->first != problem.method && run::changed_method_key(problem, it->first).empty()) {
        it = problem.methods.erase(it);
      } else {
        ++it;
      }
    }
  }
  writer("experiment", copy.experiment, nullptr);
  schema::visit_after_experiment(writer, copy, /*every_method=*/false);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void visit_problem_keys(Fields& fields, ProblemSettings& settings) {
  schema::visit(fields, settings);
}

}  // namespace run
}  // namespace mlo
