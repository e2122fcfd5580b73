#pragma once
/// \file
/// Second-order products in forward mode: the JVP routes of darts, sama, neumann and cg.
///
/// LibTorch's forward-mode AD carries a tangent with every tensor of a dual level. Setting the
/// tangent of each lower parameter w to a direction u and evaluating the lower loss L gives, on
/// every intermediate tensor, its directional derivative along u. Two products follow:
///
/// - **the mixed product** `d/dlambda (dL/dw . u)`, which darts needs (`forward_mixed`). When the
///   lower problem declares a separable re-evaluation (`Problem::separable_reevaluation`), L is
///   sum_i c_i(lambda) l_i(w) and the tangent of L is sum_i c_i dl_i: one forward pass through
///   the lower model in forward mode gives every dl_i exactly, and one backward pass through the
///   coefficients alone gives the product. Otherwise the product is taken forward-over-reverse:
///   the tangent of dL/dlambda.
/// - **the Hessian-vector product** `H u = d/dw (dL/dw . u)`, forward-over-reverse: the tangent
///   of dL/dw (`forward_hvp`). No graph of the first backward is kept for a second one.
///
/// Forward-over-reverse needs a forward-mode formula for every backward operator the loss
/// reaches. LibTorch has none for some (`nll_loss_backward`, `_log_softmax_backward_data`,
/// `native_batch_norm_backward`, in 1.13 and in 2.x alike); the products then throw
/// `ForwardModeUnsupported`, naming the operator and the LibTorch version (mlo's models and
/// `Chain`s run batch norm through `nn::batch_norm_forward`, which avoids the last). Forward
/// mode alone (the separable route) needs formulas for the forward operators only, which
/// LibTorch has for convolutions, batch norm, pooling and the cross-entropy.

#include <mlo/base/enum_names.h>
#include <mlo/base/error.h>
#include <mlo/hypergrad/vector.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace mlo {

/// How darts and sama take the mixed product `(d^2 L / dlambda dw) u` (u = v for darts, the
/// preconditioned J v for sama).
enum class MixedMode {
  kFiniteDifference,  ///< a central difference at w +/- eps u (approximate, O(eps^2))
  kJvp,               ///< exact, in forward mode (`forward_mixed`)
  kAuto,              ///< jvp where LibTorch can, else the finite difference (logged once)
};

/// The names of `MixedMode` in configs and logs: "finite_difference", "jvp", "auto".
template <>
struct EnumNames<MixedMode> {
  /// What the values are, for errors ("unknown mixed-product mode 'x'").
  static constexpr const char* kWhat = "mixed-product mode";
  /// Each value with its name, in declaration order.
  static constexpr std::pair<MixedMode, const char*> kTable[] = {
      {MixedMode::kFiniteDifference, "finite_difference"}, {MixedMode::kJvp, "jvp"},
      {MixedMode::kAuto, "auto"}};
};

/// How neumann and cg take their Hessian-vector products.
enum class HvpMode {
  kDoubleBackward,  ///< reverse-over-reverse: one graph of dL/dw, a backward through it per product
  kJvp,             ///< forward-over-reverse: a forward and a backward in forward mode per product
  kAuto,            ///< jvp where LibTorch can, else double_backward (logged once per level)
};

/// The names of `HvpMode` in configs and logs: "double_backward", "jvp", "auto".
template <>
struct EnumNames<HvpMode> {
  /// What the values are, for errors ("unknown Hessian-vector product mode 'x'").
  static constexpr const char* kWhat = "Hessian-vector product mode";
  /// Each value with its name, in declaration order.
  static constexpr std::pair<HvpMode, const char*> kTable[] = {
      {HvpMode::kDoubleBackward, "double_backward"}, {HvpMode::kJvp, "jvp"},
      {HvpMode::kAuto, "auto"}};
};

