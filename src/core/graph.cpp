#include <mlo/base/error.h>
#include <mlo/core/graph.h>
#include <mlo/core/problem.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace mlo {
namespace {

using Edges = std::vector<std::pair<Problem*, Problem*>>;

// Targets of `from` in `edges`, in edge order.
std::vector<Problem*> targets(const Edges& edges, const Problem* from) {
  std::vector<Problem*> out;
  for (const auto& [a, b] : edges) {
    if (a == from) out.push_back(b);
  }
  return out;
}

// Every simple path from `from` to `to` along `edges` (including both ends).
void all_paths(const Edges& edges, Problem* from, const Problem* to, std::vector<Problem*>& path,
               std::vector<std::vector<Problem*>>& out) {
  path.push_back(from);
  if (from == to && path.size() > 1) {
    out.push_back(path);
  } else {
    for (Problem* next : targets(edges, from)) {
      if (std::find(path.begin(), path.end(), next) == path.end() || next == to) {
        all_paths(edges, next, to, path, out);
      }
    }
  }
  path.pop_back();
}

}  // namespace

void Graph::add(Problem* problem) {
  MLO_CHECK(problem != nullptr, "engine: cannot add a null problem");
  MLO_CHECK(!contains(problem), "engine: problem '", problem->name(), "' was added twice");
  for (const Problem* other : problems_) {
    MLO_CHECK(other->name() != problem->name(), "engine: duplicate problem name '", problem->name(),
              "': every problem needs a unique name");
  }
  problems_.push_back(problem);
}

void Graph::add_u2l(Problem* upper, Problem* lower) {
  MLO_CHECK(upper && lower, "engine: u2l edge with a null problem");
  u2l_.emplace_back(upper, lower);
}

void Graph::add_l2u(Problem* lower, Problem* upper) {
  MLO_CHECK(upper && lower, "engine: l2u edge with a null problem");
  l2u_.emplace_back(lower, upper);
}

bool Graph::contains(const Problem* problem) const {
  return std::find(problems_.begin(), problems_.end(), problem) != problems_.end();
}

std::string Graph::name_of(const Problem* problem) const { return problem->name(); }

void Graph::check_acyclic(const Edges& edges, const char* kind) const {
  // Depth-first search with colors; report the cycle as a chain of names.
  std::map<const Problem*, int> color;  // 0 new, 1 on stack, 2 done
  std::vector<const Problem*> stack;
  std::function<void(const Problem*)> visit = [&](const Problem* node) {
    color[node] = 1;
    stack.push_back(node);
    for (const Problem* next : targets(edges, node)) {
      if (color[next] == 1) {
        std::string cycle;
        auto start = std::find(stack.begin(), stack.end(), next);
        for (auto it = start; it != stack.end(); ++it) cycle += name_of(*it) + " -> ";
        cycle += name_of(next);
        MLO_CHECK(false, "engine: the ", kind, " edges form a cycle: ", cycle);
      }
      if (color[next] == 0) visit(next);
    }
    stack.pop_back();
    color[node] = 2;
  };
  for (const Problem* problem : problems_) {
    if (color[problem] == 0) visit(problem);
  }
}

void Graph::validate() const {
  MLO_CHECK(!problems_.empty(), "engine: no problems were added");
  auto check_edges = [&](const Edges& edges, const char* kind) {
    std::set<std::pair<Problem*, Problem*>> seen;
    for (const auto& [a, b] : edges) {
      for (const Problem* end : {a, b}) {
        MLO_CHECK(contains(end), "engine: ", kind, " edge '", a->name(), "' -> '", b->name(),
                  "' names problem '", end->name(), "', which was not added to the engine");
      }
      MLO_CHECK(a != b, "engine: ", kind, " edge from problem '", a->name(), "' to itself");
      MLO_CHECK(seen.insert({a, b}).second, "engine: ", kind, " edge '", a->name(), "' -> '",
                b->name(), "' is given twice");
    }
  };
  check_edges(u2l_, "u2l");
  check_edges(l2u_, "l2u");
  check_acyclic(l2u_, "l2u");
  check_acyclic(u2l_, "u2l");

  for (const auto& [upper, lower] : u2l_) {
    std::vector<Problem*> path;
    std::vector<std::vector<Problem*>> found;
    all_paths(l2u_, lower, upper, path, found);
    MLO_CHECK(!found.empty(), "engine: u2l edge '", upper->name(), "' -> '", lower->name(),
              "' has no l2u path from '", lower->name(), "' back up to '", upper->name(), "', so '",
              upper->name(), "' would never receive a hypergradient; add l2u('", lower->name(),
              "', '", upper->name(), "') or a chain of l2u edges");
  }

  if (problems_.size() > 1) {
    for (const Problem* problem : problems_) {
      auto touches = [&](const Edges& edges) {
        return std::any_of(edges.begin(), edges.end(), [&](const auto& edge) {
          return edge.first == problem || edge.second == problem;
        });
      };
      MLO_CHECK(touches(u2l_) || touches(l2u_), "engine: problem '", problem->name(),
                "' is in no dependency edge; link it to the others or remove it");
    }
  }
}

std::vector<Problem*> Graph::leaves() const {
  std::vector<Problem*> out;
  for (Problem* problem : problems_) {
    if (children(problem).empty()) out.push_back(problem);
  }
  return out;
}

std::vector<Problem*> Graph::parents(const Problem* problem) const {
  return targets(l2u_, problem);
}

std::vector<Problem*> Graph::children(const Problem* problem) const {
  std::vector<Problem*> out;
  for (const auto& [lower, upper] : l2u_) {
    if (upper == problem) out.push_back(lower);
  }
  return out;
}

std::vector<Problem*> Graph::lowers(const Problem* problem) const {
  std::vector<Problem*> out;
  for (const auto& [upper, lower] : u2l_) {
    if (upper == problem) out.push_back(lower);
  }
  return out;
}

std::vector<Problem*> Graph::uppers(const Problem* problem) const {
  std::vector<Problem*> out;
  for (const auto& [upper, lower] : u2l_) {
    if (lower == problem) out.push_back(upper);
  }
  return out;
}

std::vector<std::vector<Problem*>> Graph::paths(const Problem* problem) const {
  std::vector<std::vector<Problem*>> out;
  for (const auto& [upper, lower] : u2l_) {
    if (upper != problem) continue;
    std::vector<Problem*> path;
    std::vector<std::vector<Problem*>> found;
    all_paths(l2u_, lower, upper, path, found);
    for (auto& p : found) {
      // [lower, ..., upper] -> [upper, ..., lower, upper]
      std::reverse(p.begin(), p.end());
      p.push_back(upper);
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace mlo
