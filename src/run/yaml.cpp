#include <mlo/base/error.h>
#include <mlo/run/yaml.h>
#include <mlo/run/config.h>
#include <mlo/run/experiment.h>

#include "schema.h"
#include "yaml_document.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

namespace mlo {
namespace run {
namespace {

// Where values came from, for messages: file positions and command-line overrides by key path.
struct Context {
  std::string source;
  std::map<std::string, std::string> overrides;  // key path -> "--set a.b=c"
  std::map<std::string, std::string> where;      // key path -> "file:line:col" (filled on read)
  std::vector<std::string> alternative_keys;     // see RunConfig::alternative_keys
};

std::string key_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string location(const Context& ctx, const std::string& path, const YAML::Mark& mark) {
  for (auto it = ctx.overrides.begin(); it != ctx.overrides.end(); ++it) {
    if (path == it->first || path.rfind(it->first + ".", 0) == 0) {
      return ctx.source + " (" + it->second + ")";
    }
  }
  if (mark.line < 0) return ctx.source;
  return ctx.source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

[[noreturn]] void fail(const std::string& where, const std::string& path, const std::string& what) {
  throw Error(where + ": " + (path.empty() ? std::string("(top level)") : path) + ": " + what);
}

// A mapping key as text. Keys must be plain scalars: `[a, b]: 1` or `{a: 1}: 2` is valid YAML
// but names nothing here.
std::string key_text(const Context& ctx, const std::string& path, const YAML::Node& key) {
  if (!key.IsScalar()) fail(location(ctx, path, key.Mark()), path, "keys must be plain names");
  return key.Scalar();
}

// Edit distance, for "did you mean" on unknown keys.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

template <typename T>
const char* type_name();
template <>
const char* type_name<int64_t>() {
  return "an integer";
}
template <>
const char* type_name<double>() {
  return "a number";
}
template <>
const char* type_name<bool>() {
  return "true or false";
}
template <>
const char* type_name<std::string>() {
  return "a string";
}

// Reads one mapping of the schema from a YAML node, remembering which keys it used.
class Reader : public Fields {
 public:
  // `node` may be absent (nullopt) or null: then every key keeps its default.
  Reader(std::optional<YAML::Node> node, std::string path, Context& ctx)
      : path_(std::move(path)), ctx_(ctx) {
    if (!node || node->IsNull()) return;
    if (!node->IsMap()) {
      fail(location(ctx_, path_, node->Mark()), path_, "must be a mapping (key: value lines)");
    }
    node_ = *node;
    has_map_ = true;
  }

  void operator()(const char* key, int64_t& value, const Check<int64_t>& check) override {
    read(key, value, check);
  }
  void operator()(const char* key, double& value, const Check<double>& check) override {
    read(key, value, check);
  }
  void operator()(const char* key, bool& value) override { read<bool>(key, value, nullptr); }
  void operator()(const char* key, std::string& value,
                  const Check<std::string>& check) override {
    read(key, value, check);
  }
  void operator()(const char* key, std::vector<int64_t>& value) override {
    read<std::vector<int64_t>>(key, value, nullptr);
  }
  void operator()(const char* key, std::map<std::string, std::vector<std::string>>& value) override {
    read<std::map<std::string, std::vector<std::string>>>(key, value, nullptr);
  }

  // Read and validated like a section; each key the YAML sets in it is noted
  // (RunConfig::alternative_keys), since the configuration will not use them.
  void alternative(const char* key, const std::function<void(Fields&)>& body) override {
    section(key, body);
    const std::string path = key_path(path_, key);
    const std::string prefix = path + ".";
    const size_t before = ctx_.alternative_keys.size();
    for (auto it = ctx_.where.lower_bound(prefix);
         it != ctx_.where.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      ctx_.alternative_keys.push_back(it->first);
    }
    // (an empty one, `cg: {}`, is set too)
    if (ctx_.alternative_keys.size() == before && ctx_.where.count(path)) {
      ctx_.alternative_keys.push_back(path);
    }
  }

  void refuse(const char* key, const std::string& what) override {
    const std::string path = key_path(path_, key);
    const YAML::Node& map = node_;  // (const: operator[] would add the key)
    const YAML::Mark mark =
        has_map_ && map[key].IsDefined() ? map[key].Mark() : YAML::Mark::null_mark();
    fail(location(ctx_, path, mark), path, what);
  }

  void section(const char* key, const std::function<void(Fields&)>& body) override {
    const std::optional<YAML::Node> child = lookup(key);
    const std::string path = key_path(path_, key);
    if (child) ctx_.where[path] = location(ctx_, path, child->Mark());
    // NOTE: an empty value (`engine:`, `engine: ~`, `--set engine=~`) would keep every key of
    // the section at its default, silently dropping whatever the file set there.
    if (child && child->IsNull()) {
      fail(location(ctx_, path, child->Mark()), path,
           "is empty (null); give its keys as a mapping, e.g. {} for every default");
    }
    Reader sub(child, path, ctx_);
    body(sub);
    sub.finish();
  }

  void entries(const char* key, const std::vector<std::string>& /*existing*/,
               const std::function<void(const std::string&, Fields&)>& body) override {
    const std::optional<YAML::Node> child = lookup(key);
    if (!child || child->IsNull()) return;
    const std::string path = key_path(path_, key);
    ctx_.where[path] = location(ctx_, path, child->Mark());
    if (!child->IsMap()) fail(location(ctx_, path, child->Mark()), path, "must be a mapping");
    for (const auto& entry : *child) {
      const std::string name = key_text(ctx_, path, entry.first);
      const std::string entry_path = key_path(path, name);
      ctx_.where[entry_path] = location(ctx_, entry_path, entry.second.Mark());
      Reader sub(entry.second, entry_path, ctx_);
      body(name, sub);
      sub.finish();
    }
  }

  // Every key of the mapping must have been read by the schema.
  void finish() const {
    if (!has_map_) return;
    for (const auto& entry : node_) {
      const std::string key = key_text(ctx_, path_, entry.first);
      if (used_.count(key)) continue;
      std::string hint;
      size_t best = 3;
      for (const auto& known : used_or_known_) {
        const size_t d = distance(key, known);
        if (d < best) {
          best = d;
          hint = "; did you mean '" + known + "'?";
        }
      }
      std::string known;
      for (const auto& k : used_or_known_) known += (known.empty() ? "" : ", ") + k;
      fail(location(ctx_, key_path(path_, key), entry.first.Mark()), key_path(path_, key),
           "unknown key" + (hint.empty() ? " (known keys: " + known + ")" : hint));
    }
  }

 private:
  template <typename T>
  void read(const char* key, T& value, const Check<T>& check) {
    const std::optional<YAML::Node> child = lookup(key);
    if (!child) return;
    const std::string path = key_path(path_, key);
    const std::string where = location(ctx_, path, child->Mark());
    ctx_.where[path] = where;
    read_value(*child, where, path, value);
    if (check) {
      const std::string problem = check(value);
      if (!problem.empty()) fail(where, path, problem);
    }
  }

  std::optional<YAML::Node> lookup(const char* key) {
    used_or_known_.insert(key);
    if (!has_map_) return std::nullopt;
    const YAML::Node& map = node_;
    const YAML::Node child = map[key];
    if (!child.IsDefined()) return std::nullopt;
    used_.insert(key);
    return child;
  }

  template <typename T>
  void read_value(const YAML::Node& node, const std::string& where, const std::string& path,
                  T& value) {
    if (!node.IsScalar()) fail(where, path, std::string("must be ") + type_name<T>());
    try {
      value = node.as<T>();
    } catch (const YAML::Exception&) {
      fail(where, path, std::string("must be ") + type_name<T>() + ", got '" + node.Scalar() + "'");
    }
    if constexpr (std::is_same_v<T, double>) {
      // NOTE: .inf and .nan are YAML numbers, but no setting means them, and the writer could
      // not give them back.
      if (!std::isfinite(value)) fail(where, path, "must be a finite number, got " + node.Scalar());
    }
  }

  void read_value(const YAML::Node& node, const std::string& where, const std::string& path,
                  std::vector<int64_t>& value) {
    if (node.IsNull()) {
      value.clear();
      return;
    }
    if (!node.IsSequence()) fail(where, path, "must be a list of integers, like [100, 200]");
    value.clear();
    for (const auto& item : node) {
      try {
        value.push_back(item.as<int64_t>());
      } catch (const YAML::Exception&) {
        fail(where, path, "must be a list of integers; '" + item.Scalar() + "' is not one");
      }
    }
  }

  void read_value(const YAML::Node& node, const std::string& where, const std::string& path,
                  std::map<std::string, std::vector<std::string>>& value) {
    if (!node.IsMap()) fail(where, path, "must map problem names to lists of problem names");
    value.clear();
    for (const auto& entry : node) {
      const std::string key = key_text(ctx_, path, entry.first);
      const std::string entry_path = key_path(path, key);
      if (entry.second.IsScalar()) {
        value[key] = {entry.second.Scalar()};
      } else if (entry.second.IsSequence()) {
        for (const auto& item : entry.second) {
          if (!item.IsScalar()) {
            fail(location(ctx_, entry_path, item.Mark()), entry_path,
                 "must be a list of problem names");
          }
          value[key].push_back(item.Scalar());
        }
      } else {
        fail(where, entry_path, "must be a problem name or a list of names");
      }
    }
  }

  YAML::Node node_;
  bool has_map_ = false;
  std::string path_;
  Context& ctx_;
  std::set<std::string> used_;
  std::set<std::string> used_or_known_;
};

// Refuses a key given twice in one mapping (YAML readers differ on which one wins; yaml-cpp keeps
// the first), anywhere in the tree, naming both places.
// The most values a configuration may hold, aliases expanded: an experiment's has a few
// hundred; nested aliases could otherwise make one short file take exponential time.
constexpr size_t kMaxConfigValues = 100000;

void check_duplicates(const YAML::Node& node, const std::string& path, const Context& ctx,
                      size_t& values) {
  if (++values > kMaxConfigValues) {
    fail(location(ctx, path, node.Mark()), path,
         "the file holds more than " + std::to_string(kMaxConfigValues) +
             " values once its aliases (*name) are expanded; an experiment's configuration "
             "has a few hundred");
  }
  if (node.IsMap()) {
    std::map<std::string, YAML::Mark> seen;
    for (const auto& entry : node) {
      const std::string key = key_text(ctx, path, entry.first);
      const std::string child = key_path(path, key);
      const auto [it, fresh] = seen.emplace(key, entry.first.Mark());
      if (!fresh) {
        fail(location(ctx, child, entry.first.Mark()), child,
             "given twice in one mapping (first at line " + std::to_string(it->second.line + 1) +
                 "); keep one");
      }
      check_duplicates(entry.second, child, ctx, values);
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) check_duplicates(item, path, ctx, values);
  }
}

// Applies "a.b.c=value" to the tree, creating mappings along the path.
void apply_override(YAML::Node& root, const std::string& text, Context& ctx) {
  const auto eq = text.find('=');
  MLO_CHECK(eq != std::string::npos && eq > 0, "--set '", text,
            "': expected key.path=value, e.g. --set engine.train_iters=100");
  const std::string path = text.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw Error("--set '" + text + "': the value is not valid YAML: " + e.msg);
  }
  std::vector<std::string> keys;
  std::stringstream parts(path);
  for (std::string key; std::getline(parts, key, '.');) {
    MLO_CHECK(!key.empty(), "--set '", text, "': empty key in '", path, "'");
    keys.push_back(key);
  }
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node next = chain.back()[keys[i]];
    if (next && !next.IsNull() && !next.IsMap()) {
      throw Error("--set '" + text + "': '" + keys[i] + "' is not a mapping");
    }
    if (!next || next.IsNull()) next = YAML::Node(YAML::NodeType::Map);
    chain.push_back(next);
  }
  chain.back()[keys.back()] = value;
  for (size_t i = chain.size() - 1; i > 0; --i) chain[i - 1][keys[i - 1]] = chain[i];
  ctx.overrides[path] = "--set " + text;
}

}  // namespace

run::RunConfig parse_run_config(const std::string& yaml, const std::string& source,
                                const std::vector<std::string>& overrides) {
  Context ctx;
  ctx.source = source;
  YAML::Node root = load_one_document(yaml, source);
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  // Checked before the overrides, which index into the top-level mapping.
  if (!root.IsMap()) {
    fail(location(ctx, "", root.Mark()), "", "must be a mapping (key: value lines)");
  }
  size_t values = 0;
  check_duplicates(root, "", ctx, values);
  for (const auto& text : overrides) apply_override(root, text, ctx);

  run::RunConfig config;
  config.source = source;
  Reader reader(root, "", ctx);
  // The experiment comes first: its settings describe the rest of the file.
  reader("experiment", config.experiment, [](const std::string& name) {
    if (run::is_experiment(name)) return std::string();
    std::string names;
    for (const auto& known : run::experiment_names()) names += (names.empty() ? "" : ", ") + known;
    return "unknown experiment '" + name + "'; registered experiments: " + names;
  });
  if (config.experiment.empty()) {
    std::string names;
    for (const auto& known : run::experiment_names()) names += (names.empty() ? "" : ", ") + known;
    fail(ctx.source, "experiment",
         "missing: every configuration names its experiment; registered experiments: " + names);
  }
  config.settings = run::SettingsHolder(run::make_settings(config.experiment));
  config.settings->defaults(config);
  schema::visit_after_experiment(reader, config);
  reader.finish();
  config.locations = ctx.where;
  config.alternative_keys = ctx.alternative_keys;
  run::check_config(config);
  return config;
}

run::RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code error;
  MLO_CHECK(!std::filesystem::is_directory(path, error), "'", path, "' is a folder, not a ",
            "configuration file (a YAML file like configs/hpo_logreg.yaml)");
  MLO_CHECK(std::filesystem::exists(path, error), "the configuration file '", path,
            "' does not exist");
  std::ifstream file(path, std::ios::binary);
  MLO_CHECK(file.good(), "cannot read the configuration file '", path, "'");
  // Read up to the bound, not the whole of what may be a device or a huge file.
  std::string text(kMaxConfigBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(file.gcount()));
  MLO_CHECK(text.size() <= kMaxConfigBytes, "the configuration file '", path,
            "' is larger than ", kMaxConfigBytes / (1024 * 1024), " MiB (an experiment's ",
            "configuration is a few kilobytes); is it the right file?");
  return parse_run_config(text, path, overrides);
}

}  // namespace run
}  // namespace mlo
