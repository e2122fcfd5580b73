#pragma once
// Test helper: compares two saved states (files of io::save_state, or any LibTorch archive) bit
// for bit: the same keys at every level, tensors of the same dtype, shape and bytes (so NaN
// equals itself and -0.0 differs from +0.0, where torch::equal would say the opposite), and the
// same values (doubles by their bits). Returns the first difference, named by its key path, or
// "" when the two are identical.

#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace mlo_test {
namespace detail {

inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

// "" or what differs between two tensors.
inline std::string tensor_difference(at::Tensor a, at::Tensor b) {
  if (a.scalar_type() != b.scalar_type()) {
    return std::string("dtype ") + c10::toString(a.scalar_type()) + " vs " +
           c10::toString(b.scalar_type());
  }
  if (a.sizes() != b.sizes()) {
    std::ostringstream out;
    out << "shape " << a.sizes() << " vs " << b.sizes();
    return out.str();
  }
  a = a.detach().cpu().contiguous();
  b = b.detach().cpu().contiguous();
  const size_t item = a.element_size();
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * item, pb + i * item, item) == 0) continue;
    std::ostringstream out;
    out.precision(17);
    out << "element " << i << " of " << a.numel() << " differs";
    if (a.scalar_type() != at::kBool && !a.is_complex()) {
      out << " (" << a.flatten()[i].item<double>() << " vs " << b.flatten()[i].item<double>()
          << ")";
    }
    // NOTE: torch::equal agrees on every tensor whose bytes are equal and holds no NaN; its
    // verdict is shown for a difference it would miss (a NaN, or -0.0 against +0.0).
    if (at::equal(a, b)) out << "; torch::equal would call them equal";
    return out.str();
  }
  return "";
}

// "" or what differs between two values that are not archives.
inline std::string value_difference(const c10::IValue& a, const c10::IValue& b) {
  if (a.tagKind() != b.tagKind()) return "kind " + a.tagKind() + " vs " + b.tagKind();
  if (a.isTensor()) return tensor_difference(a.toTensor(), b.toTensor());
  std::ostringstream out;
  out.precision(17);
  if (a.isDouble()) {
    if (same_bits(a.toDouble(), b.toDouble())) return "";
    out << a.toDouble() << " vs " << b.toDouble();
    return out.str();
  }
  if (a.isDoubleList()) {
    const auto x = a.toDoubleVector();
    const auto y = b.toDoubleVector();
    if (x.size() != y.size()) {
      out << x.size() << " vs " << y.size() << " values";
      return out.str();
    }
    for (size_t i = 0; i < x.size(); ++i) {
      if (same_bits(x[i], y[i])) continue;
      out << "value " << i << ": " << x[i] << " vs " << y[i];
      return out.str();
    }
    return "";
  }
  if (a == b) return "";
  out << a << " vs " << b;
  return out.str();
}

// Whether a tensor holds the bytes of a nested archive (a zip: the roll-back snapshot).
inline bool holds_archive(const at::Tensor& t) {
  if (t.scalar_type() != at::kByte || t.dim() != 1 || t.numel() < 4) return false;
  const at::Tensor c = t.contiguous();
  return std::memcmp(c.data_ptr(), "PK\x03\x04", 4) == 0;
}

inline torch::serialize::InputArchive sub_archive(torch::serialize::InputArchive& a,
                                                  const std::string& key) {
  torch::serialize::InputArchive sub;
  a.read(key, sub);
  return sub;
}

inline int64_t read_count(torch::serialize::InputArchive& a, const std::string& key) {
  at::Tensor size;
  a.read(key, size);
  return size.item<int64_t>();
}

// A LibTorch optimizer's archive names each parameter by the address of its tensor in the run
// that saved it ("0x55d0..."): as "params/<i>" of each group ("param_groups/<g>" inside
// param_groups), and as the keys of state. Those differ from run to run, so each is replaced by
// its position, "group g param i".
inline std::map<std::string, std::string> parameter_names(torch::serialize::InputArchive& a) {
  std::map<std::string, std::string> names;
  auto groups = sub_archive(a, "param_groups");
  for (int64_t g = 0, n = read_count(groups, "param_groups/size"); g < n; ++g) {
    auto group = sub_archive(groups, "param_groups/" + std::to_string(g));
    for (int64_t i = 0, m = read_count(group, "params/size"); i < m; ++i) {
      c10::IValue address;
      group.read("params/" + std::to_string(i), address);
      names[address.toStringRef()] = "group " + std::to_string(g) + " param " + std::to_string(i);
    }
  }
  return names;
}

inline bool is_optimizer(torch::serialize::InputArchive& a) {
  const auto keys = a.keys();
  const auto has = [&](const char* k) {
    return std::find(keys.begin(), keys.end(), k) != keys.end();
  };
  return has("param_groups") && has("state") && has("pytorch_version");
}

}  // namespace detail

inline std::string archive_difference(torch::serialize::InputArchive& a,
                                      torch::serialize::InputArchive& b,
                                      const std::string& path = "");

