// Architecture search (problems/nas): the derived cell keeps each node's strongest non-zero
// operations; a genotype reads back from its YAML; random cells are cells of the space; the
// supernet with one-hot operation weights computes exactly the fixed network of that cell; and
// the search and retraining experiments run from YAML, the second on the first's file.
#include "problems/nas/network.h"
#include "problems/nas/retrain.h"
#include "problems/nas/search.h"
#include "problems/nas/search_space.h"

#include "support/names.h"
#include "support/in_memory_state.h"
#include "support/scratch.h"
#include "support/text_files.h"

#include <mlo/mlo.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>

#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <set>

namespace nas_test {

namespace nas = mlo::problems::nas;
using Catch::Matchers::Contains;

TEST_CASE("NAS: derive keeps each node's strongest non-zero operations", "[problems][nas]") {
  // 2 nodes: edges (0->1), (0->2), (1->2); columns conv3x3 conv5x5 max avg skip zero.
  const at::Tensor w = torch::tensor({{0.1, 0.2, 0.0, 0.0, 0.3, 0.9},    // 0->1: skip (not zero)
                                      {0.5, 0.1, 0.0, 0.0, 0.0, 0.0},    // 0->2: conv3x3 0.5
                                      {0.0, 0.0, 0.7, 0.0, 0.0, 0.0}});  // 1->2: max_pool 0.7
  const nas::Genotype g = nas::derive(w, 2, 1, 4);
  REQUIRE(g.edges.size() == 3);
  CHECK(g.edges[0] == nas::GenotypeEdge{1, 0, "skip"});
  CHECK(g.edges[1] == nas::GenotypeEdge{2, 1, "max_pool"});  // stronger first
  CHECK(g.edges[2] == nas::GenotypeEdge{2, 0, "conv3x3"});
  // With 3 nodes, node 3 keeps 2 of its 3 edges.
  at::Tensor w3 = torch::zeros({6, 6});
  w3[3][0] = 0.2;  // 0->3 conv3x3
  w3[4][1] = 0.6;  // 1->3 conv5x5
  w3[5][3] = 0.4;  // 2->3 avg_pool
  const nas::Genotype g3 = nas::derive(w3, 3, 1, 4);
  std::vector<nas::GenotypeEdge> into3;
  for (const auto& e : g3.edges) {
    if (e.node == 3) into3.push_back(e);
  }
  REQUIRE(into3.size() == 2);
  CHECK(into3[0] == nas::GenotypeEdge{3, 1, "conv5x5"});
  CHECK(into3[1] == nas::GenotypeEdge{3, 2, "avg_pool"});
  CHECK_THROWS_WITH(nas::derive(torch::zeros({2, 6}), 2, 1, 4), Contains("must be [3, 6]"));
}

TEST_CASE("NAS: a genotype reads back from its YAML; a bad file is refused naming it",
          "[problems][nas]") {
  const auto dir = mlo_test::scratch_dir("nas_genotype");
  at::Generator generator = at::detail::createCPUGenerator();
  generator.set_current_seed(4);
  const nas::Genotype g = nas::random_genotype(generator, 4, 2, 6);
  const auto path = (dir / "cell.yaml").string();
  std::ofstream(path) << nas::to_yaml(g, {"a comment"});
  const nas::Genotype back = nas::read_genotype(path);
  CHECK(back.nodes == 4);
  CHECK(back.cells == 2);
  CHECK(back.channels == 6);
  CHECK(back.edges == g.edges);

  const auto refused = [&](const std::string& text, const std::string& what) {
    const auto bad = (dir / "bad.yaml").string();
    std::ofstream(bad) << text;
    CHECK_THROWS_WITH(nas::read_genotype(bad), Contains(bad) && Contains(what));
  };
  const std::string head = "nodes: 2\ncells: 1\nchannels: 4\nedges:\n";
  refused(head + "  - {node: 1, input: 0, op: conv7x7}\n  - {node: 2, input: 1, op: skip}\n",
          "unknown operation 'conv7x7'; operations: conv3x3, conv5x5");
  refused(head + "  - {node: 1, input: 0, op: zero}\n  - {node: 2, input: 1, op: skip}\n",
          "'zero' is no edge");
  refused(head + "  - {node: 1, input: 0, op: skip}\n", "node 2 has no edge");
  refused(head + "  - {node: 1, input: 1, op: skip}\n  - {node: 2, input: 1, op: skip}\n",
          "a node reads only earlier nodes");
  refused("cells: 1\nchannels: 4\nedges: []\n", "'nodes' is missing");
  refused(head + "  - {node: 1, input: 0, opp: skip}\n", "edges[0].opp: unknown key; keys: node");
  refused(head + "  - {node: 1, input: 0, op: [skip]}\n", "edges[0].op: expected an operation");
  refused(head + "  - {node: x, input: 0, op: skip}\n", "edges[0].node: expected an integer");
  refused("nodes: [\n", "not a valid architecture file");
  CHECK_THROWS_WITH(nas::read_genotype((dir / "none.yaml").string()),
                    Contains("cannot read the architecture file"));
}

TEST_CASE("NAS: random cells are cells of the space, each operation drawn", "[problems][nas]") {
  at::Generator generator = at::detail::createCPUGenerator();
  generator.set_current_seed(1);
  std::map<std::string, int> counts;
  for (int draw = 0; draw < 200; ++draw) {
    const nas::Genotype g = nas::random_genotype(generator, 3, 1, 4);
    g.check("random");
    CHECK(g.edges.size() == 5);  // 1 + 2 + 2
    for (const auto& e : g.edges) ++counts[e.op];
  }
  CHECK(counts.count("zero") == 0);
  for (const char* op : {"conv3x3", "conv5x5", "max_pool", "avg_pool", "skip"}) {
    INFO(op);
    CHECK(counts[op] > 120);  // 1000 edges over 5 operations: 200 each expected
  }
}

TEST_CASE("NAS: the supernet under one-hot weights is the fixed network of that cell",
          "[problems][nas]") {
  torch::manual_seed(2);
  const int64_t nodes = 3, cells = 2, channels = 4;
  const nas::Genotype g{nodes, cells, channels,
                        {{1, 0, "conv5x5"}, {2, 1, "conv3x3"}, {2, 0, "avg_pool"},
                         {3, 2, "max_pool"}, {3, 0, "skip"}}};
  nas::SearchNetwork search(1, 10, nodes, cells, channels);
  nas::FixedNetwork fixed(1, 10, g);
  const auto edges = nas::cell_edges(nodes);
  at::Tensor mixing = torch::zeros({static_cast<int64_t>(edges.size()), 6});
  mixing.select(1, nas::operation_index("zero")).fill_(1.0);
  auto search_params = search->named_parameters();
  torch::NoGradGuard no_grad;
  for (const char* shared : {"stem.weight", "stem_norm.weight", "stem_norm.bias",
                             "classifier.weight", "classifier.bias"}) {
    fixed->named_parameters()[shared].copy_(search_params[shared]);
  }
  for (size_t k = 0; k < g.edges.size(); ++k) {
    const auto& e = g.edges[k];
    size_t index = 0;
    while (edges[index] != std::make_pair(e.input, e.node)) ++index;
    mixing[static_cast<int64_t>(index)].zero_();
    mixing[static_cast<int64_t>(index)][nas::operation_index(e.op)] = 1.0;
    if (e.op.rfind("conv", 0) != 0) continue;
    for (int64_t c = 0; c < cells; ++c) {
      fixed->named_parameters()["cell" + std::to_string(c) + "_edge" + std::to_string(k) + "_" +
                                e.op + ".conv.weight"]
          .copy_(search_params["cell" + std::to_string(c) + "_edge" + std::to_string(index) +
                               "_" + e.op + ".conv.weight"]);
    }
  }
  const at::Tensor x = torch::randn({5, 1, 12, 12});
  const at::Tensor a = search->forward(x, mixing);
  const at::Tensor b = fixed->forward(x);
  CAPTURE((a - b).abs().max().item<double>());
  CHECK(torch::allclose(a, b, 1e-5, 1e-5));
}

namespace {

const char* const kTinySearch = R"(experiment: nas
name: tiny_nas
seed: 0
threads: 1
engine: {train_iters: 12, valid_step: 6, log_step: 0}
data: {dataset: synthetic, train_size: 64, batch_size: 8}
nas: {nodes: 2, cells: 1, channels: 4}
problems:
  inner:
    optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
    method: darts
  outer:
    optimizer: {name: adam, lr: 0.01}
)";

// Retraining in the same space (the search's nodes, cells and channels).
const char* const kTinyRetrain = R"(experiment: nas_retrain
name: tiny_retrain
seed: 0
threads: 1
engine: {train_iters: 4, valid_step: 0, log_step: 0}
data: {dataset: synthetic, train_size: 32, batch_size: 8}
nas: {nodes: 2, cells: 1, channels: 4}
problems:
  net:
    optimizer: {name: sgd, lr: 0.05}
)";

}  // namespace

