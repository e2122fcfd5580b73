// A model of the program's own, selectable from YAML with its own keys:
//   problems: {classifier: {model: {name: mlp, hidden: 128, layers: 2}}}
// One file: the options type (name, keys with their checks, the module it builds) and its
// registration. The program links it in (one line of CMake: this file among its sources).
#include <mlo/nn/chain.h>
#include <mlo/nn/registry.h>
#include <torch/torch.h>

namespace distill {

struct MlpModel : mlo::nn::ModelOptionsFor<MlpModel> {
  static constexpr const char* kName = "mlp";
  int64_t hidden = 64;  // width of each hidden layer
  int64_t layers = 1;   // hidden layers
  void visit(mlo::Fields& f) override {
    f("hidden", hidden, mlo::at_least(1));
    f("layers", layers, mlo::at_least(1));
  }
  // Images [N, C, H, W] to logits [N, classes], as a chain of blocks (what the reweighting
  // experiment's classifier and mlo's memory tools work on).
  std::shared_ptr<torch::nn::Module> make(const mlo::nn::ModelInput& in) const override {
    mlo::nn::Chain net;
    net->push_back("flatten", torch::nn::Flatten());
    int64_t width = in.channels * in.image_size * in.image_size;
    for (int64_t i = 0; i < layers; ++i) {
      net->push_back("hidden" + std::to_string(i), torch::nn::Linear(width, hidden));
      net->push_back("relu" + std::to_string(i), torch::nn::ReLU());
      width = hidden;
    }
    net->push_back("head", torch::nn::Linear(width, in.num_classes));
    return net.ptr();
  }
};

MLO_REGISTER_MODEL(MlpModel);

}  // namespace distill
