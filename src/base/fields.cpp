#include <mlo/base/fields.h>

#include <mlo/base/number_text.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
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

Check<double> above(double low) {
  return [low](const double& v) {
    return v > low ? std::string() : "must be > " + number_text(low) + ", got " + number_text(v);
  };
}

Check<double> above_up_to(double low, double high) {
  return [low, high](const double& v) {
    return v > low && v <= high ? std::string()
                                : "must be in (" + number_text(low) + ", " + number_text(high) +
                                      "], got " + number_text(v);
  };
}

Check<double> between(double low, double high) {
  return [low, high](const double& v) {
    return v > low && v < high ? std::string()
                               : "must be in (" + number_text(low) + ", " + number_text(high) +
                                     "), got " + number_text(v);
  };
}

Check<double> at_least_below(double low, double high) {
  return [low, high](const double& v) {
    return v >= low && v < high ? std::string()
                                : "must be in [" + number_text(low) + ", " + number_text(high) +
                                      "), got " + number_text(v);
  };
}

Check<int64_t> int_in_range(int64_t low, int64_t high) {
  return [low, high](const int64_t& v) {
    return v >= low && v <= high ? std::string()
                                 : "must be in [" + std::to_string(low) + ", " +
                                       std::to_string(high) + "], got " + std::to_string(v);
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

namespace {

// Whether `text` reads back as the same string when written plain (unquoted) in YAML: names,
// paths and such, but nothing a reader could take for a number, a boolean, null, or syntax.
bool plain_safe(const std::string& text) {
  if (text.empty()) return false;
  static const char* const kWords[] = {"true", "false", "yes", "no", "on", "off", "y", "n",
                                       "null", "~"};
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : kWords) {
    if (lower == word) return false;
  }
  const auto first = static_cast<unsigned char>(text[0]);
  if (!(std::isalpha(first) || text[0] == '_' || text[0] == '/')) return false;  // numbers, .inf
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (!(std::isalnum(u) || c == '_' || c == '-' || c == '.' || c == '/' || c == '+')) {
      return false;
    }
  }
  return true;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char escape[8];
      std::snprintf(escape, sizeof(escape), "\\x%02x", u);
      out += escape;
    } else {
      out += c;  // (UTF-8 passes through)
    }
  }
  return out + "\"";
}

std::string yaml_scalar(const std::string& text) { return plain_safe(text) ? text : quoted(text); }

// A float that every YAML reader reads as one: YAML 1.1's (PyYAML's) needs a point, "5.0e-04".
std::string yaml_float(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? ".nan" : value > 0 ? ".inf" : "-.inf";
  std::string s = number_text(value);
  const auto exponent = s.find('e');
  if (s.find('.') == std::string::npos) {
    if (exponent == std::string::npos) {
      s += ".0";
    } else {
      s.insert(exponent, ".0");
    }
  }
  return s;
}

// Writes block mappings, `indent` spaces deep.
class YamlWriter : public Fields {
 public:
  YamlWriter(std::string& out, int indent) : out_(out), indent_(indent) {}

  void operator()(const char* key, int64_t& value, const Check<int64_t>&) override {
    line(key, std::to_string(value));
  }
  void operator()(const char* key, double& value, const Check<double>&) override {
    line(key, yaml_float(value));
  }
  void operator()(const char* key, bool& value) override { line(key, value ? "true" : "false"); }
  void operator()(const char* key, std::string& value, const Check<std::string>&) override {
    line(key, yaml_scalar(value));
  }
  void operator()(const char* key, std::vector<int64_t>& value) override {
    std::string text;
    for (const int64_t v : value) text += (text.empty() ? "" : ", ") + std::to_string(v);
    line(key, "[" + text + "]");
  }
  void operator()(const char* key,
                  std::map<std::string, std::vector<std::string>>& value) override {
    if (value.empty()) {
      line(key, "{}");
      return;
    }
    open(key);
    for (const auto& [name, list] : value) {
      std::string text;
      for (const auto& item : list) text += (text.empty() ? "" : ", ") + yaml_scalar(item);
      pad(indent_ + 2);
      out_ += yaml_scalar(name) + ": [" + text + "]\n";
    }
  }
  void section(const char* key, const std::function<void(Fields&)>& body) override {
    nested(key, [&](Fields& f) { body(f); });
  }
  void entries(const char* key, const std::vector<std::string>& existing,
               const std::function<void(const std::string&, Fields&)>& body) override {
    nested(key, [&](Fields& f) {
      auto& writer = static_cast<YamlWriter&>(f);
      for (const auto& name : existing) {
        writer.nested(yaml_scalar(name).c_str(), [&](Fields& g) { body(name, g); });
      }
    });
  }

 private:
  void pad(int n) { out_.append(static_cast<size_t>(n), ' '); }
  void line(const char* key, const std::string& value) {
    pad(indent_);
    out_ += std::string(key) + ": " + value + "\n";
  }
  void open(const char* key) {
    pad(indent_);
    out_ += std::string(key) + ":\n";
  }
  // `key:` and its body one level deeper, or `key: {}` when the body writes nothing.
  void nested(const char* key, const std::function<void(Fields&)>& body) {
    std::string inner;
    YamlWriter writer(inner, indent_ + 2);
    body(writer);
    if (inner.empty()) {
      line(key, "{}");
    } else {
      open(key);
      out_ += inner;
    }
  }

  std::string& out_;
  int indent_;
};

}  // namespace

std::string yaml_text(const std::function<void(Fields&)>& visit) {
  std::string out;
  YamlWriter writer(out, 0);
  visit(writer);
  return out;
}

std::string first_failed_check(const std::function<void(Fields&)>& visit) {
  std::string failure;
  Checker checker(failure, "");
  visit(checker);
  return failure;
}

namespace {

// Passes what a visit describes on to `to`, except a `method` key and the section it names.
class WithoutMethod final : public Fields {
 public:
  explicit WithoutMethod(Fields& to) : to_(to) {}
  void operator()(const char* key, int64_t& value, const Check<int64_t>& check) override {
    to_(key, value, check);
  }
  void operator()(const char* key, double& value, const Check<double>& check) override {
    to_(key, value, check);
  }
  void operator()(const char* key, bool& value) override { to_(key, value); }
  void operator()(const char* key, std::string& value,
                  const Check<std::string>& check) override {
    if (std::string(key) == "method") {
      method_ = value;
      return;
    }
    to_(key, value, check);
  }
  void operator()(const char* key, std::vector<int64_t>& value) override { to_(key, value); }
  void operator()(const char* key,
                  std::map<std::string, std::vector<std::string>>& value) override {
    to_(key, value);
  }
  void section(const char* key, const std::function<void(Fields&)>& body) override {
    if (!method_.empty() && key == method_) return;
    to_.section(key, body);
  }
  void entries(const char* key, const std::vector<std::string>& existing,
               const std::function<void(const std::string&, Fields&)>& body) override {
    to_.entries(key, existing, body);
  }

 private:
  Fields& to_;
  std::string method_;
};

}  // namespace

void visit_without_method(Fields& to, const std::function<void(Fields&)>& visit) {
  WithoutMethod without(to);
  visit(without);
}

}  // namespace mlo
