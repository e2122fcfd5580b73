#pragma once
/// \file
/// The architecture-search space of the `nas` experiments (DARTS, Liu, Simonyan and Yang, ICLR
/// 2019, on a scale two CPU cores can search): a cell is a small DAG whose node 0 is the cell's
/// input and whose nodes 1..n each sum operations applied to earlier nodes; the cell's output
/// is the mean of nodes 1..n. Every edge i -> j (i < j) chooses one of `operation_names()`:
/// 3x3 and 5x5 convolutions (ReLU, convolution, batch norm without affine terms), 3x3 max and
/// average pooling, skip (identity) and zero (no edge).
///
/// A `Genotype` is a discrete cell: for each node, the edges it keeps (DARTS keeps two, node 1
/// has only one), each with its operation. `derive` takes it from the architecture weights;
/// `random_genotype` draws one uniformly from the same space (the random-search baseline);
/// `hand_picked_genotype` is a fixed cell of convolutions and skips (the other baseline).
/// Genotypes are saved as YAML a user can read and edit (`to_yaml`, `read_genotype`).

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace nas {

/// The candidate operations, in the order of the architecture weights' columns:
/// conv3x3, conv5x5, max_pool, avg_pool, skip, zero.
const std::vector<std::string>& operation_names();
/// Index of `name` in `operation_names()`; throws `mlo::Error` listing them otherwise.
int64_t operation_index(const std::string& name);

/// The edges of a cell with `nodes` intermediate nodes, in the order of the architecture
/// weights' rows: (0 -> 1), (0 -> 2), (1 -> 2), (0 -> 3), (1 -> 3), (2 -> 3), ...
std::vector<std::pair<int64_t, int64_t>> cell_edges(int64_t nodes);

/// One kept edge of a discrete cell.
struct GenotypeEdge {
  int64_t node = 1;   ///< the node it feeds (1..nodes)
  int64_t input = 0;  ///< the node it reads (0..node-1)
  std::string op;     ///< one of `operation_names()`, not "zero"
  bool operator==(const GenotypeEdge& o) const {
    return node == o.node && input == o.input && op == o.op;
  }
};

/// "node <- input: op".
std::ostream& operator<<(std::ostream& out, const GenotypeEdge& edge);

/// A discrete cell and the network around it.
struct Genotype {
  int64_t nodes = 3;      ///< intermediate nodes per cell
  int64_t cells = 2;      ///< cells, each followed by 2x2 max-pooling
  int64_t channels = 8;   ///< channels throughout
  std::vector<GenotypeEdge> edges;
  /// Throws `mlo::Error` naming `where` for a node without an edge, an input that is not an
  /// earlier node, an unknown or "zero" operation, or a repeated edge.
  void check(const std::string& where) const;
};

/// The strongest edges of each node: per edge the operation of largest weight other than
/// "zero", and per node the `min(2, node)` edges whose kept operation weighs most. `weights`:
/// [edges, operations], rows as `cell_edges(nodes)`: the softmax of alpha by row (edges are
/// compared with each other, so the normalization matters).
Genotype derive(const at::Tensor& weights, int64_t nodes, int64_t cells, int64_t channels);
/// A cell drawn uniformly: per node `min(2, node)` distinct inputs and an operation other than
/// "zero" for each.
Genotype random_genotype(at::Generator& generator, int64_t nodes, int64_t cells,
                         int64_t channels);
/// Node j: a 3x3 convolution of node j-1, plus a skip from node j-2 (for j >= 2).
Genotype hand_picked_genotype(int64_t nodes, int64_t cells, int64_t channels);

/// The genotype as YAML (`nodes`, `cells`, `channels`, then one line per edge), with `comment`
/// lines first.
std::string to_yaml(const Genotype& genotype, const std::vector<std::string>& comment = {});
/// Reads a file `to_yaml` wrote (or a user edited); throws `mlo::Error` naming the file and the
/// key of anything missing, unknown or invalid.
Genotype read_genotype(const std::string& path);
/// As `read_genotype`, from YAML text; `where` names it in errors.
Genotype parse_genotype(const std::string& text, const std::string& where);
/// The smallest side an image may have for `cells` cells: the stem and every cell halve it,
/// so 2^(cells + 1).
int64_t smallest_image_side(int64_t cells);

}  // namespace nas
}  // namespace problems
}  // namespace mlo