namespace hypergrad {

/// Thrown when forward mode cannot serve a level: LibTorch has no forward-mode formula for an
/// operator the loss reaches (or fails otherwise in forward mode), or the level shards its
/// parameters. The message names the method, the problem, the operator (or LibTorch's message)
/// and the LibTorch version.
class ForwardModeUnsupported : public Error {
 public:
  using Error::Error;
};

/// A forward-mode (dual) level of LibTorch's autograd, entered for the object's lifetime. Exiting
/// it drops every tangent set or computed in it. One level at a time: a level already entered
/// (elsewhere in the process) is an `mlo::Error`.
class DualLevel {
 public:
  DualLevel();
  ~DualLevel();
  DualLevel(const DualLevel&) = delete;
  DualLevel& operator=(const DualLevel&) = delete;
  /// The level's index (the tangents' key).
  std::uint64_t index() const { return index_; }
  /// Sets the tangent of each tensor of `primals` to the matching tensor of `tangents` (same
  /// shapes); they stay set until the level exits.
  void set_tangents(const TensorList& primals, const TensorList& tangents) const;
  /// The tangent of `t` at this level, or an undefined tensor when it has none.
  at::Tensor tangent(const at::Tensor& t) const;

 private:
  std::uint64_t index_;
};

/// Runs `body`, forward-mode work on `curr`'s loss that reaches `route` ("backward pass of the
/// loss"); a LibTorch error on the way becomes `ForwardModeUnsupported`, naming `method`, the
/// problem, the LibTorch version, where LibTorch lacks a forward-mode formula the operator, and
/// `remedy` (what to choose instead). Out-of-memory errors pass through unchanged.
void in_forward_mode(const char* method, const Level& curr, const char* route,
                     const char* remedy, const std::function<void()>& body);

/// Checks that forward mode can serve `curr` (its parameters are not sharded); throws
/// `ForwardModeUnsupported` naming `method` otherwise.
void check_forward_mode(const Level& curr, const char* method);

/// The mixed product `d/dlambda (dL/dw . u)` (detached, zeros where L does not depend on an
/// input), L = `curr`'s loss over its latest window, w = `curr.parameters()`, taken one
/// micro-batch at a time in forward mode (see the file comment for the two routes). Throws
/// `ForwardModeUnsupported` when LibTorch lacks a formula the route needs.
TensorList forward_mixed(Level& curr, const TensorList& lambda, const TensorList& u,
                         const char* method);

/// The Hessian-vector product `H u` of `curr`'s loss over its latest window (detached), by
/// forward-over-reverse one micro-batch at a time; under data parallelism the mean of the
/// ranks' products. Throws `ForwardModeUnsupported` when LibTorch lacks a formula it needs.
TensorList forward_hvp(Level& curr, const TensorList& u, const char* method);

/// Where a method's forward-mode route stands: taken or given up (under auto), and logged.
struct ForwardRoute {
  bool fallen_back = false;  ///< forward mode failed once under auto: the other route from now on
  bool logged = false;       ///< the route was logged
};

/// `-(d^2 L / dlambda dw) u` for darts and sama (`method`), L = `curr`'s loss over its latest
/// window, lambda = `prev`'s parameters: under `kFiniteDifference` (or once `route` fell back)
/// by `difference()`; else by `forward_mixed`, logging the route once. Under `kAuto` the first
/// failure of forward mode (a missing formula, sharded parameters on either level) falls back
/// for good, with one warning; under `kJvp` it throws `ForwardModeUnsupported`.
TensorList negative_mixed(Level& curr, Level& prev, const TensorList& u, MixedMode mode,
                          const char* method, ForwardRoute& route,
                          const std::function<TensorList()>& difference);

/// A lower problem's second-order products by the route a method's `HvpMode` selects:
/// reverse-over-reverse (`LowerGradient`, whose graph of dL/dw serves every product) or forward
/// mode (`forward_hvp`, `forward_mixed`). Under `kAuto` the first product forward mode cannot
/// take switches this and every later set of products of the same method to reverse mode,
/// with one warning; `kJvp` throws `ForwardModeUnsupported` instead.
class SecondOrder {
 public:
  /// The route the method took so far (fallen back: reverse mode).
  using Route = ForwardRoute;
  /// For `curr`'s latest window; `route` is the method's (it outlives this object).
  SecondOrder(Level& curr, HvpMode mode, const char* method, Route& route);
  /// H u (detached), averaged over the ranks under data parallelism.
  TensorList hvp(const TensorList& u);
  /// d(dL/dw . x)/dlambda (detached); call it last (reverse mode frees its graph).
  TensorList mixed(const TensorList& x, const TensorList& lambda);

 private:
  template <typename Forward, typename Reverse>
  TensorList take(Forward&& forward, Reverse&& reverse);
  void use_reverse();

  Level* curr_;
  HvpMode mode_;
  const char* method_;
  Route* route_;
  std::unique_ptr<LowerGradient> reverse_;
};

}  // namespace hypergrad
}  // namespace mlo
