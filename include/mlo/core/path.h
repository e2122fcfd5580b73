#pragma once
/// \file
/// `mlo::Path`: how an upper problem's vector travels down the dependency graph and
/// back up to it. For a `u2l` edge U -> L, each `l2u` path `[U, P1, ..., L, U]` is one Path:
/// U's loss reads P1's parameters directly, and every hop `curr -> prev` applies `curr`'s method
///
///   v <- -(d^2 L_curr / d w_prev d w_curr) H_curr^{-1} v,
///
/// so the vector v = dL_U/dw_P1 ends as a vector over U's own parameters. U's gradient is its
/// direct gradient plus the sum of `propagate` over all its paths (docs/architecture.md).

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace mlo {

class Hypergradient;
class Level;

/// One hop of a path: `method` (the one `curr`'s config selects) turns a vector over `curr`'s
/// trainable parameters into one over `prev`'s.
struct Hop {
  /// The lower problem of the hop (its level), whose vector the method receives.
  Level* curr = nullptr;
  /// The problem the hop leads to, over whose trainable parameters the method returns a vector.
  Level* prev = nullptr;
  /// `curr`'s hypergradient method (not owned).
  Hypergradient* method = nullptr;
  /// Whether the method differentiates its re-evaluations of `curr`'s loss with respect to
  /// `prev`'s parameters only (`Reevaluation::upper_gradients_only` of its options): `propagate`
  /// then has `curr`'s own parameters take no gradient in them, so `curr`'s forward keeps no
  /// graph through them.
  bool upper_gradients_only = false;
};

/// A hypergradient path `[U, P1, ..., L, U]`, as its hops `P1 -> P2`, ..., `L -> U`.
///
/// ```
/// Path path({{&inner, &outer, method.get()}});   // levels: the bilevel path [outer, inner, outer]
/// auto hypergradient = path.propagate(v);          // v = dL_outer/dw_inner
/// ```
class Path {
 public:
  /// `hops` must be non-empty, chained (`hops[i].prev == hops[i + 1].curr`) and each with a method.
  explicit Path(std::vector<Hop> hops);

  /// P1: the problem whose parameters the upper loss reads directly (where `v` lives).
  Level& first() const { return *hops_.front().curr; }
  /// U: the problem the path returns to (whose parameters the result is over).
  Level& last() const { return *hops_.back().prev; }
  /// The hops, from `first()` to `last()`.
  const std::vector<Hop>& hops() const { return hops_; }

  /// Sends `v` (one tensor per trainable parameter of `first()`) along every hop; returns one
  /// tensor per trainable parameter of `last()`.
  std::vector<at::Tensor> propagate(std::vector<at::Tensor> v) const;

  /// `"U -> P1 -> ... -> L -> U"`, for logs and errors.
  std::string describe() const;

 private:
  std::vector<Hop> hops_;
};

}  // namespace mlo
