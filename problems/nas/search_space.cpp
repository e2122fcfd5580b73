#include "problems/nas/search_space.h"

#include <mlo/base/error.h>

#include <ATen/ATen.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace mlo {
namespace problems {
namespace nas {

const std::vector<std::string>& operation_names() {
  static const std::vector<std::string> names{"conv3x3", "conv5x5", "max_pool",
                                              "avg_pool", "skip",    "zero"};
  return names;
}

int64_t operation_index(const std::string& name) {
  const auto& names = operation_names();
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) {
    std::string valid;
    for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
    throw Error("unknown operation '" + name + "'; operations: " + valid);
  }
  return it - names.begin();
}

std::vector<std::pair<int64_t, int64_t>> cell_edges(int64_t nodes) {
  std::vector<std::pair<int64_t, int64_t>> edges;
  for (int64_t j = 1; j <= nodes; ++j) {
    for (int64_t i = 0; i < j; ++i) edges.emplace_back(i, j);
  }
  return edges;
}

std::ostream& operator<<(std::ostream& out, const GenotypeEdge& edge) {
  return out << edge.node << " <- " << edge.input << ": " << edge.op;
}

void Genotype::check(const std::string& where) const {
  MLO_CHECK(nodes >= 1 && cells >= 1 && channels >= 1, where, ": nodes, cells and channels ",
            "must be >= 1, got ", nodes, ", ", cells, ", ", channels);
  MLO_CHECK(nodes <= 16 && channels <= 1024, where, ": nodes must be at most 16 and channels ",
            "at most 1024 (as nas.nodes and nas.channels), got ", nodes, " and ", channels);
  std::set<std::pair<int64_t, int64_t>> seen;
  std::vector<bool> fed(static_cast<size_t>(nodes + 1), false);
  for (const GenotypeEdge& e : edges) {
    MLO_CHECK(e.node >= 1 && e.node <= nodes, where, ": edge into node ", e.node,
              ": nodes are 1..", nodes);
    MLO_CHECK(e.input >= 0 && e.input < e.node, where, ": edge ", e.input, " -> ", e.node,
              ": a node reads only earlier nodes (0..", e.node - 1, ")");
    int64_t op = 0;
    try {
      op = operation_index(e.op);
    } catch (const Error& error) {
      throw Error(where + ": edge " + std::to_string(e.input) + " -> " + std::to_string(e.node) +
                  ": " + error.what());
    }
    MLO_CHECK(operation_names()[static_cast<size_t>(op)] != "zero", where, ": edge ", e.input,
              " -> ", e.node, ": 'zero' is no edge; leave the edge out");
    MLO_CHECK(seen.insert({e.input, e.node}).second, where, ": edge ", e.input, " -> ", e.node,
              " is listed twice");
    fed[static_cast<size_t>(e.node)] = true;
  }
  for (int64_t j = 1; j <= nodes; ++j) {
    MLO_CHECK(fed[static_cast<size_t>(j)], where, ": node ", j, " has no edge");
  }
}

Genotype derive(const at::Tensor& weights, int64_t nodes, int64_t cells, int64_t channels) {
  const auto edges = cell_edges(nodes);
  const at::Tensor w = weights.detach().to(at::kDouble).cpu();
  MLO_CHECK(w.dim() == 2 && w.size(0) == static_cast<int64_t>(edges.size()) &&
                w.size(1) == static_cast<int64_t>(operation_names().size()),
            "derive: the architecture weights must be [", edges.size(), ", ",
            operation_names().size(), "], got ", w.sizes());
  const int64_t zero = operation_index("zero");
  Genotype g;
  g.nodes = nodes;
  g.cells = cells;
  g.channels = channels;
  for (int64_t j = 1; j <= nodes; ++j) {
    // (strength, input, op) of each edge into j
    std::vector<std::tuple<double, int64_t, int64_t>> candidates;
    for (size_t e = 0; e < edges.size(); ++e) {
      if (edges[e].second != j) continue;
      int64_t best = -1;
      for (int64_t op = 0; op < w.size(1); ++op) {
        if (op == zero) continue;
        if (best < 0 || w[static_cast<int64_t>(e)][op].item<double>() >
                            w[static_cast<int64_t>(e)][best].item<double>()) {
          best = op;
        }
      }
      candidates.emplace_back(w[static_cast<int64_t>(e)][best].item<double>(), edges[e].first,
                              best);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
    const size_t keep = static_cast<size_t>(std::min<int64_t>(2, j));
    for (size_t k = 0; k < keep; ++k) {
      g.edges.push_back({j, std::get<1>(candidates[k]),
                         operation_names()[static_cast<size_t>(std::get<2>(candidates[k]))]});
    }
  }
  return g;
}

Genotype random_genotype(at::Generator& generator, int64_t nodes, int64_t cells,
                         int64_t channels) {
  Genotype g;
  g.nodes = nodes;
  g.cells = cells;
  g.channels = channels;
  const int64_t choices = static_cast<int64_t>(operation_names().size()) - 1;  // not zero
  for (int64_t j = 1; j <= nodes; ++j) {
    const at::Tensor inputs = at::randperm(j, generator, at::TensorOptions().dtype(at::kLong));
    for (int64_t k = 0; k < std::min<int64_t>(2, j); ++k) {
      const int64_t op = at::randint(choices, {1}, generator, at::TensorOptions().dtype(at::kLong))
                             .item<int64_t>();
      g.edges.push_back({j, inputs[k].item<int64_t>(), operation_names()[static_cast<size_t>(op)]});
    }
  }
  return g;
}

Genotype hand_picked_genotype(int64_t nodes, int64_t cells, int64_t channels) {
  Genotype g;
  g.nodes = nodes;
  g.cells = cells;
  g.channels = channels;
  for (int64_t j = 1; j <= nodes; ++j) {
    g.edges.push_back({j, j - 1, "conv3x3"});
    if (j >= 2) g.edges.push_back({j, j - 2, "skip"});
  }
  return g;
}

std::string to_yaml(const Genotype& genotype, const std::vector<std::string>& comment) {
  std::ostringstream out;
  for (const auto& line : comment) out << "# " << line << "\n";
  out << "nodes: " << genotype.nodes << "\n"
      << "cells: " << genotype.cells << "\n"
      << "channels: " << genotype.channels << "\n"
      << "edges:            # node <- input: operation\n";
  for (const GenotypeEdge& e : genotype.edges) {
    out << "  - {node: " << e.node << ", input: " << e.input << ", op: " << e.op << "}\n";
  }
  return out.str();
}

namespace {

// Throws unless every key of `node` (a map) is one of `known`.
void check_keys(const YAML::Node& node, const std::vector<std::string>& known,
                const std::string& where, const std::string& prefix) {
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string valid;
    for (const auto& k : known) valid += (valid.empty() ? "" : ", ") + k;
    throw Error(where + ": " + prefix + key + ": unknown key; keys: " + valid);
  }
}

}  // namespace

Genotype parse_genotype(const std::string& text, const std::string& where) {
  try {
    const YAML::Node root = YAML::Load(text);
    MLO_CHECK(root.IsMap(), where, ": expected the keys nodes, cells, channels, edges");
    check_keys(root, {"nodes", "cells", "channels", "edges"}, where, "");
    const auto integer = [&](const YAML::Node& node, const std::string& key,
                             const std::string& name) {
      MLO_CHECK(node[key], where, ": '", name, "' is missing");
      MLO_CHECK(node[key].IsScalar(), where, ": ", name, ": expected an integer");
      try {
        return node[key].as<int64_t>();
      } catch (const YAML::Exception&) {
        throw Error(where + ": " + name + ": expected an integer, got '" +
                    node[key].Scalar() + "'");
      }
    };
    Genotype g;
    g.nodes = integer(root, "nodes", "nodes");
    g.cells = integer(root, "cells", "cells");
    g.channels = integer(root, "channels", "channels");
    MLO_CHECK(root["edges"] && root["edges"].IsSequence(), where, ": 'edges' must be a list");
    for (size_t i = 0; i < root["edges"].size(); ++i) {
      const YAML::Node e = root["edges"][i];
      const std::string name = "edges[" + std::to_string(i) + "]";
      MLO_CHECK(e.IsMap(), where, ": ", name, ": expected {node, input, op}");
      check_keys(e, {"node", "input", "op"}, where, name + ".");
      MLO_CHECK(e["op"] && e["op"].IsScalar(), where, ": ", name, ".op: expected an operation");
      g.edges.push_back(
          {integer(e, "node", name + ".node"), integer(e, "input", name + ".input"), e["op"].Scalar()});
    }
    g.check(where);
    return g;
  } catch (const YAML::Exception& e) {
    throw Error(where + ": not a valid architecture file: " + e.what());
  }
}

Genotype read_genotype(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MLO_CHECK(in, path, ": cannot read the architecture file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_genotype(text.str(), path);
}

int64_t smallest_image_side(int64_t cells) {
  return cells >= 40 ? std::numeric_limits<int64_t>::max() : int64_t{1} << (cells + 1);
}

}  // namespace nas
}  // namespace problems
}  // namespace mlo
