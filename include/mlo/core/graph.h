#pragma once
/// \file
/// The dependency graph between problems, its validation and its derived structure.
///
/// Two kinds of edges, as in Betty:
/// - `u2l` upper -> lower: the upper problem's parameters enter the lower problem's loss;
/// - `l2u` lower -> upper: the lower problem's parameters enter the upper problem's loss.
/// `l2u` decides the schedule (a problem steps after the problems below it have unrolled);
/// a `u2l` edge U -> L asks for U's hypergradient through every `l2u` path from L up to U.

#include <string>
#include <utility>
#include <vector>

namespace mlo {

class Problem;

/// A validated dependency graph over problems, identified by address, named for errors.
class Graph {
 public:
  /// Adds a problem; its name must be unique.
  void add(Problem* problem);
  /// Upper's parameters enter lower's loss.
  void add_u2l(Problem* upper, Problem* lower);
  /// Lower's parameters enter upper's loss.
  void add_l2u(Problem* lower, Problem* upper);

  /// Checks the graph and throws `mlo::Error` naming the offending problems: an edge to a
  /// problem never added, a self edge, a repeated edge, a cycle of `l2u` (or of `u2l`) edges,
  /// a `u2l` edge with no `l2u` path back up, a problem in no edge (when there are several).
  void validate() const;

  /// The added problems, in the order they were added.
  const std::vector<Problem*>& problems() const { return problems_; }
  /// Problems with no problem below them (no incoming `l2u` edge): the engine steps these.
  std::vector<Problem*> leaves() const;
  /// Problems whose loss depends on `problem`'s parameters (`l2u` targets), in edge order.
  std::vector<Problem*> parents(const Problem* problem) const;
  /// Problems whose parameters enter `problem`'s loss (`l2u` sources), in edge order.
  std::vector<Problem*> children(const Problem* problem) const;
  /// Problems whose loss `problem`'s parameters enter (`u2l` targets), in edge order.
  std::vector<Problem*> lowers(const Problem* problem) const;
  /// Problems whose parameters enter `problem`'s loss through a `u2l` edge (`u2l` sources).
  std::vector<Problem*> uppers(const Problem* problem) const;
  /// Hypergradient paths of `problem`: for each `u2l` edge (problem -> L), every `l2u` path
  /// L -> ... -> problem, written top-down and closed: [problem, ..., L, problem].
  std::vector<std::vector<Problem*>> paths(const Problem* problem) const;

 private:
  bool contains(const Problem* problem) const;
  std::string name_of(const Problem* problem) const;
  void check_acyclic(const std::vector<std::pair<Problem*, Problem*>>& edges,
                     const char* kind) const;

  std::vector<Problem*> problems_;
  std::vector<std::pair<Problem*, Problem*>> u2l_;  // (upper, lower)
  std::vector<std::pair<Problem*, Problem*>> l2u_;  // (lower, upper)
};

}  // namespace mlo
