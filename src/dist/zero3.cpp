#include "zero3.h"

#include <mlo/base/error.h>
#include <mlo/dist/process_group.h>
#include <mlo/nn/chain.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

namespace mlo {
namespace detail {

struct Zero3::Flat {
  std::vector<at::Tensor> params;  // the module's parameters (their TensorImpls), in block order
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> offsets, numels;
  int64_t padded = 0;  // their elements, rounded up to a multiple of the ranks
  at::Tensor shard;    // this rank's slice of the padded flat vector: a leaf requiring grad
  // Where the parameters compute (the shard is elsewhere when offloaded to the host).
  at::TensorOptions compute;
};

struct Zero3::Unit {
  size_t block = 0;
  std::string name;
  std::vector<Flat> flats;
  std::vector<at::Tensor> shards;  // flats[k].shard, for the autograd function
  int gathered = 0;                // nesting depth of `Gathered` scopes
  std::shared_ptr<Traffic> traffic;
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A unit's parameters hold their gathered values while one of these lives (nested scopes gather
// once); then they are empty again and the gathered memory is freed.
class Gathered {
 public:
  Gathered(Zero3::Unit& unit, dist::ProcessGroup& group) : unit_(unit) {
    if (unit_.gathered > 0) {
      ++unit_.gathered;
      return;
    }
    at::NoGradGuard no_grad;
    for (auto& f : unit_.flats) {
      const at::Tensor full = at::empty({f.padded}, f.compute);
      // NOTE: a blocking copy for an offloaded shard: the host writes to the shard in place
      // right after a forward (a finite difference's perturbation, L2RW's look-ahead), which
      // must not overtake an asynchronous upload still reading it.
      const at::Tensor shard = f.shard.detach().to(f.compute.device());
      const auto start = std::chrono::steady_clock::now();
      group.all_gather(shard, full);
      unit_.traffic->gather_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++unit_.traffic->gathers;
      for (size_t i = 0; i < f.params.size(); ++i) {
        f.params[i].set_data(full.narrow(0, f.offsets[i], f.numels[i]).view(f.shapes[i]));
      }
    }
    // (counted once every flat is in place: a collective that throws leaves the unit empty)
    ++unit_.gathered;
  }
  ~Gathered() {
    if (unit_.gathered == 0 || --unit_.gathered > 0) return;
    for (auto& f : unit_.flats) {
      for (auto& p : f.params) p.set_data(at::empty({0}, p.options()));
    }
  }
  Gathered(const Gathered&) = delete;
  Gathered& operator=(const Gathered&) = delete;

 private:
  Zero3::Unit& unit_;
};

// What a unit's backward needs: the block's own graph (kept from forward) and where it starts.
struct UnitState : torch::CustomClassHolder {
  nn::ChainImpl* chain = nullptr;
  std::shared_ptr<Zero3::Unit> unit;
  std::shared_ptr<dist::ProcessGroup> group;
  std::string owner;
  at::Tensor input;                   // the block's input: a leaf of its own graph
  torch::autograd::Edge output;       // where the block's graph starts
  std::vector<int64_t> output_sizes;  // for a missing output gradient
  std::vector<uint32_t> shard_versions;
  bool consumed = false;
};

class UnitFunction : public torch::autograd::Function<UnitFunction> {
 public:
  // Gathers the block's parameters, runs it with its own graph (grad on: the activations are kept
  // as a plain forward keeps them) and frees the parameters; the graph stays in the state.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList shards,
                            c10::intrusive_ptr<UnitState> state) {
    for (const auto& s : shards) state->shard_versions.push_back(s._version());
    at::Tensor output;
    {
      Gathered gathered(*state->unit, *state->group);
      at::AutoGradMode enable(true);
      state->input = x.detach();
      if (x.requires_grad()) state->input.requires_grad_(true);
      output = state->chain->block(state->unit->block).forward(state->input);
    }
    MLO_CHECK(output.defined(), "problem '", state->owner, "': block '", state->unit->name,
              "' returned an undefined tensor");
    state->output_sizes = output.sizes().vec();
    if (output.requires_grad()) state->output = torch::autograd::impl::gradient_edge(output);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return output.detach();
  }

