#pragma once
// The reweighting experiment's weighting schemes by name (`reweighting.method` in YAML), one
// file each under problems/reweighting/schemes/. A scheme is an options type (its name, its own
// keys in its section of `reweighting:`, whether it learns with a weight net in a `reweighter`
// problem) that sets up the classifier's weighting (a `Weighting`, reweighting.h: the loss);
// registered like a hypergradient method, under the registry's rule for names
// (base/registry.h), and configured like one:
// `reweighting: {method: class_mwn, class_mwn: {weight_floor: 0.1}}` (other schemes' sections
// are read and validated, and used only when `method` selects them).
//
//   struct MyWeighting : mlo::problems::reweighting::Weighting {
//     double strength = 1.0;
//     at::Tensor loss(Classifier& c, const Batch& batch) const override { ... }
//   };
//   struct MyScheme : mlo::problems::reweighting::SchemeFor<MyScheme> {
//     static constexpr const char* kName = "mine";
//     double strength = 1.0;
//     void visit(mlo::Fields& f) override { f("strength", strength, mlo::positive()); }
//     WeightNet weight_net() const override { return WeightNet::kNone; }
//     void apply(const SchemeContext& c) const override {
//       MyWeighting w;
//       w.strength = strength;
//       c.classifier.weighting(w);
//     }
//   };
//   MLO_REGISTER_WEIGHTING(MyScheme);   // reweighting: {method: mine, mine: {strength: 2}}
//
// (schemes/focal.cpp is one; examples/self_paced_weighting registers one from a program.)

#include "problems/reweighting/reweighting.h"

#include <mlo/base/fields.h>
#include <mlo/base/registry.h>
#include <mlo/core/batch.h>
#include <mlo/nn/registry.h>

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

namespace mlo {
namespace problems {
namespace reweighting {

/// What a scheme is given to set the classifier up.
struct SchemeContext {
  /// The classifier (the lower problem).
  Classifier& classifier;
  /// The weight net's problem, or null when the configuration has none.
  Reweighter* reweighter = nullptr;
  /// Training samples per class after the long-tailed split, by their given labels (with label
  /// noise, the noisy ones: what a method without clean labels knows).
  std::vector<int64_t> train_counts;
  /// Batches of the balanced meta set, for a scheme that draws them itself (l2rw).
  std::function<Batch()> meta;
};

/// Whether a scheme learns with a weight net in a `reweighter` problem.
enum class WeightNet {
  kNone,      ///< it has none: a `reweighter` problem is an error
  kOptional,  ///< it uses one when there is one (without it: plain cross-entropy)
  kRequired,  ///< it needs one
};

/// One weighting scheme (see the file comment). Derive from `SchemeFor<YourScheme>`.
class Scheme {
 public:
  virtual ~Scheme() = default;
  /// The name `reweighting.method` selects it by.
  virtual std::string name() const = 0;
  /// A copy (configurations are values).
  virtual std::shared_ptr<Scheme> clone() const = 0;
  /// A line for logs ("class_mwn (loss and class frequency -> weight net)").
  virtual std::string describe() const { return name(); }
  /// Its keys (its section of `reweighting:`), with their checks.
  virtual void visit(Fields& fields) { (void)fields; }
  /// Whether it learns with a weight net in a `reweighter` problem.
  virtual WeightNet weight_net() const = 0;
  /// The reweighter's module for `model` (`problems.reweighter.model`) and the training counts;
  /// by default the model itself.
  virtual std::shared_ptr<torch::nn::Module> weight_net_module(
      const nn::ModelConfig& model, const std::vector<int64_t>& train_counts) const;
  /// Whether the reweighter's module is built from `problems.reweighter.model` (false: the
  /// scheme builds a module of its own, and model keys in the YAML are refused).
  virtual bool reads_model() const { return true; }
  /// Sets the classifier's weighting (`Classifier::weighting`).
  virtual void apply(const SchemeContext& context) const = 0;
};

/// `name` and `clone` for a scheme type `Derived` with a `static constexpr const char* kName`.
template <typename Derived>
class SchemeFor : public Scheme {
 public:
  /// `Derived::kName`.
  std::string name() const override { return Derived::kName; }
  /// A copy of this object as a `Derived`.
  std::shared_ptr<Scheme> clone() const override {
    return std::make_shared<Derived>(static_cast<const Derived&>(*this));
  }
};

/// Registers the scheme `name` defined by the type `type`, whose defaults `defaults` makes.
bool register_scheme(const std::string& name, std::type_index type,
                     std::function<std::shared_ptr<Scheme>()> defaults, const std::string& where);
/// The registered schemes' names, sorted.
std::vector<std::string> scheme_names();
/// The defaults of scheme `name`; throws `mlo::Error` listing the registered names for an
/// unknown one.
std::shared_ptr<Scheme> make_scheme(const std::string& name);

/// The `reweighting:` section: `method` (a registered scheme) and a section per scheme with its
/// own keys. Copies share nothing.
class SchemeConfig {
 public:
  /// The registered scheme `name` with its defaults.
  explicit SchemeConfig(const std::string& name = "mwn");
  SchemeConfig(const SchemeConfig& other);
  SchemeConfig& operator=(const SchemeConfig& other);
  /// The selected scheme.
  const Scheme& scheme() const { return *scheme_; }
  /// The selected scheme as `T`, or null when another is selected.
  template <typename T>
  const T* scheme_as() const {
    return dynamic_cast<const T*>(scheme_.get());
  }
  /// Describes `method`, the selected scheme's section, and every other scheme's as an
  /// alternative (read and validated, not kept).
  void visit(Fields& fields);

 private:
  std::shared_ptr<Scheme> scheme_;
};

namespace detail {
/// `register_scheme` for a scheme type `T` (default-constructible, with `kName`).
template <typename T>
bool register_scheme_type(const char* file, int line) {
  return register_scheme(
      T::kName, std::type_index(typeid(T)),
      []() -> std::shared_ptr<Scheme> { return std::make_shared<T>(); },
      registered_at(file, line));
}
}  // namespace detail

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo

/// Registers the weighting scheme `T` (default-constructible, with `kName`) at load time, at
/// namespace scope in a source file: `reweighting.method: <kName>` selects it.
#define MLO_REGISTER_WEIGHTING(T) \
  MLO_REGISTRATION(                \
      ::mlo::problems::reweighting::detail::register_scheme_type<T>(__FILE__, __LINE__))