TEST_CASE("NAS: search from YAML writes the derived cell, which retraining reads",
          "[problems][nas][run]") {
  const auto dir = mlo_test::scratch_dir("nas_search");
  mlo::run::RunConfig config = mlo::run::parse_run_config(kTinySearch, "tiny.yaml");
  config.run.dir(dir.string());
  auto search = mlo::run::make_experiment(config);
  auto& ex = dynamic_cast<nas::NasSearchExperiment&>(*search);
  const double entropy_before = ex.evaluate(mlo::run::EvalSet::kValid).at("valid/entropy");
  CHECK(entropy_before == Approx(std::log(6.0)).epsilon(1e-4));
  ex.engine().run();
  const mlo::Metrics test = ex.evaluate(mlo::run::EvalSet::kTest);
  CHECK(test.at("entropy") < entropy_before);  // alpha moved
  CHECK(test.at("acc") >= 0.0);
  const nas::Genotype written = nas::read_genotype((dir / "architecture.yaml").string());
  CHECK(written.edges == ex.derived().edges);
  CHECK_THAT(ex.report(test, {}), Contains("derived cell"));

  auto retrain = mlo::run::make_experiment(mlo::run::parse_run_config(
      kTinyRetrain, "retrain.yaml",
      {"nas.architecture=" + (dir / "architecture.yaml").string(), "engine.train_iters=6",
       "data.train_size=64"}));
  auto& r = dynamic_cast<nas::NasRetrainExperiment&>(*retrain);
  CHECK(r.genotype().edges == written.edges);
  r.engine().run();
  const mlo::Metrics m = r.evaluate(mlo::run::EvalSet::kTest);
  CHECK(m.at("acc") >= 0.0);
  CHECK(m.at("acc") <= 1.0);
  CHECK_THROWS_WITH(mlo::run::make_experiment(mlo::run::parse_run_config(
                        kTinyRetrain, "retrain.yaml", {"nas.architecture=/nonexistent.yaml"})),
                    Contains("nas.architecture") && Contains("cannot read the architecture file"));
  // 32-pixel images: the stem and 4 cells halve them to 1; 5 would leave nothing.
  CHECK_THROWS_WITH(mlo::run::make_experiment(mlo::run::parse_run_config(
                        kTinyRetrain, "retrain.yaml", {"nas.architecture=hand", "nas.cells=5"})),
                    mlo_test::Names({"nas.cells: 5", "32"}));

  // A derived cell that differs from a file already there (edited by hand) goes beside it.
  const std::string edited = "# mine\n" + nas::to_yaml(nas::hand_picked_genotype(2, 1, 4));
  std::ofstream(dir / "architecture.yaml") << edited;
  ex.evaluate(mlo::run::EvalSet::kTest);
  CHECK(mlo_test::read_text(dir / "architecture.yaml") == edited);
  CHECK(nas::read_genotype((dir / "architecture.2.yaml").string()).edges == written.edges);
  ex.evaluate(mlo::run::EvalSet::kTest);  // the same again: no third file
  CHECK_FALSE(std::filesystem::exists(dir / "architecture.3.yaml"));
}

TEST_CASE("NAS: retraining resumes only with the cell it started with", "[problems][nas][resume]") {
  std::string saved;
  {
    auto first = mlo::run::make_experiment(
        mlo::run::parse_run_config(kTinyRetrain, "r.yaml", {"nas.architecture=hand"}));
    first->engine().run();
    saved = mlo_test::saved_state(first->engine());
  }
  // The same operations in the same order (the same parameters), wired otherwise.
  const auto dir = mlo_test::scratch_dir("nas_rewired");
  nas::Genotype rewired = nas::hand_picked_genotype(2, 1, 4);
  std::swap(rewired.edges[1].input, rewired.edges[2].input);
  std::ofstream(dir / "cell.yaml") << nas::to_yaml(rewired);
  auto other = mlo::run::make_experiment(mlo::run::parse_run_config(
      kTinyRetrain, "r.yaml",
      {"nas.architecture=" + (dir / "cell.yaml").string(), "engine.train_iters=8"}));
  CHECK_THROWS_WITH(mlo_test::load_state(other->engine(), saved),
                    mlo_test::Names({"nas.architecture:", "resumed"}));
}

}  // namespace nas_test
