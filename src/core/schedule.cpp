#include <mlo/core/schedule.h>

#include <mlo/base/archive.h>
#include <mlo/base/error.h>
#include <mlo/core/config.h>

#include <torch/serialize/archive.h>

#include <algorithm>

namespace mlo {

Schedule::Level Schedule::Level::of(const ProblemConfig& config) {
  Level level;
  level.unroll_steps = config.unroll_steps();
  level.gradient_accumulation = config.gradient_accumulation();
  level.warmup_steps = config.warmup_steps();
  level.roll_back = config.roll_back();
  return level;
}

Schedule::Schedule(std::vector<Level> levels, std::vector<std::vector<size_t>> parents) {
  MLO_INTERNAL_ASSERT(parents.size() == levels.size(), "a schedule needs the parents of every level");
  nodes_.resize(levels.size());
  for (size_t i = 0; i < levels.size(); ++i) {
    Node& n = nodes_[i];
    n.level = levels[i];
    n.period = std::max<int64_t>(1, levels[i].unroll_steps) *
               std::max<int64_t>(1, levels[i].gradient_accumulation);
    n.parents = std::move(parents[i]);
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (const size_t p : nodes_[i].parents) {
      MLO_INTERNAL_ASSERT(p < nodes_.size() && p != i, "a schedule edge to no level");
      nodes_[p].children.push_back(i);
    }
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].ready.assign(nodes_[i].children.size(), false);
    if (nodes_[i].children.empty()) leaves_.push_back(i);
  }
}

void Schedule::global_step(const std::function<void(const Step&)>& take) {
  for (const size_t leaf : leaves_) step(leaf, take);
}

void Schedule::step(size_t i, const std::function<void(const Step&)>& take) {
  Node& n = nodes_[i];
  if (!std::all_of(n.ready.begin(), n.ready.end(), [](bool ready) { return ready; })) return;
  const bool unroll_start = n.unroll_start;
  n.unroll_start = false;
  take(Step{i, unroll_start, /*redo=*/false});
  ++n.local;
  const int64_t accumulation = std::max<int64_t>(1, n.level.gradient_accumulation);
  if (n.local % accumulation == 0) ++n.optimizer;
  const bool boundary = n.local % n.period == 0;
  // An unroll ends at every period boundary, also during warmup: the next step starts a new one
  // (and takes the roll-back snapshot), so a redo never rewinds into the warmup.
  if (boundary) n.unroll_start = true;
  if (boundary && n.local > n.level.warmup_steps) {
    for (const size_t parent : n.parents) {
      Node& p = nodes_[parent];
      const auto it = std::find(p.children.begin(), p.children.end(), i);
      p.ready[static_cast<size_t>(it - p.children.begin())] = true;
      step(parent, take);
    }
    if (n.level.roll_back) {
      take(Step{i, /*unroll_start=*/false, /*redo=*/true});
      // (the redo starts from the unroll's first state and takes one optimizer step)
      n.optimizer = n.optimizer_at_unroll_start + 1;
    }
  }
  if (boundary) n.optimizer_at_unroll_start = n.optimizer;
  n.ready.assign(n.ready.size(), false);
}

void Schedule::save(torch::serialize::OutputArchive& archive,
                    const std::vector<std::string>& names) const {
  MLO_INTERNAL_ASSERT(names.size() == nodes_.size(), "one name per level");
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    torch::serialize::OutputArchive sub;
    sub.write("ready", c10::IValue(std::vector<int64_t>(n.ready.begin(), n.ready.end())));
    sub.write("unroll_start", c10::IValue(n.unroll_start));
    archive.write(names[i], sub);
  }
}

void Schedule::load(torch::serialize::InputArchive& archive, const std::vector<std::string>& names,
                    const std::vector<int64_t>& local, const std::vector<int64_t>& optimizer) {
  MLO_INTERNAL_ASSERT(names.size() == nodes_.size() && local.size() == nodes_.size() &&
                          optimizer.size() == nodes_.size(),
                      "one name and count per level");
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    torch::serialize::InputArchive sub;
    MLO_CHECK(archive.try_read(names[i], sub), "engine state: no schedule for problem '",
              names[i], "' (saved from a different experiment?)");
    const std::string owner = "schedule of problem '" + names[i] + "'";
    const auto ready = mlo::archive::read_ints(sub, "ready", owner);
    MLO_CHECK(ready.size() == n.ready.size(), "engine state: problem '", names[i],
              "' was saved with ", ready.size(), " children, not ", n.ready.size(),
              " (saved from a different experiment?)");
    n.ready.assign(ready.begin(), ready.end());
    n.unroll_start = mlo::archive::read_bool(sub, "unroll_start", owner);
    n.local = local[i];
    n.optimizer = optimizer[i];
    // (a resumed roll-back level saved mid-unroll counts from here; only whole-run counts from
    // the start, `count_optimizer_steps`, read this)
    n.optimizer_at_unroll_start = optimizer[i];
  }
}

std::vector<int64_t> count_optimizer_steps(const std::vector<Schedule::Level>& levels,
                                           const std::vector<std::vector<size_t>>& parents,
                                           int64_t global_steps) {
  Schedule schedule(levels, parents);
  for (int64_t t = 0; t < global_steps; ++t) schedule.global_step([](const Schedule::Step&) {});
  std::vector<int64_t> out;
  for (size_t i = 0; i < levels.size(); ++i) out.push_back(schedule.optimizer_steps(i));
  return out;
}

}  // namespace mlo
