#include <mlo/base/fields.h>

#include <mlo/base/number_text.h>

#include <algorithm>
#include <sstream>
#include <utility>

namespace mlo {

Check<int64_t> at_least(int64_t low) {
  return [low](const int64_t& v) {
    std::ostringstream out;
    if (v < low) out << "must be >= " << low << ", got " << v;
    return out.str();
  };
}

// NOTE: values in messages through number_text: a stream's default 6 digits would print a
// rejected 1.0000001 as "1".
Check<double> positive() {
  return
      [](const double& v) { return v > 0 ? std::string() : "must be > 0, got " + number_text(v); };
}

Check<double> non_negative() {
  return [](const double& v) {
    return v >= 0 ? std::string() : "must be >= 0, got " + number_text(v);
  };
}

Check<double> in_range(double low, double high) {
  return [low, high](const double& v) {
    return v >= low && v <= high ? std::string()
                                 : "must be in [" + number_text(low) + ", " + number_text(high) +
                                       "], got " + number_text(v);
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

namespace {

// Records each key's value as text, prefixed by its enclosing sections.
class Recorder : public Fields {
 public:
  Recorder(std::map<std::string, std::string>& out, std::string prefix)
      : out_(out), prefix_(std::move(prefix)) {}

  void operator()(const char* key, int64_t& value, const Check<int64_t>&) override {
    put(key, std::to_string(value));
  }
  void operator()(const char* key, double& value, const Check<double>&) override {
    put(key, number_text(value));
  }
  void operator()(const char* key, bool& value) override { put(key, value ? "true" : "false"); }
  void operator()(const char* key, std::string& value, const Check<std::string>&) override {
    put(key, value);
  }
  void operator()(const char* key, std::vector<int64_t>& value) override {
    std::string text;
    for (const int64_t v : value) text += (text.empty() ? "" : ",") + std::to_string(v);
    put(key, "[" + text + "]");
  }
  void operator()(const char* key,
                  std::map<std::string, std::vector<std::string>>& value) override {
    std::string text;
    for (const auto& [name, list] : value) {
      text += name + ":[";
      for (size_t i = 0; i < list.size(); ++i) text += (i ? "," : "") + list[i];
      text += "];";
    }
    put(key, text);
  }
  void section(const char* key, const std::function<void(Fields&)>& body) override {
    Recorder inner(out_, prefix_ + key + ".");
    body(inner);
  }
  void entries(const char* key, const std::vector<std::string>& existing,
               const std::function<void(const std::string&, Fields&)>& body) override {
    for (const auto& name : existing) {
      Recorder inner(out_, prefix_ + key + "." + name + ".");
      body(name, inner);
    }
  }

 private:
  void put(const char* key, std::string value) { out_[prefix_ + key] = std::move(value); }

  std::map<std::string, std::string>& out_;
  std::string prefix_;
};

}  // namespace

std::map<std::string, std::string> field_values(const std::function<void(Fields&)>& visit) {
  std::map<std::string, std::string> out;
  Recorder recorder(out, "");
  visit(recorder);
  return out;
}

namespace {

// Runs each value's check; keeps the first failure with its key path.
class Checker : public Fields {
 public:
  Checker(std::string& failure, std::string prefix)
      : failure_(failure), prefix_(std::move(prefix)) {}

  void operator()(const char* key, int64_t& value, const Check<int64_t>& check) override {
    run(key, check, value);
  }
  void operator()(const char* key, double& value, const Check<double>& check) override {
    run(key, check, value);
  }
  void operator()(const char*, bool&) override {}
  void operator()(const char* key, std::string& value, const Check<std::string>& check) override {
    run(key, check, value);
  }
  void operator()(const char*, std::vector<int64_t>&) override {}
  void operator()(const char*, std::map<std::string, std::vector<std::string>>&) override {}
  void section(const char* key, const std::function<void(Fields&)>& body) override {
    Checker inner(failure_, prefix_ + key + ".");
    body(inner);
  }
  void entries(const char* key, const std::vector<std::string>& existing,
               const std::function<void(const std::string&, Fields&)>& body) override {
    for (const auto& name : existing) {
      Checker inner(failure_, prefix_ + key + "." + name + ".");
      body(name, inner);
    }
  }

 private:
  template <typename T>
  void run(const char* key, const Check<T>& check, const T& value) {
    if (!failure_.empty() || !check) return;
    const std::string what = check(value);
    if (!what.empty()) failure_ = prefix_ + key + ": " + what;
  }

  std::string& failure_;
  std::string prefix_;
};

}  // namespace

std::string first_failed_check(const std::function<void(Fields&)>& visit) {
  std::string failure;
  Checker checker(failure, "");
  visit(checker);
  return failure;
}

}  // namespace mlo
