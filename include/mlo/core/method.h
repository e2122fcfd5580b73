#pragma once
/// \file
/// Hypergradient methods as the engine sees them: the `Hypergradient` interface, the options type
/// every method has (`MethodOptions`), and the registry of methods by name.
///
/// A method turns a vector v over a lower problem's parameters w (v = dL_upper/dw) into a vector
/// over the parameters lambda of the problem one step further along a hypergradient path:
///
///   exact implicit hypergradient = -(d^2 L_curr / dlambda dw) H^{-1} v,   H = d^2 L_curr / dw^2.
///
/// A method is one options type plus one `Hypergradient` class, registered by name:
///
/// ```
/// struct FixedPointOptions : mlo::MethodOptionsFor<FixedPointOptions> {
///   static constexpr const char* kName = "fixed_point";
///   TORCH_ARG(int64_t, iterations) = 5;
///  public:  // (TORCH_ARG leaves the struct in a private section)
///   void visit(mlo::Fields& f) override { f("iterations", iterations(), mlo::at_least(1)); }
///   std::unique_ptr<mlo::Hypergradient> make() const override;   // new FixedPoint(*this)
/// };
/// MLO_REGISTER_METHOD(FixedPointOptions);
/// ```
///
/// after which `ProblemConfig().method(FixedPointOptions())` selects it in code and
/// `method: fixed_point` with a `fixed_point: {iterations: 10}` section selects it in YAML. The
/// built-in methods live in the hypergrad area (darts, neumann, cg, sama, unrolled); the vector
/// helpers they use are public (`mlo/hypergrad/vector.h`).

#include <mlo/base/fields.h>
#include <mlo/base/registry.h>
#include <mlo/core/metrics.h>
#include <mlo/dist/strategy.h>

#include <ATen/core/Tensor.h>
#include <torch/serialize/archive.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlo {

class Level;
class Problem;

/// What a method is asked to serve, at engine initialization: the lower problem, its place in the
/// graph and the engine's strategy. `Hypergradient::check` refuses what it cannot serve exactly.
struct MethodContext {
  /// The lower problem whose vectors the method carries to its parents.
  const Problem& problem;
  /// Problems directly above it (`l2u` targets); 0 for a top-level problem.
  std::size_t parents = 0;
  /// Whether problems below it send vectors through it (a middle level).
  bool middle = false;
  /// The engine's strategy, and whether this level takes part in it (`data_parallel`).
  dist::Strategy strategy = dist::Strategy::kDefault;
  /// Whether this level takes part in the strategy (`ProblemConfig::data_parallel`).
  bool data_parallel = false;
  /// Whether this level's parameters will be sharded (zero3 on a data-parallel `nn::Chain`): its
  /// trainable tensors are then this rank's shards, each with its own optimizer state.
  bool shards_parameters = false;
  /// The problems one hop further along its hypergradient paths (the `prev` that `apply`
  /// receives, each once), whose trainable parameters are lambda to the method.
  std::vector<const Problem*> parent_problems;
};

/// One hypergradient method. It sees the problems of a hop as the engine runs them (`Level`,
/// core/level.h: their trainable tensors, their latest batches, their loss re-evaluated, the
/// averaging of data parallelism). Implementations must leave `curr`'s parameters as they
/// found them.
class Hypergradient {
 public:
  virtual ~Hypergradient() = default;
  /// `v`: one tensor per trainable parameter of `curr`. Returns one tensor per trainable
  /// parameter of `prev` (zeros where `curr`'s loss does not depend on it).
  virtual std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, Level& curr,
                                        Level& prev) = 0;

  /// Refuses, with `mlo::Error`, what the method cannot serve exactly: an optimizer, a graph
  /// position (two parents, a middle level), a strategy (data parallel, sharded optimizer
  /// state). Called once at engine initialization. The default accepts everything.
  virtual void check(const MethodContext& context) const { (void)context; }
  /// Whether the method differentiates the lower loss twice (Hessian- or Jacobian-vector
  /// products of its gradient). The engine refuses such a method where the problem or a parent
  /// shards its parameters (zero3): a unit's all-gather is differentiated once only.
  virtual bool second_order() const { return false; }
  /// Whether the method differentiates `curr`'s loss with respect to `prev`'s parameters, so
  /// that they must reach that loss (the engine checks it at the first steps and refuses an edge
  /// that does not hold). Every built-in method does; one that links the levels otherwise (a
  /// first-order MAML step, where the lower problem starts from the upper's parameters and v
  /// passes unchanged) returns false.
  virtual bool differentiates_loss() const { return true; }
  /// Whether the result differentiates the lower problem's steps from where its unroll started
  /// (`unrolled`, `forward`), without following how that start depends on the upper problems'
  /// parameters. That is exact where it does not; a lower problem that restarts from them (the
  /// few-shot `Learner`'s phi <- theta) would lose the path through its start, and refuses such
  /// a method. Methods that assume a fixed point (cg, neumann, darts, sama) do not depend on the
  /// start: false, the default.
  virtual bool differentiates_unroll() const { return false; }
  /// What the latest `apply` reports of itself, under names without a prefix ("iterations",
  /// "negative_curvature"): the engine records them among the metrics of the upper problem
  /// whose step called `apply`, as "hypergrad/<curr's name>/<name>" (docs/hypergradients.md,
  /// "Diagnostics"). The default reports nothing.
  virtual Metrics diagnostics() const { return {}; }

  // ---- What the lower problem `curr` tells its method while it steps (defaults: nothing). ----

  /// An unroll of `curr` starts (after `on_inner_loop_start` and the roll-back snapshot).
  virtual void on_unroll_start(Level& curr) { (void)curr; }
  /// `curr` is about to take an optimizer step; its parameters' `grad()` hold the gradients
  /// the step will use (after unscaling, `grad_callback` and clipping).
  virtual void before_optimizer_step(Level& curr) { (void)curr; }

  // ---- State that later hypergradients read (part of the engine's resumable state). ----------

  /// Writes what the method recorded from `curr`'s steps and will read at its next `apply`.
  virtual void save(torch::serialize::OutputArchive& archive) const { (void)archive; }
  /// Restores what `save` wrote; refuses (`mlo::Error`) a state it cannot resume from.
  virtual void load(torch::serialize::InputArchive& archive) { (void)archive; }
};