namespace detail {

// Two optimizers' archives, their parameters matched by position (parameter_names).
inline std::string optimizer_difference(torch::serialize::InputArchive& a,
                                        torch::serialize::InputArchive& b,
                                        const std::string& path) {
  const auto na = parameter_names(a);
  const auto nb = parameter_names(b);
  // param_groups: the same number of groups and parameters, the same options.
  auto ga = sub_archive(a, "param_groups");
  auto gb = sub_archive(b, "param_groups");
  const int64_t groups = read_count(ga, "param_groups/size");
  if (groups != read_count(gb, "param_groups/size")) {
    return path + "param_groups: another number of groups";
  }
  for (int64_t g = 0; g < groups; ++g) {
    const std::string key = "param_groups/" + std::to_string(g);
    auto xa = sub_archive(ga, key);
    auto xb = sub_archive(gb, key);
    if (read_count(xa, "params/size") != read_count(xb, "params/size")) {
      return path + key + ": another number of parameters";
    }
    auto oa = sub_archive(xa, "options");
    auto ob = sub_archive(xb, "options");
    const std::string options = archive_difference(oa, ob, path + key + "/options/");
    if (!options.empty()) return options;
  }
  // state: per parameter, by position.
  auto sa = sub_archive(a, "state");
  auto sb = sub_archive(b, "state");
  std::map<std::string, std::string> ka, kb;  // position -> address
  for (const auto& k : sa.keys()) ka[na.count(k) ? na.at(k) : "unknown parameter " + k] = k;
  for (const auto& k : sb.keys()) kb[nb.count(k) ? nb.at(k) : "unknown parameter " + k] = k;
  for (const auto& [name, key] : ka) {
    if (kb.count(name) == 0) return path + "state/" + name + ": only in the first";
  }
  for (const auto& [name, key] : kb) {
    if (ka.count(name) == 0) return path + "state/" + name + ": only in the second";
  }
  for (const auto& [name, key] : ka) {
    auto xa = sub_archive(sa, key);
    auto xb = sub_archive(sb, kb.at(name));
    const std::string inner = archive_difference(xa, xb, path + "state/" + name + "/");
    if (!inner.empty()) return inner;
  }
  c10::IValue va, vb;
  a.read("pytorch_version", va);
  b.read("pytorch_version", vb);
  const std::string version = value_difference(va, vb);
  return version.empty() ? "" : path + "pytorch_version: " + version;
}

}  // namespace detail

/// The first difference between two archives, "" when they are identical. `path` prefixes the
/// key names in the message (e.g. "engine/problem.classifier/module/weight: element 3 ...").
/// A LibTorch optimizer's archive is compared with its parameters matched by position (it names
/// them by tensor addresses, which differ between runs); a byte tensor holding a nested archive
/// (the roll-back snapshot) is compared as that archive.
inline std::string archive_difference(torch::serialize::InputArchive& a,
                                      torch::serialize::InputArchive& b, const std::string& path) {
  if (detail::is_optimizer(a) && detail::is_optimizer(b)) {
    return detail::optimizer_difference(a, b, path);
  }
  std::vector<std::string> ka = a.keys();
  std::vector<std::string> kb = b.keys();
  std::sort(ka.begin(), ka.end());
  std::sort(kb.begin(), kb.end());
  for (const auto& key : ka) {
    if (!std::binary_search(kb.begin(), kb.end(), key)) return path + key + ": only in the first";
  }
  for (const auto& key : kb) {
    if (!std::binary_search(ka.begin(), ka.end(), key)) return path + key + ": only in the second";
  }
  for (const auto& key : ka) {
    c10::IValue va, vb;
    a.read(key, va);
    b.read(key, vb);
    if (va.isObject() && vb.isObject()) {
      torch::serialize::InputArchive sa, sb;
      a.read(key, sa);
      b.read(key, sb);
      const std::string inner = archive_difference(sa, sb, path + key + "/");
      if (!inner.empty()) return inner;
      continue;
    }
    if (va.isTensor() && vb.isTensor() && detail::holds_archive(va.toTensor()) &&
        detail::holds_archive(vb.toTensor())) {
      const at::Tensor ta = va.toTensor().contiguous();
      const at::Tensor tb = vb.toTensor().contiguous();
      torch::serialize::InputArchive sa, sb;
      sa.load_from(static_cast<const char*>(ta.data_ptr()), static_cast<size_t>(ta.numel()));
      sb.load_from(static_cast<const char*>(tb.data_ptr()), static_cast<size_t>(tb.numel()));
      const std::string inner = archive_difference(sa, sb, path + key + "/");
      if (!inner.empty()) return inner;
      continue;
    }
    const std::string what = detail::value_difference(va, vb);
    if (!what.empty()) return path + key + ": " + what;
  }
  return "";
}

/// `archive_difference` of two files; throws c10::Error when one cannot be read.
inline std::string state_file_difference(const std::string& a, const std::string& b) {
  torch::serialize::InputArchive first, second;
  first.load_from(a);
  second.load_from(b);
  return archive_difference(first, second);
}

}  // namespace mlo_test