  // Regathers the parameters, differentiates the block's graph, frees the parameters and
  // reduce-scatters their gradient into the shards' (the mean over the ranks).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto state =
        c10::static_intrusive_pointer_cast<UnitState>(ctx->saved_data["state"].toCapsule());
    Zero3::Unit& unit = *state->unit;
    MLO_CHECK(!at::GradMode::is_enabled(), "problem '", state->owner,
              "': a second derivative (create_graph) through block '", unit.name,
              "', whose parameters strategy zero3 shards: the all-gather of a unit is "
              "differentiated once only; use a first-order hypergradient (darts, sama) or set "
              "data_parallel false for this problem");
    MLO_CHECK(!state->consumed, "problem '", state->owner, "': block '", unit.name,
              "' was differentiated twice (retain_graph through a unit sharded by zero3 is not "
              "supported)");
    state->consumed = true;
    for (size_t k = 0; k < unit.shards.size(); ++k) {
      MLO_CHECK(unit.shards[k]._version() == state->shard_versions[k], "problem '",
                state->owner, "': the parameters of block '", unit.name,
                "' were modified between its forward and its backward");
    }
    variable_list grads(1 + unit.flats.size() + 1);
    at::Tensor grad_output = grad_outputs.at(0);
    // (every rank must take part in the reduce-scatter below, with or without a gradient)
    if (!grad_output.defined()) {
      grad_output = at::zeros(state->output_sizes, unit.flats.front().compute);
    }
    torch::autograd::edge_list edges;
    std::vector<std::pair<size_t, size_t>> where;  // (flat, parameter) of each edge; flat -1: input
    const bool input_grad = state->input.requires_grad();
    if (input_grad) {
      edges.push_back(torch::autograd::impl::gradient_edge(state->input));
      where.emplace_back(static_cast<size_t>(-1), 0);
    }
    variable_list computed;
    {
      Gathered gathered(unit, *state->group);
      for (size_t k = 0; k < unit.flats.size(); ++k) {
        for (size_t i = 0; i < unit.flats[k].params.size(); ++i) {
          edges.push_back(torch::autograd::impl::gradient_edge(unit.flats[k].params[i]));
          where.emplace_back(k, i);
        }
      }
      if (state->output.function) {
        computed = torch::autograd::Engine::get_default_engine().execute(
            {state->output}, {grad_output}, /*keep_graph=*/false, /*create_graph=*/false,
            /*accumulate_grad=*/false, edges);
      }
    }
    state->output = torch::autograd::Edge();
    state->input = at::Tensor();
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> full(unit.flats.size());
    for (size_t k = 0; k < unit.flats.size(); ++k) {
      full[k] = at::zeros({unit.flats[k].padded}, unit.flats[k].compute);
    }
    for (size_t e = 0; e < computed.size(); ++e) {
      if (!computed[e].defined()) continue;
      const auto [k, i] = where[e];
      if (k == static_cast<size_t>(-1)) {
        grads[0] = computed[e];
        continue;
      }
      const Zero3::Flat& f = unit.flats[k];
      full[k].narrow(0, f.offsets[i], f.numels[i]).copy_(computed[e].reshape({-1}));
    }
    for (size_t k = 0; k < unit.flats.size(); ++k) {
      at::Tensor shard_grad = at::empty({unit.flats[k].shard.numel()}, full[k].options());
      const auto start = std::chrono::steady_clock::now();
      state->group->reduce_scatter_mean(full[k], shard_grad);
      unit.traffic->reduce_scatter_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++unit.traffic->reduce_scatters;
      full[k] = at::Tensor();
      // (autograd wants the gradient where its input, the shard, lives)
      const at::Tensor& shard = unit.flats[k].shard;
      grads[1 + k] = shard_grad.device() == shard.device() ? shard_grad : shard_grad.to(shard.device());
    }
    return grads;
  }
};

}  // namespace

class Zero3::Runner : public nn::BlockRunner {
 public:
  Runner(std::vector<std::shared_ptr<Unit>> by_block, std::shared_ptr<dist::ProcessGroup> group,
         std::string owner)
      : by_block_(std::move(by_block)), group_(std::move(group)), owner_(std::move(owner)) {}