/// A cross-field rule an options value breaks: the key (inside the method's section, e.g.
/// "budget_bytes") and what is wrong.
struct OptionError {
  /// The key inside the method's section ("budget_bytes").
  std::string key;
  /// What is wrong with it.
  std::string what;
};

/// How a method re-evaluates the lower loss inside `apply`, for the problems and the memory
/// estimates that can use it. The defaults claim nothing.
struct Reevaluation {
  /// The re-evaluations at perturbed lower parameters w are differentiated only with respect to
  /// the upper problems' parameters (a finite difference along v, as darts and sama take), so the
  /// lower problem's forward needs no graph through w.
  bool upper_gradients_only = false;
  /// Copies of w the method holds while it re-evaluates (darts restoring w from a copy: 1).
  int weight_copies = 0;
};

/// The options of one hypergradient method: its name, its YAML keys, its rules, and the method
/// it builds. Derive from `MethodOptionsFor<YourOptions>` (it provides `name` and `clone` from a
/// `static constexpr const char* kName`).
class MethodOptions {
 public:
  virtual ~MethodOptions() = default;
  /// The name configs select it by ("darts").
  virtual std::string name() const = 0;
  /// A copy (configurations are values).
  virtual std::shared_ptr<MethodOptions> clone() const = 0;
  /// Describes the keys of the method's YAML section (`<name>: {...}` inside a problem), with
  /// the checks of single values.
  virtual void visit(Fields& fields) { (void)fields; }
  /// Rules across keys; the first broken one, or nothing.
  virtual std::optional<OptionError> validate() const { return std::nullopt; }
  /// How the method built from these options re-evaluates the lower loss.
  virtual Reevaluation reevaluation() const { return {}; }
  /// The method these options configure; throws `mlo::Error` on a bad value.
  virtual std::unique_ptr<Hypergradient> make() const = 0;
};

/// Throws `mlo::Error` "<method>.<key>: <what>" for the first key of `options` whose check fails
/// (the checks its `visit` declares, as the YAML reader applies them) or the first rule across
/// keys it breaks (`validate`): the one place a method's options are checked, whether they came
/// from YAML or from code. Methods call it in their constructors.
void check_options(const MethodOptions& options);

/// `name` and `clone` for an options type `Derived` with a `static constexpr const char* kName`.
template <typename Derived>
class MethodOptionsFor : public MethodOptions {
 public:
  /// `Derived::kName`.
  std::string name() const override { return Derived::kName; }
  /// A copy of this object as a `Derived`.
  std::shared_ptr<MethodOptions> clone() const override {
    return std::make_shared<Derived>(static_cast<const Derived&>(*this));
  }
};

/// The method configs get when they select none.
inline constexpr const char* kDefaultMethod = "darts";

/// Registers the default options of the method `name`, defined at `where` ("file.cpp:12", for
/// messages); returns true (for static registration). The registry's rules hold
/// (base/registry.h): the same options type registered again keeps the first registration;
/// options of another type under a taken name make the name an error, raised where it is used
/// and naming both registrations. Throws `mlo::Error` for an empty name or factory, or a factory
/// whose options are named otherwise.
bool register_method(const std::string& name,
                     std::function<std::shared_ptr<MethodOptions>()> defaults,
                     const std::string& where = "");
/// The default options of the method registered as `name`; throws `mlo::Error` listing the
/// registered names when there is none.
std::shared_ptr<MethodOptions> method_options(const std::string& name);
/// The default options of the method registered as `name`, kept for the rest of the program
/// (what `ProblemConfig::method()` reads when no method was selected); throws as
/// `method_options` does.
const MethodOptions& registered_defaults(const std::string& name);
/// The registered methods' names, sorted.
std::vector<std::string> method_names();

namespace detail {
/// `register_method` for an options type `Options` (default-constructible, with `kName`).
template <typename Options>
bool register_method_type(const char* file, int line) {
  return register_method(
      Options::kName,
      []() -> std::shared_ptr<MethodOptions> { return std::make_shared<Options>(); },
      registered_at(file, line));
}
}  // namespace detail

}  // namespace mlo

/// Registers the method options type `Options` (default-constructible, with `kName`) at load
/// time, at namespace scope in a source file: `method: <kName>` in a problem selects it.
#define MLO_REGISTER_METHOD(Options) \
  MLO_REGISTRATION(::mlo::detail::register_method_type<Options>(__FILE__, __LINE__))
