// Validation of the dependency graph: every malformed graph fails at initialization with a
// message that names the problems involved.
#include "support/toy.h"

#include <catch2/catch.hpp>

namespace graph_test {

using Catch::Matchers::Contains;
using mlo::ProblemConfig;

namespace {

std::shared_ptr<mlo_test::Toy> make(const std::string& name) {
  return mlo_test::toy(name, ProblemConfig(), nullptr);
}

}  // namespace

TEST_CASE("Graph: a duplicate problem name is refused", "[core][graph]") {
  mlo::Engine engine;
  engine.add(make("inner"));
  REQUIRE_THROWS_WITH(engine.add(make("inner")), Contains("duplicate problem name 'inner'"));
}

TEST_CASE("Graph: an edge to a problem never added is refused", "[core][graph]") {
  auto outer = make("outer");
  auto inner = make("inner");
  auto stranger = make("stranger");
  mlo::Engine engine;
  engine.add(outer).add(inner).link(outer, inner).u2l(outer, stranger);
  REQUIRE_THROWS_WITH(engine.initialize(),
                      Contains("names problem 'stranger', which was not added"));
}

TEST_CASE("Graph: an l2u cycle is refused and shown", "[core][graph]") {
  auto a = make("a");
  auto b = make("b");
  auto c = make("c");
  mlo::Engine engine;
  engine.add(a).add(b).add(c).l2u(a, b).l2u(b, c).l2u(c, a);
  REQUIRE_THROWS_WITH(engine.initialize(), Contains("l2u edges form a cycle: a -> b -> c -> a"));
}

TEST_CASE("Graph: a u2l edge without an l2u path back is refused", "[core][graph]") {
  auto outer = make("outer");
  auto inner = make("inner");
  mlo::Engine engine;
  engine.add(outer).add(inner).u2l(outer, inner);
  REQUIRE_THROWS_WITH(engine.initialize(),
                      Contains("u2l edge 'outer' -> 'inner' has no l2u path from 'inner' back "
                               "up to 'outer'"));
}

TEST_CASE("Graph: a problem in no edge is refused", "[core][graph]") {
  auto outer = make("outer");
  auto inner = make("inner");
  auto lonely = make("lonely");
  mlo::Engine engine;
  engine.add(outer).add(inner).add(lonely).link(outer, inner);
  REQUIRE_THROWS_WITH(engine.initialize(), Contains("problem 'lonely' is in no dependency edge"));
}

TEST_CASE("Graph: self edges and repeated edges are refused", "[core][graph]") {
  auto a = make("a");
  auto b = make("b");
  {
    mlo::Engine engine;
    engine.add(a).add(b).link(a, b).l2u(a, a);
    REQUIRE_THROWS_WITH(engine.initialize(), Contains("l2u edge from problem 'a' to itself"));
  }
  {
    mlo::Engine engine;
    engine.add(a).add(b).link(a, b).u2l(a, b);
    REQUIRE_THROWS_WITH(engine.initialize(), Contains("u2l edge 'a' -> 'b' is given twice"));
  }
}

TEST_CASE("Graph: an empty engine is refused", "[core][graph]") {
  mlo::Engine engine;
  REQUIRE_THROWS_WITH(engine.initialize(), Contains("no problems were added"));
}

TEST_CASE("Graph: paths follow l2u from each u2l lower back up, closed at the upper",
          "[core][graph]") {
  // top's parameters enter low's loss directly; low feeds mid, mid feeds top.
  auto top = make("top");
  auto mid = make("mid");
  auto low = make("low");
  mlo::Engine engine;
  engine.add(top).add(mid).add(low);
  engine.link(top, mid).link(mid, low).u2l(top, low);
  engine.initialize();
  const auto paths = engine.graph().paths(top.get());
  REQUIRE(paths.size() == 2);
  CHECK(paths[0] == std::vector<mlo::Problem*>{top.get(), mid.get(), top.get()});
  CHECK(paths[1] == std::vector<mlo::Problem*>{top.get(), mid.get(), low.get(), top.get()});
  CHECK(engine.graph().paths(mid.get()) ==
        std::vector<std::vector<mlo::Problem*>>{{mid.get(), low.get(), mid.get()}});
  CHECK(engine.graph().paths(low.get()).empty());
}

TEST_CASE("Graph: the Dependencies constructor builds the same graph", "[core][graph]") {
  auto outer = make("outer");
  auto inner = make("inner");
  mlo::Engine engine(mlo::EngineConfig(), {outer, inner},
                     mlo::Dependencies{/*u2l=*/{{outer, {inner}}}, /*l2u=*/{{inner, {outer}}}});
  engine.initialize();
  CHECK(engine.graph().leaves() == std::vector<mlo::Problem*>{inner.get()});
  CHECK(engine.graph().parents(inner.get()) == std::vector<mlo::Problem*>{outer.get()});
}

}  // namespace graph_test
