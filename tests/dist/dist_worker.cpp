// One rank of the process-group tests (process_group_test spawns several): reads its rank from
// the torchrun variables and runs the mode named by argv[1], printing results to stdout.
#include <mlo/base/error.h>
#include <mlo/dist/process_group.h>

#include "dist/rendezvous_store.h"

#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

void print(const char* label, const torch::Tensor& t) {
  std::cout << label;
  auto flat = t.to(torch::kDouble).reshape({-1});
  for (int64_t i = 0; i < flat.numel(); ++i) std::printf(" %.17g", flat[i].item<double>());
  std::cout << std::endl;
}

// The linear-regression problem shared with the test's one-process reference.
torch::Tensor features() { return torch::linspace(-1, 1, 32, torch::kDouble).reshape({8, 4}).sin(); }
torch::Tensor targets() { return torch::linspace(0, 2, 8, torch::kDouble).cos(); }

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto where = mlo::dist::Rendezvous::from_env();
  mlo::dist::GroupOptions options;
  options.timeout = std::chrono::milliseconds(argc > 2 ? std::stoi(argv[2]) : 20000);
  try {
    if (mode == "store") {
      // The rendezvous store alone (no collective backend): each rank adds its rank + 1 to a
      // counter, sets a key of its own, and reads every other rank's.
      auto opened = mlo::dist::detail::open_rendezvous_store(where, options.timeout);
      auto& store = *opened;
      store.add("sum", where.rank + 1);
      store.set("rank" + std::to_string(where.rank),
                std::vector<uint8_t>{static_cast<uint8_t>(where.rank)});
      int64_t seen = 0;
      for (int r = 0; r < where.world_size; ++r) seen += store.get("rank" + std::to_string(r))[0];
      std::cout << "store " << (where.own_store_port() > 0 ? "own" : "agent") << " sum "
                << store.add("sum", 0) << " seen " << seen << std::endl;
      // Rank 0's server (of a store of its own) outlives the others' last request.
      if (store.add("done", 1) == where.world_size) store.set("all_done", std::vector<uint8_t>{1});
      if (where.rank == 0 && where.own_store_port() > 0) store.wait({"all_done"}, options.timeout);
      return 0;
    }
    auto group = mlo::dist::ProcessGroup::connect(where, options);
    const double r = group->rank();
    if (mode == "collectives") {
      auto a = torch::full({3}, r + 1, torch::kFloat);
      auto b = torch::arange(5, torch::kDouble) * (r + 1);
      group->all_reduce_mean({a, b});
      print("mean_f32", a);
      print("mean_f64", b);
      auto c = torch::full({2, 2}, r * 10 + 7, torch::kFloat);
      group->broadcast({c}, group->size() - 1);
      print("broadcast", c);
      auto d = torch::full({1}, r + 1, torch::kLong);
      group->all_reduce_sum({d});
      print("sum_i64", d);
      group->barrier();
    } else if (mode == "train") {
      // Rank 0's initial weights reach every rank; each rank holds an equal shard of the batch.
      auto w = (r == 0 ? torch::linspace(0.5, -0.5, 4, torch::kDouble) : torch::zeros({4}, torch::kDouble))
                   .requires_grad_(true);
      group->broadcast({w});
      const int64_t rows = 8 / group->size();
      auto x = features().narrow(0, group->rank() * rows, rows);
      auto y = targets().narrow(0, group->rank() * rows, rows);
      torch::optim::SGD sgd({w}, torch::optim::SGDOptions(0.1).momentum(0.9));
      for (int step = 0; step < 5; ++step) {
        sgd.zero_grad();
        (x.matmul(w) - y).pow(2).mean().backward();
        group->all_reduce_mean({w.grad()});
        sgd.step();
      }
      print("params", w.detach());
    } else if (mode == "hang") {
      if (group->rank() == 1) std::this_thread::sleep_for(std::chrono::minutes(5));
      auto a = torch::ones({4});
      group->all_reduce_mean({a});
      std::cout << "all_reduce returned without the hanging rank" << std::endl;
      return 0;
    } else if (mode == "die") {
      // One collective first, so both ranks have surely finished joining the group: the death
      // then falls inside an all_reduce of rank 0 (this one or the next), never inside its join.
      auto a = torch::ones({4});
      group->all_reduce_mean({a});
      if (group->rank() == 1) std::_Exit(3);  // a crash: no goodbye to the group
      group->all_reduce_mean({a});
      std::cout << "all_reduce returned without the dead rank" << std::endl;
      return 0;
    } else {
      std::cerr << "unknown mode '" << mode << "'" << std::endl;
      return 64;
    }
  } catch (const mlo::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 2;
  }
  return 0;
}
