#include "ablation.h"

#include <mlo/memory/precision.h>

#include "ablation_detail.h"

#include <mlo/base/error.h>
#include <mlo/build_config.h>
#include <mlo/memory/meter.h>
#include <mlo/run/experiment.h>
#include <mlo/run/memory_target.h>
#include <mlo/run/yaml.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

namespace mlo {
namespace run {
namespace {

std::string join_list(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : sep) + part;
  return out;
}

// The rank that held the most: a per-rank row reports its bytes, and the slowest rank's time.
AblationRowResult combine_ranks(const AblationRow& row, std::vector<AblationRowResult> ranks) {
  MLO_CHECK(!ranks.empty(), "ablation: row '", row.key, "' returned no rank's result");
  AblationRowResult out = *std::max_element(
      ranks.begin(), ranks.end(), [](const AblationRowResult& a, const AblationRowResult& b) {
        return a.peak_bytes < b.peak_bytes;
      });
  for (const auto& r : ranks) {
    out.seconds = std::max(out.seconds, r.seconds);
    out.measured_seconds = std::max(out.measured_seconds, r.measured_seconds);
    for (std::size_t k = 0; k < r.iteration_seconds.size() && k < out.iteration_seconds.size();
         ++k) {
      out.iteration_seconds[k] = std::max(out.iteration_seconds[k], r.iteration_seconds[k]);
    }
    out.rss_peak_bytes = std::max(out.rss_peak_bytes, r.rss_peak_bytes);
    out.rss_growth_bytes = std::max(out.rss_growth_bytes, r.rss_growth_bytes);
    out.reserved_peak_bytes = std::max(out.reserved_peak_bytes, r.reserved_peak_bytes);
  }
  out.row = row;
  out.ranks = static_cast<int64_t>(ranks.size());
  return out;
}

// Why `row`, of several ranks, cannot run in this build or on this machine ("" when it can):
// on the CPU its ranks talk over Gloo; on CUDA over NCCL, each on a GPU of its own.
std::string multi_rank_gap(const AblationRow& row, bool cuda) {
  if (row.ranks <= 1) return "";
  if (!cuda && !MLO_WITH_GLOO) {
    return "this build has no Gloo backend (LibTorch " TORCH_VERSION
           " ships no Gloo headers; "
           "build against Debian's LibTorch 1.13 for it)";
  }
  const auto gpus = static_cast<int64_t>(torch::cuda::device_count());
  if (cuda && !MLO_WITH_NCCL) return "this CUDA build has no NCCL backend";
  if (cuda && gpus < row.ranks) {
    return "its " + std::to_string(row.ranks) + " ranks need a GPU each, and " +
           std::to_string(gpus) + " is visible (--ranks 0 leaves such rows out)";
  }
  return "";
}

}  // namespace

const AblationRowResult& AblationResult::row(const std::string& key) const {
  for (const auto& r : rows) {
    if (r.row.key == key) return r;
  }
  throw Error("ablation: no row '" + key + "'");
}

std::vector<AblationRow> ablation_rows(
    const std::string& problem, int64_t batch, bool cuda, const AblationOptions& options,
    const std::vector<std::pair<std::string, int64_t>>& other_batches,
    const std::vector<std::string>& other_levels) {
  const auto chosen_rows = options.rows();
  const auto chosen = [&](const char* key) {
    return chosen_rows.empty() ||
           std::find(chosen_rows.begin(), chosen_rows.end(), key) != chosen_rows.end() ||
           std::find(chosen_rows.begin(), chosen_rows.end(), "all") != chosen_rows.end();
  };
  const auto applies = [&](const std::string& name) {
    return std::find(other_levels.begin(), other_levels.end(), name) != other_levels.end();
  };
  const int64_t g = std::max<int64_t>(options.accumulation(), 1);
  if (chosen("accumulation") && !options.batch_key().empty()) {
    MLO_CHECK(options.accumulation() >= 1, "ablation: accumulation must be >= 1, got ",
              options.accumulation());
    MLO_CHECK(batch % g == 0, "ablation: the batch ", batch,
              " is not a multiple of the accumulation ", g,
              " (the accumulation row keeps the effective batch)");
    for (const auto& [name, key] : options.other_batch_keys()) {
      for (const auto& [other, size] : other_batches) {
        MLO_CHECK(other != name || !applies(name) || size % g == 0, "ablation: ", name, "'s batch ",
                  size, " (", key, ") is not a multiple of the accumulation ", g,
                  " (the accumulation row keeps the effective batch of every level; --problem ",
                  problem, " leaves ", name, " out)");
      }
    }
  }
  if (chosen("checkpointing")) {
    MLO_CHECK(options.checkpoint_budget() > 0 && options.checkpoint_budget() <= 1,
              "ablation: checkpoint_budget must be in (0, 1], got ", options.checkpoint_budget());
  }
  const std::string p = "problems." + problem + ".";
  const std::string precision = cuda ? "fp16" : "bf16";
  const std::string gs = std::to_string(g);
  char budget[32];
  std::snprintf(budget, sizeof(budget), "%g", options.checkpoint_budget());

  AblationRow baseline{"baseline", "Baseline", {}, "fp32, no accumulation, everything stored", {}};
  AblationRow mixed{"precision",
                    "+mixed precision (" + precision + ")",
                    {p + "precision=" + precision},
                    precision + " autocast of every forward and loss of the levels named" +
                        (cuda ? ", with dynamic loss scaling" : "") +
                        "; weights, gradients and optimizer states stay fp32" +
                        (!cuda && !memory::cpu_has_native_bf16()
                             ? "; this CPU has no native bf16 (" + memory::cpu_bf16_shortfall() +
                                   "): every kernel converts to fp32 and back, so expect this "
                                   "row to run several times slower than the baseline (up to "
                                   "an order of magnitude) and to save little memory or none"
                             : std::string()),
                    {problem}};
  for (const auto& name : other_levels) {
    mixed.overrides.push_back("problems." + name + ".precision=" + precision);
    mixed.levels.push_back(name);
  }
  const std::string micro = std::to_string(batch / g);
  AblationRow accumulation{"accumulation",
                           "+gradient accumulation " + gs,
                           {p + "gradient_accumulation=" + gs, options.batch_key() + "=" + micro},
                           problem + ": " + gs + " micro-batches of " + micro,
                           {problem}};
  for (const auto& [name, key] : options.other_batch_keys()) {
    for (const auto& [other, size] : other_batches) {
      if (other != name) continue;
      if (applies(name)) {
        // NOTE: as Betty's `Config(gradient_accumulation=4)` on an upper problem: one
        // micro-step per lower unroll, an optimizer step every `g` of them.
        accumulation.overrides.push_back("problems." + name + ".gradient_accumulation=" + gs);
        accumulation.overrides.push_back(key + "=" + std::to_string(size / g));
        accumulation.note += ", " + name + ": " + gs + " micro-batches of " +
                             std::to_string(size / g) + " (one per " + problem +
                             " optimizer step, its optimizer stepping every " + gs + ")";
        accumulation.levels.push_back(name);
      } else {
        accumulation.overrides.push_back(key + "=" + std::to_string(size));
        accumulation.note += ", " + name + " keeps its batch of " + std::to_string(size);
      }
    }
  }
  accumulation.note += ": the same effective batch on every level";
  AblationRow checkpointing{
      "checkpointing",
      "+checkpointing (optimal, budget " + std::string(budget) + ")",
      {p + "checkpointing.strategy=optimal", p + "checkpointing.budget_fraction=" + budget},
      "the planner's fastest plan within " + std::string(budget) +
          " of the no-checkpoint activation peak, on " + problem +
          "'s model (which every level's forward through it runs)",
      {problem}};
  AblationRow activations{
      "activations",
      "+memory-efficient activations",
      {},
      "the model's activation in its memory-efficient form, and residual sums in place: Swish "
      "keeps only its input instead of its input and sigmoid's output (one activation less per "
      "use until backward); ReLU runs in place, which removes a short-lived copy only, since "
      "ReLU's backward keeps just its output either way",
      {problem}};
  for (const auto& o : options.activation_overrides()) activations.overrides.push_back(p + o);
  if (options.activation_overrides().empty()) {
    activations.unavailable = "the experiment names no memory-efficient form of its model";
  }
  if (options.batch_key().empty()) {
    accumulation.unavailable = "the experiment names no batch-size key for " + problem;
  }
  AblationRow finite_difference{
      "finite_difference",
      "+in-place finite difference",
      {},
      "DARTS perturbs the weights in place and steps them back instead of restoring a copy: one "
      "copy of the weights less at the upper step's peak, for a rounding drift of a few ulps "
      "per meta-iteration (darts.exact_restore=false)",
      {problem}};
  for (const auto& o : options.finite_difference_overrides()) {
    finite_difference.overrides.push_back(p + o);
  }
  AblationRow all{"all", "+all of them", {}, "every feature above together (in one process)", {}};
  for (const auto* r : {&mixed, &accumulation, &checkpointing, &activations, &finite_difference}) {
    if (!r->unavailable.empty()) continue;
    all.overrides.insert(all.overrides.end(), r->overrides.begin(), r->overrides.end());
    for (const auto& level : r->levels) {
      if (std::find(all.levels.begin(), all.levels.end(), level) == all.levels.end()) {
        all.levels.push_back(level);
      }
    }
  }
  std::vector<AblationRow> rows{baseline,          mixed, accumulation, checkpointing, activations,
                                finite_difference, all};
  if (options.ranks() > 1) {
    const std::string n = std::to_string(options.ranks());
    AblationRow data_parallel{
        "data_parallel",
        "+data parallel, " + n + " ranks (per rank)",
        {"engine.strategy=distributed"},
        "each of " + n + " processes holds the whole model and optimizer state and runs 1/" + n +
            " of every batch (per rank: the largest of any rank; threads split between them)",
        {"every level"},
        options.ranks()};
    AblationRow zero{"zero",
                     "+ZeRO-2, " + n + " ranks (per rank)",
                     {"engine.strategy=zero2"},
                     "data parallel, and each rank keeps the optimizer state and the gradients "
                     "of its share of the parameters only",
                     {"every level"},
                     options.ranks()};
    AblationRow zero3{"zero3",
                      "+ZeRO-3, " + n + " ranks (per rank)",
                      {"engine.strategy=zero3"},
                      "ZeRO-2, and each rank keeps its share of the parameters of every Chain "
                      "model, gathering one block at a time around its forward and backward",
                      {"every level"},
                      options.ranks()};
    rows.push_back(data_parallel);
    rows.push_back(zero);
    rows.push_back(zero3);
  }
  if (chosen_rows.empty()) return rows;
  std::vector<AblationRow> picked{baseline};
  for (const auto& key : chosen_rows) {
    const auto it =
        std::find_if(rows.begin(), rows.end(), [&](const AblationRow& r) { return r.key == key; });
    std::string names;
    for (const auto& r : rows) names += (names.empty() ? "" : ", ") + r.key;
    MLO_CHECK(it != rows.end(), "ablation: unknown row '", key, "' (rows: ", names, ")");
    const bool twice = std::any_of(picked.begin(), picked.end(),
                                   [&](const AblationRow& r) { return r.key == key; });
    if (!twice) picked.push_back(*it);
  }
  return picked;
}

AblationResult run_ablation(const std::string& config_path,
                            const std::vector<std::string>& given_overrides,
                            const AblationOptions& options,
                            const std::function<void(const std::string&)>& progress,
                            const RankRunner& rank_runner, const AblationHooks& hooks) {
  MLO_CHECK(options.iterations() >= 1, "ablation: iterations must be >= 1, got ",
            options.iterations());
  MLO_CHECK(options.rounds() >= 0, "ablation: rounds must be >= 0, got ", options.rounds());
  MLO_CHECK(options.round_seconds() >= 0 && std::isfinite(options.round_seconds()),
            "ablation: round_seconds must be a finite number >= 0 (0: one meta-iteration per "
            "round), got ", options.round_seconds());
  MLO_CHECK(options.batch() >= 0, "ablation: batch must be >= 0 (0: as configured), got ",
            options.batch());
  // A batch asked for goes through the experiment's own batch-size key.
  std::vector<std::string> overrides = given_overrides;
  if (options.batch() > 0) {
    std::string key = options.batch_key();
    if (key.empty()) {
      const RunConfig config = load_run_config(config_path, overrides);
      key = memory_target(*make_experiment(config), config.experiment, "mlo ablate")
                .memory_keys()
                .batch_key;
    }
    MLO_CHECK(!key.empty(), "ablation: a batch of ", options.batch(), " was asked for, but the ",
              "experiment names no batch-size key");
    overrides.push_back(key + "=" + std::to_string(options.batch()));
  }
  AblationResult result;
  result.config_path = config_path;
  result.overrides = overrides;
  result.iterations = options.iterations();

  AblationOptions resolved = options;
  // The base experiment: its name, data, problems and batch.
  std::vector<std::string> problem_names;
  std::vector<std::pair<std::string, int64_t>> other_batches;
  {
    const RunConfig config = run::load_run_config(config_path, overrides);
    auto experiment = make_experiment(config);
    MemoryTarget& target = memory_target(*experiment, config.experiment, "mlo ablate");
    result.experiment = config.name;
    // The experiment's own keys, where the options leave them to it.
    const MemoryKeys keys = target.memory_keys();
    if (resolved.batch_key().empty()) resolved.batch_key(keys.batch_key);
    if (resolved.other_batch_keys().empty()) resolved.other_batch_keys(keys.other_batch_keys);
    if (resolved.activation_overrides().empty()) {
      resolved.activation_overrides(keys.efficient_activation);
    }
    result.problem = options.problem().empty() ? target.main_problem() : options.problem();
    result.description = experiment->describe();
    result.model = target.model_name(result.problem);
    result.synthetic = experiment->synthetic();
    result.batch = target.sample_batch(result.problem).size();
    for (const auto& p : experiment->engine().problems()) {
      problem_names.push_back(p->name());
      if (p->name() == result.problem) continue;
      if (const auto batch = detail::try_sample_batch(target, p->name())) {
        other_batches.emplace_back(p->name(), batch->size());
      }
    }
    result.threads = torch::get_num_threads();  // after the experiment applied `threads:`
    const auto params = experiment->problem(result.problem)->module().parameters();
    if (!params.empty()) result.device = params.front().device().str();
  }
  const bool cuda = result.device.rfind("cuda", 0) == 0;
  // The level-wise features apply to every level unless --problem narrowed them.
  std::vector<std::string> other_levels;
  if (options.problem().empty()) {
    for (const auto& name : problem_names) {
      if (name != result.problem) other_levels.push_back(name);
    }
  }
  const auto rows =
      ablation_rows(result.problem, result.batch, cuda, resolved, other_batches, other_levels);
  const bool any_multi_rank = std::any_of(rows.begin(), rows.end(), [&](const AblationRow& row) {
    return row.ranks > 1 && multi_rank_gap(row, cuda).empty() && rank_runner;
  });
  // The baseline measured again around the rows of several ranks (detail::measure_bracket).
  std::vector<double> bracket;  // the latest, while no single-process row ran after it
  const auto measure_bracket = [&](const std::string& when) {
    std::vector<std::string> all = overrides;
    all.insert(all.end(), rows.front().overrides.begin(), rows.front().overrides.end());
    return detail::measure_bracket(config_path, all, options, when, progress, result);
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (progress) {
      const std::string overrides =
          rows[i].overrides.empty() ? "" : "  --set " + join_list(rows[i].overrides, " --set ");
      progress("[" + std::to_string(i + 1) + "/" + std::to_string(rows.size()) + "] " +
               rows[i].name + overrides);
    }
    if (const std::string why = rows[i].unavailable.empty() ? multi_rank_gap(rows[i], cuda)
                                                            : rows[i].unavailable;
        !why.empty()) {
      // NOTE: say so instead of launching ranks that would fail.
      if (progress) progress("      " + rows[i].name + ": left out: " + why);
      result.missing.push_back(rows[i].name + ": left out: " + why);
      continue;
    }
    AblationRowResult row;
    try {
      std::vector<std::string> all = overrides;
      all.insert(all.end(), rows[i].overrides.begin(), rows[i].overrides.end());
      // On CUDA the ranks' collectives go through NCCL, one GPU per rank (cuda:LOCAL_RANK).
      if (rows[i].ranks > 1 && cuda) all.push_back("engine.backend=nccl");
      // Rows of several ranks cannot join the timing rounds: each measures as many
      // meta-iterations as there are rounds, and so does the baseline, here, just before and
      // just after it; the ratio is of their medians (detail::time_own_processes).
      const bool timed_apart =
          options.rounds() > 0 && any_multi_rank && (i == 0 || rows[i].ranks > 1);
      const int64_t iterations =
          timed_apart ? std::max(options.iterations(), options.rounds()) : options.iterations();
      const auto earlier =
          rows[i].ranks <= 1 && hooks.finished ? hooks.finished(rows[i], all, iterations)
                                               : std::nullopt;
      if (earlier) {
        bracket.clear();
        row = *earlier;
        row.row = rows[i];
        if (progress) progress("      kept from the earlier run (its measurement file)");
        if (i == 0 && timed_apart)
          bracket.assign(row.iteration_seconds.begin(),
                         row.iteration_seconds.begin() +
                             std::min<std::ptrdiff_t>(options.rounds(),
                                                      static_cast<std::ptrdiff_t>(
                                                          row.iteration_seconds.size())));
      } else if (rows[i].ranks <= 1) {
        bracket.clear();  // no longer next to the rows of several ranks that follow
        row = measure_ablation_row(config_path, all, result.problem, iterations);
        row.row = rows[i];
        // The baseline just measured is the bracket before a row of several ranks right after.
        if (i == 0 && timed_apart)
          bracket.assign(row.iteration_seconds.begin(),
                         row.iteration_seconds.begin() + options.rounds());
      } else {
        MLO_CHECK(static_cast<bool>(rank_runner), "needs processes of its own (mlo ablate ",
                  "starts them; run_ablation was given no RankRunner)");
        // The ranks share the cores this process had.
        all.push_back("threads=" +
                      std::to_string(std::max<int64_t>(1, result.threads / rows[i].ranks)));
        if (timed_apart && bracket.empty()) bracket = measure_bracket("before " + rows[i].name);
        const std::vector<double> before = std::move(bracket);
        bracket.clear();  // a row that fails leaves none: the next row measures its own
        row = combine_ranks(rows[i], rank_runner(all, rows[i].ranks, iterations));
        if (timed_apart) bracket = measure_bracket("after " + rows[i].name);
        row.baseline_before_seconds = before;
        row.baseline_after_seconds = bracket;
      }
    } catch (const std::exception& e) {
      // The baseline is every ratio's reference: without it there is no table. Another row's
      // failure (out of memory, a feature the model does not support) costs that row only.
      if (i == 0) throw;
      const std::string why = rows[i].name + ": failed: " + e.what();
      if (progress) progress("      " + why);
      result.missing.push_back(why);
      continue;
    }
    row.seconds = row.measured_seconds;
    const auto& base = result.rows.empty() ? row : result.rows.front();
    row.peak_ratio = static_cast<double>(row.peak_bytes) / static_cast<double>(base.peak_bytes);
    row.time_ratio = row.measured_seconds / base.measured_seconds;
    row.time_ratio_low = row.time_ratio_high = row.time_ratio;
    row.rss_ratio = base.rss_growth_bytes > 0 ? static_cast<double>(row.rss_growth_bytes) /
                                                    static_cast<double>(base.rss_growth_bytes)
                                              : 0.0;
    row.over_floor = row.floor_bytes > 0 ? static_cast<double>(row.peak_bytes) /
                                               static_cast<double>(row.floor_bytes)
                                         : 0.0;
    if (progress) {
      char line[256];
      std::snprintf(line, sizeof(line),
                    "      peak %.1f MiB (x%.3f), %.2f s/iteration while metered (x%.3f), "
                    "floor %.1f MiB, peak/floor %.2f, RSS +%.1f MiB",
                    memory::to_mib(row.peak_bytes), row.peak_ratio, row.seconds, row.time_ratio,
                    memory::to_mib(row.floor_bytes), row.over_floor,
                    memory::to_mib(row.rss_growth_bytes));
      progress(line);
    }
    result.rows.push_back(std::move(row));
    if (hooks.row_done) hooks.row_done(result.rows.back(), result);
  }
  if (options.rounds() > 0)
    detail::time_in_rounds(config_path, overrides, options.rounds(), options.round_seconds(),
                           progress, result);
  detail::time_own_processes(options.rounds(), result);
  return result;
}

}  // namespace run
}  // namespace mlo