  at::Tensor run(nn::ChainImpl& chain, size_t i, const at::Tensor& x) override {
    const std::shared_ptr<Unit>& unit = i < by_block_.size() ? by_block_[i] : nullptr;
    if (!unit) return chain.block(i).forward(x);
    if (!at::GradMode::is_enabled()) {
      Gathered gathered(*unit, *group_);
      return chain.block(i).forward(x);
    }
    auto state = c10::make_intrusive<UnitState>();
    state->chain = &chain;
    state->unit = unit;
    state->group = group_;
    state->owner = owner_;
    return UnitFunction::apply(x, at::TensorList(unit->shards), std::move(state));
  }

  std::vector<at::Tensor> leaves(const nn::ChainImpl& chain, size_t i) const override {
    if (i < by_block_.size() && by_block_[i]) return by_block_[i]->shards;
    std::vector<at::Tensor> out;
    for (const auto& p : chain.block_module(i)->parameters()) out.push_back(p);
    return out;
  }

 private:
  std::vector<std::shared_ptr<Unit>> by_block_;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::string owner_;
};

Zero3::Zero3(nn::ChainImpl& chain, torch::optim::Optimizer* optimizer,
             std::shared_ptr<dist::ProcessGroup> group_owner, std::string owner, bool offload)
    : chain_(chain), group_(std::move(group_owner)), owner_(std::move(owner)),
      traffic_(std::make_shared<Traffic>()) {
  MLO_INTERNAL_ASSERT(group_ != nullptr, "zero3 without a process group");
  dist::ProcessGroup& group = *group_;
  MLO_CHECK(!chain.block_runner(), "problem '", owner_, "': its chain's parameters are sharded "
            "already (one model in two problems under strategy zero3)");
  const int ranks = group.size();
  // The optimizer's group of each trainable parameter (one group without an optimizer).
  std::map<const void*, size_t> group_of;
  size_t groups = 1;
  if (optimizer != nullptr) {
    MLO_CHECK(optimizer->state().empty(), "problem '", owner_, "': strategy zero3 creates the ",
              "optimizer's state for the parameter shards, but the optimizer already has state ",
              "(a step taken, or an optimizer like Adagrad that creates it at construction); ",
              "use SGD, Adam, AdamW or RMSprop, fresh");
    groups = optimizer->param_groups().size();
    for (size_t g = 0; g < groups; ++g) {
      for (const auto& p : optimizer->param_groups()[g].params()) {
        group_of[p.unsafeGetTensorImpl()] = g;
      }
    }
  }
  std::map<const void*, size_t> seen;  // parameter -> block
  std::vector<std::shared_ptr<Unit>> by_block(chain.size());
  std::vector<std::vector<at::Tensor>> group_shards(groups);
  size_t covered = 0;
  at::NoGradGuard no_grad;
  for (size_t b = 0; b < chain.size(); ++b) {
    std::vector<std::vector<at::Tensor>> per_group(groups);
    for (const auto& p : chain.block_module(b)->parameters()) {
      if (!p.requires_grad()) continue;
      MLO_CHECK(p.numel() > 0, "problem '", owner_, "': a trainable parameter of block '",
                chain.block_name(b), "' holds no values: it is shared with another problem that ",
                "strategy zero3 shards already (set data_parallel false on one of them, or use ",
                "zero2), or it is empty (set requires_grad false on it)");
      const void* key = p.unsafeGetTensorImpl();
      const auto twice = seen.find(key);
      MLO_CHECK(twice == seen.end(), "problem '", owner_, "': blocks '",
                chain.block_name(twice == seen.end() ? b : twice->second), "' and '",
                chain.block_name(b), "' share a parameter; strategy zero3 shards each block's ",
                "parameters separately (tie them outside the chain, or use zero2)");
      seen[key] = b;
      size_t g = 0;
      if (optimizer != nullptr) {
        const auto it = group_of.find(key);
        MLO_CHECK(it != group_of.end(), "problem '", owner_, "': parameter of block '",
                  chain.block_name(b), "' requires grad but is in no group of the optimizer");
        g = it->second;
        ++covered;
      }
      per_group[g].push_back(p);
    }
    auto unit = std::make_shared<Unit>();
    unit->traffic = traffic_;
    unit->block = b;
    unit->name = chain.block_name(b);
    for (size_t g = 0; g < groups; ++g) {
      if (per_group[g].empty()) continue;
      Flat f;
      int64_t numel = 0;
      for (const auto& p : per_group[g]) {
        // (one device for the whole chain: the autograd engine runs one thread per device, and
        // the units' reduce-scatters must come in the same order on every rank)
        MLO_CHECK(p.scalar_type() == per_group[g].front().scalar_type() &&
                      p.device() == per_group[g].front().device() &&
                      (units_.empty() || p.device() == units_.front()->flats.front().compute.device()),
                  "problem '", owner_, "': the parameters of block '", unit->name,
                  "' differ in dtype or device (from each other or from earlier blocks); strategy "
                  "zero3 shards a block's parameters as one flat vector, and a chain on one device");
        f.params.push_back(p);
        f.shapes.push_back(p.sizes().vec());
        f.offsets.push_back(numel);
        f.numels.push_back(p.numel());
        numel += p.numel();
      }
      f.padded = (numel + ranks - 1) / ranks * ranks;
      f.compute = per_group[g].front().options().requires_grad(false);
      at::Tensor full = at::zeros({f.padded}, f.compute);
      for (size_t i = 0; i < f.params.size(); ++i) {
        full.narrow(0, f.offsets[i], f.numels[i]).copy_(f.params[i].detach().reshape({-1}));
      }
      const int64_t per_rank = f.padded / ranks;
      at::Tensor mine = full.narrow(0, group.rank() * per_rank, per_rank).clone();
      if (offload) {
        MLO_CHECK(f.compute.device().is_cuda(), "problem '", owner_, "': offload cpu needs the ",
                  "model on a CUDA device (it is on ", f.compute.device().str(), ")");
        mine = mine.to(at::kCPU).pin_memory();
      }
      f.shard = mine.requires_grad_(true);
      unit->shards.push_back(f.shard);
      group_shards[g].push_back(f.shard);
      shards_.push_back(f.shard);
      unit->flats.push_back(std::move(f));
    }
    if (unit->flats.empty()) continue;
    by_block[b] = unit;
    units_.push_back(unit);
  }
  MLO_CHECK(!units_.empty(), "problem '", owner_, "': strategy zero3 found no trainable ",
            "parameter in its chain");
  if (optimizer != nullptr) {
    size_t listed = 0;
    for (const auto& g : optimizer->param_groups()) listed += g.params().size();
    MLO_CHECK(listed == covered, "problem '", owner_, "': its optimizer holds ", listed - covered,
              " tensor(s) that are no trainable parameter of its chain; strategy zero3 shards the "
              "chain's parameters only");
    for (size_t g = 0; g < groups; ++g) optimizer->param_groups()[g].params() = group_shards[g];
  }
  // The values live in the shards from now on.
  for (auto& unit : units_) {
    for (auto& f : unit->flats) {
      for (auto& p : f.params) p.set_data(at::empty({0}, p.options()));
    }
  }
  runner_ = std::make_shared<Runner>(std::move(by_block), group_, owner_);
  chain_.set_block_runner(runner_);
}

