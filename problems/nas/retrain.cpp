#include "problems/nas/retrain.h"

#include <mlo/base/archive.h>
#include <mlo/base/error.h>
#include <mlo/data/stream.h>
#include <mlo/run/builders.h>
#include <mlo/run/device.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <sstream>
#include <utility>

namespace mlo {
namespace problems {
namespace nas {

Retrained::Retrained(std::string name, ProblemConfig config, std::string genotype)
    : Problem(std::move(name), std::move(config)), genotype_(std::move(genotype)) {}

void Retrained::save_step_state(torch::serialize::OutputArchive& archive) const {
  archive.write("genotype", c10::IValue(genotype_));
}

void Retrained::load_step_state(torch::serialize::InputArchive& archive) {
  const std::string saved = mlo::archive::read_string(archive, "genotype", "problem 'net'");
  MLO_CHECK(saved == genotype_, "nas.architecture: the run being resumed trained another cell;",
            " resume with the architecture it started with:\n", saved);
}

at::Tensor Retrained::logits(const at::Tensor& x) const {
  return module_as<FixedNetworkImpl>()->forward(x);
}

at::Tensor Retrained::training_step(const Batch& batch) {
  const at::Tensor out = logits(batch.data);
  if (loss_call() == LossCall::kOwnStep) {
    log_metric("acc", out.argmax(1).eq(batch.target).to(at::kDouble).mean().item<double>());
  }
  return torch::nn::functional::cross_entropy(out, batch.target);
}

void NasRetrainExperiment::Settings::visit(Fields& v) {
  v.section("data", [&](Fields& s) { data.visit(s); });
  v.section("nas", [&](Fields& s) {
    s("architecture", nas.architecture);
    s("random_seed", nas.random_seed, at_least(-1));
    s("nodes", nas.nodes, int_in_range(1, 16));
    s("cells", nas.cells, at_least(1));
    s("channels", nas.channels, int_in_range(1, 1024));
  });
}

NasRetrainExperiment::NasRetrainExperiment(const run::RunConfig& config)
    : config_(config), settings_(config.settings_as<Settings>()) {
  if (config_.threads > 0) torch::set_num_threads(static_cast<int>(config_.threads));
  const uint64_t seed = static_cast<uint64_t>(config_.seed);
  const RetrainConfig& r = settings_.nas;
  if (r.architecture == "hand") {
    genotype_ = hand_picked_genotype(r.nodes, r.cells, r.channels);
  } else if (r.architecture == "random") {
    at::Generator generator = at::detail::createCPUGenerator();
    generator.set_current_seed(r.random_seed >= 0 ? static_cast<uint64_t>(r.random_seed) : seed);
    genotype_ = random_genotype(generator, r.nodes, r.cells, r.channels);
  } else {
    try {
      genotype_ = read_genotype(r.architecture);
    } catch (const Error& e) {
      config_.fail("nas.architecture", std::string(e.what()) +
                                           " (a genotype file, 'random' or 'hand')");
    }
  }
  device_ = run::resolve_device(config_);
  data_ = load_nas_data(settings_.data, seed);
  const int64_t side = std::min(data_.train.data.size(2), data_.train.data.size(3));
  if (side < smallest_image_side(genotype_.cells)) {
    config_.fail(r.architecture == "hand" || r.architecture == "random" ? "nas.cells"
                                                                        : "nas.architecture",
                 std::to_string(genotype_.cells) + " cells halve " + std::to_string(side) +
                     "-pixel images to nothing (the stem and each cell halve them)");
  }
  torch::manual_seed(seed);
  net_ = std::make_shared<Retrained>("net", config_.problems.at("net").config,
                                     to_yaml(genotype_));
  net_->module(FixedNetwork(data_.in_channels, data_.classes, genotype_));
  run::setup_problem(*net_, config_);
  net_->data(std::make_shared<data::LoaderStream>(
      data_.train.data, data_.train.target,
      data::LoaderOptions(settings_.data.batch_size).seed(seed)));
  engine_ = std::make_unique<Engine>(config_.engine);
  run::add_problems(*engine_, config_, {net_});
}

Metrics NasRetrainExperiment::evaluate(run::EvalSet set) {
  const bool valid = set == run::EvalSet::kValid;
  auto net = net_->module_as<FixedNetworkImpl>();
  const bool was_training = net->is_training();
  net->eval();
  const auto [loss, acc] = loss_and_accuracy([&](const at::Tensor& x) { return net->forward(x); },
                                             valid ? data_.held_out : data_.test, device_);
  net->train(was_training);
  const std::string prefix = valid ? "valid/" : "";
  return {{prefix + "loss", loss}, {prefix + "acc", acc}};
}

std::string NasRetrainExperiment::describe() const {
  std::ostringstream out;
  out << "data: " << data_.description << "\n"
      << "net: the cell '" << settings_.nas.architecture << "' (" << genotype_.cells
      << " cells of " << genotype_.nodes << " nodes, " << genotype_.channels
      << " channels), trained from scratch; its edges:";
  for (const GenotypeEdge& e : genotype_.edges) {
    out << " " << e.node << "<-" << e.input << ":" << e.op;
  }
  return out.str();
}

}  // namespace nas
}  // namespace problems

MLO_REGISTER_EXPERIMENT(problems::nas::NasRetrainExperiment);

}  // namespace mlo
