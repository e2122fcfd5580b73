// What the engine checks of a setup at initialization (Engine::initialize): each problem's
// configuration and the rules across its keys, what each lower problem's method refuses, and the
// problems' handles.
#include <mlo/core/engine.h>

#include "engine_nodes.h"

#include <mlo/core/method.h>
#include <mlo/memory/planner.h>
#include <mlo/memory/precision.h>
#include <mlo/nn/chain.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <typeinfo>

namespace mlo {

void Engine::check_config(const Problem& problem) const {
  const ProblemConfig& c = problem.config();
  const std::string& name = problem.name();
  MLO_CHECK(problem.has_module(), "problem '", name, "': no module; call module(...)");
  MLO_CHECK(problem.has_optimizer(), "problem '", name, "': no optimizer; call optimizer(...)");
  // The range of every key, as the YAML reader checks it (ProblemConfig::visit); then the rules
  // across keys.
  {
    ProblemConfig copy = c;
    const std::string failed = first_failed_check([&](Fields& f) { copy.visit(f); });
    MLO_CHECK(failed.empty(), "problem '", name, "': ", failed);
  }
  if (const auto broken = c.validate(config_)) {
    throw Error("problem '" + name + "': " + broken->key + ": " + broken->what);
  }
  const auto params = problem.module().parameters();
  const c10::DeviceType device = params.empty() ? c10::kCPU : params.front().device().type();
  MLO_CHECK(memory::precision_supported(c.precision(), device), "problem '", name, "': precision ",
            to_string(c.precision()), " cannot run on ", c10::DeviceTypeName(device),
            c.precision() == Precision::kFP16 ? " (fp16 needs a CUDA device and a CUDA build of "
                                                "mlo; on CPU use bf16)"
                                              : " (needs a CUDA build of mlo)");
  if (c.precision() == Precision::kBF16 && device == c10::kCPU && !memory::cpu_has_native_bf16()) {
    // (once per process: every level and every engine of a program would say the same)
    static bool warned = false;
    if (!warned) {
      warned = true;
      spdlog::warn("problem '{}': precision bf16 on a CPU without native bf16 ({}): LibTorch "
                   "converts to fp32 inside every kernel, so expect bf16 levels to run several "
                   "times slower than fp32 (up to an order of magnitude) and to save little "
                   "memory or none; fp32 is the better choice on this machine",
                   name, memory::cpu_bf16_shortfall());
    }
  }
  if (c.offload() == Offload::kCpu) {
    MLO_CHECK(dynamic_cast<const nn::ChainImpl*>(&problem.module()) != nullptr, "problem '", name,
              "': offload cpu moves the parameter shards of strategy zero3, which shards an ",
              "mlo::nn::Chain model only");
    MLO_CHECK(device == c10::kCUDA, "problem '", name, "': offload cpu keeps the parameter ",
              "shards in host memory away from a GPU, but this problem's parameters are on ",
              c10::DeviceTypeName(device, /*lower_case=*/true),
              " already (use device cuda, or offload none)");
  }
  try {
    memory::validate_options(c.checkpointing());
    // The method is built once, so that bad options fail at start also on a problem that is no
    // hop of any path.
    check_options(c.method());
    c.method().make();
  } catch (const Error& e) {
    throw Error("problem '" + name + "': " + e.what());
  }
}

void Engine::check_method(const detail::EngineNode& node) const {
  if (node.method == nullptr) return;
  const Problem& p = *node.problem;
  const auto shards = [this](const Problem& q) {
    // (under zero3 every run has a group, of one rank at least)
    return config_.strategy() == dist::Strategy::kZero3 &&
           q.config().data_parallel() && q.has_module() &&
           dynamic_cast<const nn::ChainImpl*>(&q.module()) != nullptr;
  };
  MethodContext context{p, node.parents.size(), nodes_->has_paths(&p), config_.strategy(),
                        p.config().data_parallel(), shards(p), {}};
  for (const size_t prev : node.hop_parents) {
    context.parent_problems.push_back(nodes_->at(prev).problem);
  }
  try {
    node.method->check(context);
    if (node.method->second_order()) {
      std::vector<const Problem*> involved{&p};
      for (const size_t parent : node.parents) involved.push_back(nodes_->at(parent).problem);
      for (const Problem* q : involved) {
        MLO_CHECK(!shards(*q), p.config().method().name(), " differentiates the loss of '",
                  p.name(), "' twice, through the parameters of '", q->name(),
                  "', which strategy zero3 shards (a unit's all-gather is differentiated once ",
                  "only); use darts or sama, or set data_parallel false for '", q->name(), "'");
      }
    }
  } catch (const Error& e) {
    throw Error("problem '" + p.name() + "': " + e.what());
  }
}

void Engine::link_handles() {
  std::string names;
  for (const auto& problem : problems_) names += (names.empty() ? "" : ", ") + problem->name();
  for (const auto& problem : problems_) {
    for (detail::HandleBase* handle : problem->handles_) {
      const std::string owner = "problem '" + problem->name() + "': its handle ";
      if (!handle->target().empty()) {
        const auto found =
            std::find_if(problems_.begin(), problems_.end(),
                         [&](const ProblemPtr& p) { return p->name() == handle->target(); });
        MLO_CHECK(found != problems_.end(), owner, "to '", handle->target(), "' (",
                  handle->type_name(), ") names no problem of this engine (its problems: ", names,
                  "); add that problem, or correct the name");
        MLO_CHECK(handle->accepts(**found), owner, "to '", handle->target(), "' wants a ",
                  handle->type_name(), ", but problem '", handle->target(), "' is a ",
                  detail::demangled(typeid(**found)));
        handle->link(found->get());
        continue;
      }
      std::vector<Problem*> matches;
      for (const auto& p : problems_) {
        if (p.get() != problem.get() && handle->accepts(*p)) matches.push_back(p.get());
      }
      std::string found_names;
      for (const Problem* p : matches) found_names += (found_names.empty() ? "" : ", ") + p->name();
      MLO_CHECK(!matches.empty(), owner, "to a ", handle->type_name(),
                " finds no such problem in this engine (its problems: ", names, ")");
      MLO_CHECK(matches.size() == 1, owner, "to a ", handle->type_name(), " finds several (",
                found_names, "); name the one it means: Handle<", handle->type_name(),
                ">{this, \"", matches.front()->name(), "\"}");
      handle->link(matches.front());
    }
  }
}

}  // namespace mlo