Zero3::~Zero3() {
  if (chain_.block_runner() == runner_.get()) chain_.set_block_runner(nullptr);
}

bool Zero3::installed(const nn::ChainImpl& chain) {
  return dynamic_cast<const Runner*>(chain.block_runner()) != nullptr;
}

std::string Zero3::describe(const at::Tensor& tensor) const {
  for (const auto& unit : units_) {
    for (size_t k = 0; k < unit->flats.size(); ++k) {
      if (unit->flats[k].shard.unsafeGetTensorImpl() != tensor.unsafeGetTensorImpl()) continue;
      return "shard " + std::to_string(group_->rank() + 1) + " of " +
             std::to_string(group_->size()) + " of block '" + unit->name + "'" +
             (unit->flats.size() > 1 ? " (parameter group " + std::to_string(k) + ")" : "");
    }
  }
  return "";
}

std::vector<std::pair<const void*, at::Tensor>> Zero3::gather_copies() const {
  std::vector<std::pair<const void*, at::Tensor>> out;
  at::NoGradGuard no_grad;
  for (const auto& unit : units_) {
    Gathered gathered(*unit, *group_);
    for (const auto& f : unit->flats) {
      for (const auto& p : f.params) out.emplace_back(p.unsafeGetTensorImpl(), p.detach().clone());
    }
  }
  return out;
}

int64_t Zero3::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : shards_) bytes += s.numel() * static_cast<int64_t>(s.element_size());
  return bytes;
}

}  // namespace detail
}  // namespace mlo
