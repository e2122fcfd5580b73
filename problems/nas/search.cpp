#include "problems/nas/search.h"

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>
#include <mlo/data/stream.h>
#include <mlo/run/builders.h>
#include <mlo/run/device.h>

#include <spdlog/spdlog.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace mlo {
namespace problems {
namespace nas {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

ArchitectureImpl::ArchitectureImpl(int64_t edges, double init_scale) {
  alpha = register_parameter(
      "alpha", init_scale * torch::randn({edges, static_cast<int64_t>(operation_names().size())}));
}

at::Tensor Supernet::logits(const at::Tensor& x) const {
  return module_as<SearchNetworkImpl>()->forward(x, architecture->mixing());
}

at::Tensor Supernet::training_step(const Batch& batch) {
  return torch::nn::functional::cross_entropy(logits(batch.data), batch.target);
}

at::Tensor ArchitectureSearch::mixing() const { return torch::softmax(alpha(), 1); }

double ArchitectureSearch::entropy() const {
  torch::NoGradGuard no_grad;
  const at::Tensor p = mixing().to(at::kDouble);
  return -(p * p.log()).sum(1).mean().item<double>();
}

at::Tensor ArchitectureSearch::training_step(const Batch& batch) {
  if (loss_call() == LossCall::kOwnStep) log_metric("entropy", entropy());
  return torch::nn::functional::cross_entropy(supernet->logits(batch.data), batch.target);
}

void NasSearchExperiment::Settings::visit(Fields& v) {
  v.section("data", [&](Fields& s) { data.visit(s); });
  v.section("nas", [&](Fields& s) {
    s("nodes", nas.nodes, int_in_range(1, 16));
    s("cells", nas.cells, at_least(1));
    s("channels", nas.channels, int_in_range(1, 1024));
    s("init_scale", nas.init_scale, non_negative());
  });
}

run::DependencyConfig NasSearchExperiment::Settings::default_dependencies(
    const run::RunConfig& config) const {
  (void)config;
  return run::DependencyConfig::bilevel("outer", "inner");
}

NasSearchExperiment::NasSearchExperiment(const run::RunConfig& config)
    : config_(config), settings_(config.settings_as<Settings>()) {
  if (config_.threads > 0) torch::set_num_threads(static_cast<int>(config_.threads));
  const uint64_t seed = static_cast<uint64_t>(config_.seed);
  device_ = run::resolve_device(config_);
  data_ = load_nas_data(settings_.data, seed);
  const SearchSpaceConfig& s = settings_.nas;
  const int64_t side = std::min(data_.train.data.size(2), data_.train.data.size(3));
  if (side < smallest_image_side(s.cells)) {
    config_.fail("nas.cells", std::to_string(s.cells) + " cells halve " + std::to_string(side) +
                                  "-pixel images to nothing (the stem and each cell halve "
                                  "them): at most " +
                                  std::to_string(static_cast<int64_t>(std::log2(side)) - 1));
  }
  torch::manual_seed(seed);
  inner_ = std::make_shared<Supernet>("inner", config_.problems.at("inner").config);
  outer_ = std::make_shared<ArchitectureSearch>("outer", config_.problems.at("outer").config);
  inner_->module(SearchNetwork(data_.in_channels, data_.classes, s.nodes, s.cells, s.channels));
  outer_->module(Architecture(static_cast<int64_t>(cell_edges(s.nodes).size()), s.init_scale));
  run::setup_problem(*inner_, config_);
  run::setup_problem(*outer_, config_);
  const int64_t batch = settings_.data.batch_size;
  inner_->data(std::make_shared<data::LoaderStream>(data_.train.data, data_.train.target,
                                                    data::LoaderOptions(batch).seed(seed)));
  outer_->data(std::make_shared<data::LoaderStream>(
      data_.held_out.data, data_.held_out.target, data::LoaderOptions(batch).seed(seed + 1)));
  engine_ = std::make_unique<Engine>(config_.engine);
  run::add_problems(*engine_, config_, {outer_, inner_});
}

Genotype NasSearchExperiment::derived() const {
  const SearchSpaceConfig& s = settings_.nas;
  return derive(outer_->mixing(), s.nodes, s.cells, s.channels);
}

Metrics NasSearchExperiment::evaluate(run::EvalSet set) {
  const bool valid = set == run::EvalSet::kValid;
  const std::string prefix = valid ? "valid/" : "";
  auto net = inner_->module_as<SearchNetworkImpl>();
  const bool was_training = net->is_training();
  net->eval();
  const at::Tensor mixing = outer_->mixing().detach();
  const auto [loss, acc] = loss_and_accuracy(
      [&](const at::Tensor& x) { return net->forward(x, mixing); },
      valid ? data_.held_out : data_.test, device_);
  net->train(was_training);
  if (!valid && !config_.run.dir().empty()) {
    // The search's result: the derived cell, where retraining reads it. A file there that says
    // something else (edited by hand, or another evaluation's) is kept: the new one goes beside
    // it.
    const std::filesystem::path dir(config_.run.dir());
    std::filesystem::path path = dir / "architecture.yaml";
    const std::string text = to_yaml(
        derived(), {"derived by mlo's nas search (run " + config_.name + ", seed " +
                        std::to_string(config_.seed) + ")",
                    "retrain: mlo run configs/nas_retrain_fmnist.yaml --set "
                    "nas.architecture=<this file>"});
    for (int n = 2; std::filesystem::exists(path) && read_text(path) != text; ++n) {
      path = dir / ("architecture." + std::to_string(n) + ".yaml");
    }
    write_file_atomically(path.string(), [&](std::ostream& out) { out << text; });
    spdlog::info("nas: derived architecture written to {}", path.string());
  }
  return {{prefix + "loss", loss}, {prefix + "acc", acc}, {prefix + "entropy", outer_->entropy()}};
}

std::string NasSearchExperiment::describe() const {
  const SearchSpaceConfig& s = settings_.nas;
  std::ostringstream out;
  out << "data: " << data_.description << "\n"
      << "inner: the supernet (" << s.cells << " cells of " << s.nodes << " nodes, "
      << cell_edges(s.nodes).size() << " edges of " << operation_names().size()
      << " operations, " << s.channels << " channels; hypergradient: "
      << config_.problems.at("inner").config.method().name()
      << "), outer: the architecture weights on the held-out split";
  return out.str();
}

std::string NasSearchExperiment::report(const Metrics& test, const Metrics& valid) const {
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof(line), "supernet accuracy: held-out %.4f, test %.4f\n",
                valid.count("valid/acc") ? valid.at("valid/acc") : 0.0, test.at("acc"));
  out << line << "derived cell (node <- input: operation):\n";
  for (const GenotypeEdge& e : derived().edges) {
    out << "  " << e.node << " <- " << e.input << ": " << e.op << "\n";
  }
  return out.str();
}

}  // namespace nas
}  // namespace problems

MLO_REGISTER_EXPERIMENT(problems::nas::NasSearchExperiment);

}  // namespace mlo
