// `mlo ablate` end to end on a tiny ResNet and batch: every row is measured; the model state
// and the floor's persistent part are the closed-form sizes of ResNet-32, the MWN and their
// optimizer states; the baseline's peak is that state plus what the engine's exact meter
// measures on the same configuration run here; every floor is at most its peak; the CSV and
// JSON read back to the same numbers, and the chart is a real PNG.
#include "support/text_files.h"
#include "support/sanitizer.h"
#include "support/scratch.h"
#include "ablate/ablate.h"
#include "ablate/ablation_detail.h"
#include "support/tiny_reweighting.h"

#include <mlo/build_config.h>
#include <mlo/run/yaml.h>
#include <mlo/memory/meter.h>
#include "ablate/ablation_report.h"
#include <mlo/run/experiment.h>

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace ablate_test {

namespace fs = std::filesystem;

using Catch::Matchers::Contains;

namespace {

// ResNet-32 under an MWN, DARTS, batch 16 (meta batch 4: the classifier's own step holds the
// peak, which accumulation lowers), on synthetic CIFAR-shaped data.
const char* kTiny = R"(experiment: reweighting
name: tiny_ablation
seed: 0
threads: 1
engine: {train_iters: 4}
data: {dataset: synthetic, synthetic_size: 12, synthetic_test_size: 2, imbalance: 2,
       meta_size: 20, valid_size: 20, batch_size: 16, meta_batch_size: 4, augment: false}
problems:
  classifier:
    model: {name: resnet32}
    optimizer: {name: sgd, lr: 0.01, momentum: 0.9}
    method: darts
  reweighter:
    model: {name: mwn, hidden: 8}
    optimizer: {name: adam, lr: 0.001}
)";

// The same pair with the registry's small CNN in place of ResNet-32, for the cases about the
// harness's files and resume, which need rows measured but not a ResNet's rows.
std::string small_cnn_config() {
  std::string config = kTiny;
  const std::string resnet = "model: {name: resnet32}";
  config.replace(config.find(resnet), resnet.size(), "model: {name: cnn}");
  return config;
}

using mlo_test::csv_fields;
using mlo_test::read_text;

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

// Closed-form sizes of the tiny config's models (fp32), counted from their architectures.
// ResNet-32 for CIFAR-10 with projection shortcuts: a 3x3 stem conv 3->16 with batch norm; three
// stages of 5 basic blocks (two 3x3 convs with batch norm each) of widths 16, 32, 64, the first
// block of stages 2 and 3 with a 1x1 projection conv and its batch norm; a linear head 64->10.
constexpr int64_t kResNet32Params =
    (9 * 3 * 16 + 2 * 16) +                                        // stem
    5 * (2 * 9 * 16 * 16 + 2 * 2 * 16) +                           // stage 1
    (9 * 16 * 32 + 9 * 32 * 32 + 2 * 2 * 32 + 16 * 32 + 2 * 32) +  // stage 2, first
    4 * (2 * 9 * 32 * 32 + 2 * 2 * 32) +                           // stage 2, rest
    (9 * 32 * 64 + 9 * 64 * 64 + 2 * 2 * 64 + 32 * 64 + 2 * 64) +  // stage 3, first
    4 * (2 * 9 * 64 * 64 + 2 * 2 * 64) +                           // stage 3, rest
    (64 * 10 + 10);                                                // head
static_assert(kResNet32Params == 466906, "ResNet-32's documented parameter count");
// Batch-norm buffers: running mean and variance per channel (float), one step count (int64)
// per layer: 33 layers over 16 + 2*5*16 + 2*5*32 + 32 + 2*5*64 + 64 = 1232 channels.
constexpr int64_t kResNet32BufferBytes = 2 * 1232 * 4 + 33 * 8;
// MWN with 8 hidden units: Linear(1, 8) and Linear(8, 1).
constexpr int64_t kMwnParams = (8 + 8) + (8 + 1);
constexpr int64_t kStateBytes = (kResNet32Params + kMwnParams) * 4 + kResNet32BufferBytes;
// SGD with momentum: one buffer per parameter; Adam: two moments per parameter.
constexpr int64_t kOptimizerStateBytes = kResNet32Params * 4 + 2 * kMwnParams * 4;

uint32_t big_endian(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

}  // namespace

TEST_CASE("mlo ablate: every row on a tiny ResNet, ratios from the meter, files read back",
          "[cli][ablate]") {
  const fs::path dir = mlo_test::scratch_dir("ablate_test");
  const std::string config = (dir / "tiny.yaml").string();
  std::ofstream(config) << kTiny;

  mlo::cli::AblateOptions options;
  options.out_dir = (dir / "out").string();
  // Each round times a row for at least 0.2 s: several meta-iterations of this tiny model.
  options.ablation.iterations(1).rounds(2).round_seconds(0.2);
  options.program = MLO_TOOL;  // the per-rank rows run `mlo ablate-rank`
  const auto result = mlo::cli::ablate_command(config, {}, options);

  std::vector<std::string> keys{"baseline",   "precision",         "accumulation", "checkpointing",
                                "activations", "finite_difference", "all"};
  if (MLO_WITH_GLOO) {
    keys.insert(keys.end(), {"data_parallel", "zero", "zero3"});
  } else {
    // A build without Gloo (against a LibTorch wheel) leaves the rows of 2 CPU ranks out.
    REQUIRE(result.missing.size() == 3);
    for (const auto& why : result.missing) CHECK_THAT(why, Contains("has no Gloo backend"));
  }
  REQUIRE(result.rows.size() == keys.size());
  CHECK(result.synthetic);
  CHECK(result.batch == 16);
  const auto& base = result.row("baseline");
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& row = result.rows[i];
    INFO("row " << row.row.key << ": peak " << row.peak_bytes << ", floor " << row.floor_bytes
                << " (" << row.persistent_bytes << " persistent + " << row.transient_bytes << " at "
                << row.floor_instant << ")");
    CHECK(row.row.key == keys[i]);
    // Every row holds both models whole (ZeRO-1/2 shard optimizer states, not parameters), but
    // ZeRO-3, whose ranks keep half of the ResNet's parameters each (the MWN is no Chain: whole),
    // padded to an even length per block (at most one float per block; ResNet-32 has 17).
    const bool zero3 = row.row.key == "zero3";
    const int64_t classifier = zero3 ? kResNet32Params * 4 / 2 : kResNet32Params * 4;
    const int64_t padding = zero3 ? 17 * 4 : 0;
    CHECK(row.state_bytes >= kStateBytes - kResNet32Params * 4 + classifier);
    CHECK(row.state_bytes <= kStateBytes - kResNet32Params * 4 + classifier + padding);
    // The floor is a lower bound of what the meter measured, above the model state: its largest
    // instant holds at least the classifier's gradients (one per parameter it keeps).
    CHECK(row.floor_bytes <= row.peak_bytes);
    CHECK(row.floor_bytes >= row.state_bytes + classifier);
    CHECK(row.transient_bytes >= classifier);
    CHECK(row.seconds > 0);
    CHECK(row.measured_seconds > 0);
    // Each level's parameter footprint, in closed form: ResNet-32 and its SGD momentum, the MWN
    // and its two Adam moments; gradients the size of the trainable parameters.
    REQUIRE(row.footprints.size() == 2);
    CHECK(row.footprints[0].problem == "classifier");
    CHECK(row.footprints[0].parameters >= classifier);
    CHECK(row.footprints[0].parameters <= classifier + padding);
    CHECK(row.footprints[0].gradients == row.footprints[0].parameters);
    CHECK(row.footprints[1].problem == "reweighter");
    CHECK(row.footprints[1].parameters == kMwnParams * 4);
    CHECK(row.footprints[1].gradients == kMwnParams * 4);
    if (row.row.key != "zero" && !zero3) {
      CHECK(row.footprints[0].optimizer_state == kResNet32Params * 4);
      // The warm-up runs until every level has stepped: the reweighter's Adam has state even
      // where it accumulates over 4 of its steps (one per classifier step).
      CHECK(row.footprints[1].optimizer_state == 2 * kMwnParams * 4);
    }
    // Timing: single-process rows in the 2 interleaved rounds, their ratio the median (of two:
    // the mean) of the per-round ratios to the baseline, within their range.
    if (row.ranks == 1) {
      CHECK(row.baseline_before_seconds.empty());
      CHECK(row.baseline_after_seconds.empty());
      REQUIRE(row.round_seconds.size() == 2);
      const double r0 = row.round_seconds[0] / base.round_seconds[0];
      const double r1 = row.round_seconds[1] / base.round_seconds[1];
      CHECK(row.time_ratio == Approx((r0 + r1) / 2));
      CHECK(row.time_ratio_low == Approx(std::min(r0, r1)));
      CHECK(row.time_ratio_high == Approx(std::max(r0, r1)));
      CHECK(row.seconds == Approx((row.round_seconds[0] + row.round_seconds[1]) / 2));
      // As many whole meta-iterations per round as reach 0.2 s at the pace measured with the
      // meter, and no more.
      INFO("measured " << row.measured_seconds << " s/iteration, " << row.round_iterations
                       << " per round");
      CHECK(row.round_iterations * row.measured_seconds >= 0.2);
      CHECK((row.round_iterations == 1 || (row.round_iterations - 1) * row.measured_seconds < 0.2));
    } else {
      // Ranks: the median (of two: the mean) of its two metered meta-iterations over that of
      // the baseline's measured just before and just after it (2 each; of four: the mean of
      // the middle two); the range against the slower and the faster bracket.
      CHECK(row.round_seconds.empty());
      CHECK(row.round_iterations == 0);
      REQUIRE(row.baseline_before_seconds.size() == 2);
      REQUIRE(row.baseline_after_seconds.size() == 2);
      std::vector<double> four = row.baseline_before_seconds;
      four.insert(four.end(), row.baseline_after_seconds.begin(),
                  row.baseline_after_seconds.end());
      std::sort(four.begin(), four.end());
      CHECK(four[0] > 0);
      const double before = (row.baseline_before_seconds[0] + row.baseline_before_seconds[1]) / 2;
      const double after = (row.baseline_after_seconds[0] + row.baseline_after_seconds[1]) / 2;
      const double own = (row.iteration_seconds[0] + row.iteration_seconds[1]) / 2;
      CHECK(row.seconds == Approx(own));
      CHECK(row.time_ratio == Approx(own / ((four[1] + four[2]) / 2)));
      CHECK(row.time_ratio_low == Approx(std::min(row.iteration_seconds[0],
                                                  row.iteration_seconds[1]) /
                                         std::max(before, after)));
      CHECK(row.time_ratio_high == Approx(std::max(row.iteration_seconds[0],
                                                   row.iteration_seconds[1]) /
                                          std::min(before, after)));
    }
  }
  CHECK(result.rounds == 2);
  CHECK(result.round_seconds == 0.2);
  CHECK(result.timing_error.empty());
  CHECK(base.time_ratio == 1.0);
  // Levels: precision and accumulation on both, the model's features on the classifier.
  using Levels = std::vector<std::string>;
  CHECK(result.row("precision").row.levels == Levels{"classifier", "reweighter"});
  CHECK(result.row("accumulation").row.levels == Levels{"classifier", "reweighter"});
  CHECK(result.row("checkpointing").row.levels == Levels{"classifier"});
  CHECK(result.row("activations").row.levels == Levels{"classifier"});
  CHECK(result.row("all").row.levels == Levels{"classifier", "reweighter"});
  // The floor's persistent part: parameters, buffers and the optimizer states, whole on one
  // process and on each data-parallel rank; ZeRO-2 keeps a rank's share of the states.
  for (const auto& row : result.rows) {
    INFO("row " << row.row.key);
    if (row.row.key != "zero" && row.row.key != "zero3") {
      CHECK(row.persistent_bytes == kStateBytes + kOptimizerStateBytes);
    }
    // The measured window: one meta-iteration, extended to 4 where the reweighter accumulates
    // over 4 of its steps (its optimizer step is in the window); the baseline measures as many
    // as there are rounds (2) for the rows of several ranks to compare with.
    const bool accumulating = row.row.key == "accumulation" || row.row.key == "all";
    const std::size_t window =
        accumulating ? 4 : (row.row.key == "baseline" || row.ranks > 1) && MLO_WITH_GLOO ? 2 : 1;
    CHECK(row.iteration_seconds.size() == window);
  }
  if (MLO_WITH_GLOO) {
    CHECK(result.row("zero").persistent_bytes > kStateBytes);
    CHECK(result.row("zero").persistent_bytes < kStateBytes + kOptimizerStateBytes);
  }
  // Below the reweighter, DARTS holds at one instant the reweighter's gradients, v (one entry per
  // classifier parameter), the copy of the classifier's weights (exact_restore), and a forward;
  // without the copy (in-place finite difference) one classifier-sized vector less.
  CHECK(base.transient_bytes > (kMwnParams + 2 * kResNet32Params) * 4);
  CHECK(result.row("finite_difference").transient_bytes > (kMwnParams + kResNet32Params) * 4);
  {
    // The baseline's peak is the state above plus the engine's exact meter's peak, measured here
    // independently on the same configuration: one warm-up meta-iteration (one global step:
    // unroll 1, no accumulation), then one measured.
    auto experiment = mlo::run::make_experiment(
        mlo::run::load_run_config(config, {"engine.track_memory=true", "engine.valid_step=0",
                                          "engine.log_step=0", "engine.save_step=0"}));
    auto& engine = experiment->engine();
    engine.initialize();
    for (const auto& p : engine.problems()) p->train();
    engine.step();
    engine.step();
    CHECK(base.peak_bytes == kStateBytes + engine.last_step_peak_bytes());
  }
  // Each feature lowers the activation memory of this activation-dominated model.
  CHECK(result.row("precision").peak_bytes < base.peak_bytes);
  CHECK(result.row("accumulation").peak_bytes < base.peak_bytes);
  CHECK(result.row("accumulation").micro_batch == 4);
  CHECK(result.row("accumulation").steps_per_iteration == 4);
  // Both levels accumulate: the reweighter's meta batch of 4 becomes micro-batches of 1.
  const auto& accumulation_overrides = result.row("accumulation").row.overrides;
  for (const char* set : {"problems.classifier.gradient_accumulation=4", "data.batch_size=4",
                          "problems.reweighter.gradient_accumulation=4",
                          "data.meta_batch_size=1"}) {
    INFO(set);
    CHECK(std::count(accumulation_overrides.begin(), accumulation_overrides.end(), set) == 1);
  }
  CHECK(result.row("checkpointing").peak_bytes < base.peak_bytes);
  // In-place ReLU removes only short-lived copies (docs/memory-ablation.md): never more memory,
  // but whether the peak moment holds one depends on where the peak falls (it does not here
  // since the frozen-input DARTS step no longer builds the classifier's graph).
  CHECK(result.row("activations").peak_bytes <= base.peak_bytes);
  // Without DARTS's copy of the weights the peak cannot grow (it shrinks where the upper step
  // holds the peak).
  CHECK(result.row("finite_difference").peak_bytes <= base.peak_bytes);
  for (const char* key :
       {"precision", "accumulation", "checkpointing", "activations", "finite_difference"}) {
    INFO(key);
    CHECK(result.row("all").peak_bytes < result.row(key).peak_bytes);
  }
  // Per rank, 2 ranks: half of every batch, so less than one process on the whole batch; ZeRO-2
  // also halves the optimizer state, which holds for any rank.
  CHECK(base.ranks == 1);
  if (MLO_WITH_GLOO) {
    const auto& dp = result.row("data_parallel");
    const auto& zero = result.row("zero");
    CHECK(dp.ranks == 2);
    CHECK(zero.ranks == 2);
    CHECK(dp.micro_batch == base.micro_batch / 2);
    CHECK(dp.peak_bytes < base.peak_bytes);
    CHECK(zero.peak_bytes < dp.peak_bytes);
    // ZeRO-3 also halves the ResNet's parameters and holds no whole gradient between blocks.
    const auto& zero3 = result.row("zero3");
    CHECK(zero3.ranks == 2);
    CHECK(zero3.persistent_bytes < result.row("zero").persistent_bytes);
    CHECK(zero3.peak_bytes < zero.peak_bytes);
    // Consecutive rows of several ranks share the baseline measured between them.
    CHECK(zero.baseline_before_seconds == dp.baseline_after_seconds);
    CHECK(zero3.baseline_before_seconds == zero.baseline_after_seconds);
    CHECK(dp.baseline_before_seconds != dp.baseline_after_seconds);
  } else {
    for (const auto& row : result.rows) {
      CHECK(row.baseline_before_seconds.empty());
      CHECK(row.baseline_after_seconds.empty());
    }
  }

  {  // CSV and JSON parse back to the same numbers, labelled synthetic
    const auto csv = split(read_text(dir / "out" / "ablation.csv"), '\n');
    REQUIRE(csv.size() == 2 + keys.size());
    CHECK(csv[0].rfind("# data: synthetic", 0) == 0);
    const auto header = csv_fields(csv[1]);
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto fields = csv_fields(csv[2 + i]);
      REQUIRE(fields.size() == header.size());
      CHECK(fields[0] == keys[i]);
      CHECK(fields[1] == result.rows[i].row.name);
      CHECK(fields[2] == "synthetic");
      CHECK(std::stoll(fields[3]) == result.rows[i].peak_bytes);
      CHECK(std::stoll(fields[9]) == result.rows[i].floor_bytes);
      CHECK(fields[16] == "0");  // the allocator's reserved bytes: CUDA only
      CHECK(std::stoll(fields[17]) == result.rows[i].ranks);
      CHECK(fields[18] == result.rows[i].floor_instant);
    }
    const auto json = nlohmann::json::parse(read_text(dir / "out" / "ablation.json"));
    CHECK(json.at("data") == "synthetic");
    REQUIRE(json.at("rows").size() == keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      CHECK(json["rows"][i].at("key") == keys[i]);
      CHECK(json["rows"][i].at("peak_bytes").get<int64_t>() == result.rows[i].peak_bytes);
      CHECK(json["rows"][i].at("peak_over_floor").get<double>() ==
            Approx(result.rows[i].over_floor));
      CHECK(json["rows"][i].at("round_iterations").get<int64_t>() ==
            result.rows[i].round_iterations);
      CHECK(json["rows"][i].at("baseline_before_seconds").get<std::vector<double>>() ==
            result.rows[i].baseline_before_seconds);
      CHECK(json["rows"][i].at("baseline_after_seconds").get<std::vector<double>>() ==
            result.rows[i].baseline_after_seconds);
    }
    CHECK(json.at("round_target_seconds").get<double>() == 0.2);
    // The rounds kept freed heap memory: always with glibc's allocator, never under ASan's.
#if defined(__GLIBC__)
    const bool reusable = !mlo_test::kAddressSanitizer;
#else
    const bool reusable = false;
#endif
    CHECK(json.at("heap_reuse").get<bool>() == reusable);
    CHECK(json.at("missing").size() == result.missing.size());  // no row failed (or: no Gloo)
    const std::string md = read_text(dir / "out" / "ablation.md");
    CHECK(md.find("SYNTHETIC") != std::string::npos);
    CHECK_THAT(md, Contains("each timing every row for about 0.2 s at its measured pace "
                            "(meta-iterations per round: Baseline "));
    CHECK((md.find("freed heap memory was kept for reuse") != std::string::npos) == reusable);
    // The table names the levels each row touched, and the footprint table follows.
    CHECK_THAT(md, Contains("| +gradient accumulation 4 | classifier, reweighter | "));
    CHECK_THAT(md, Contains("| +checkpointing (optimal, budget 0.3) | classifier | "));
    CHECK_THAT(md, Contains("| row | classifier | reweighter |"));
    CHECK_THAT(md, Contains("| Baseline | 1.78 / 1.78 / 1.78 | 0.0001 / 0.0001 / 0.0002 |"));
    for (const auto& row : result.rows) CHECK(md.find(row.row.name) != std::string::npos);
  }

  {  // the chart is a PNG of the size the script asks for
    if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
      WARN("skipped: gnuplot is not installed (apt-get install gnuplot-nox): no chart to check");
      return;
    }
    const std::string png = read_text(dir / "out" / "ablation.png");
    REQUIRE(png.size() > 33);
    CHECK(png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0);
    CHECK(big_endian(png, 8) == 13);           // IHDR is 13 bytes long
    CHECK(png.compare(12, 4, "IHDR") == 0);
    CHECK(big_endian(png, 16) == 1600);        // width: two panels, memory and time
    CHECK(big_endian(png, 20) == 640);         // height
  }
}

TEST_CASE("mlo ablate: under bf16 at a batch of one the floor stays below the peak",
          "[cli][ablate]") {
  // At this batch the weights' bf16 casts outweigh the activations: the re-evaluation runs
  // without caching them, and so must the floor's forward that stands for it.
  const fs::path dir = mlo_test::scratch_dir("ablate_bf16_floor_test");
  const std::string config = (dir / "tiny.yaml").string();
  std::ofstream(config) << kTiny;
  mlo::cli::AblateOptions options;
  options.out_dir = (dir / "out").string();
  options.ablation.iterations(1).rounds(0).rows({"precision"});
  const auto result = mlo::cli::ablate_command(
      config, {"data.batch_size=1", "data.meta_batch_size=1"}, options);
  REQUIRE(result.rows.size() == 2);
  for (const auto& row : result.rows) {
    INFO("row " << row.row.key << ": peak " << row.peak_bytes << ", floor " << row.floor_bytes
                << " (" << row.persistent_bytes << " persistent + " << row.transient_bytes << " at "
                << row.floor_instant << ")");
    CHECK(row.floor_bytes <= row.peak_bytes);
    CHECK(row.transient_bytes >= kResNet32Params * 4);
  }
}

TEST_CASE("mlo ablate: a timing round spreads each row's meta-iterations over its passes and "
          "takes their median", "[cli][ablate]") {
  using mlo::run::detail::iterations_per_round;
  using mlo::run::detail::row_passes;
  using Passes = std::vector<bool>;
  // Whole meta-iterations that reach the round's time, 1 to 1000.
  CHECK(iterations_per_round(1.0, 0.3) == 4);
  CHECK(iterations_per_round(1.0, 0.25) == 4);
  CHECK(iterations_per_round(0.5, 2.0) == 1);
  CHECK(iterations_per_round(0.0, 0.1) == 1);
  CHECK(iterations_per_round(1.0, 0.0) == 1);
  CHECK(iterations_per_round(1.0, std::nan("")) == 1);
  CHECK(iterations_per_round(std::numeric_limits<double>::infinity(), 0.1) == 1000);
  CHECK(iterations_per_round(1e9, 1e-3) == 1000);
  // A row's meta-iterations in the middle of equal stretches of the round's passes.
  CHECK(row_passes(1, 3) == Passes{false, true, false});
  CHECK(row_passes(3, 3) == Passes{true, true, true});
  CHECK(row_passes(9, 4) == Passes{true, true, true, true});
  CHECK(row_passes(0, 2) == Passes{false, true});
  const Passes five = row_passes(5, 13);
  CHECK(five == Passes{false, true, false, true, false, false, true, false, false, true, false,
                       true, false});
  REQUIRE_THROWS_WITH(row_passes(1, 0), Contains("at least one pass, got 0"));

  // Two rows of the tiny reweighting pair, 3 meta-iterations and 1 per round, 2 rounds.
  const fs::path dir = mlo_test::scratch_dir("ablate_rounds_test");
  const std::string config = (dir / "tiny.yaml").string();
  std::ofstream(config) << mlo_test::kTinyReweighting;
  const auto t = mlo::run::detail::time_interleaved(config, {{}, {}}, {"a", "b"}, "", 2, {3, 1},
                                                    nullptr);
  REQUIRE(t.samples.size() == 2);
  CHECK(t.errors == std::vector<std::string>{"", ""});
  // Round 0 starts with row 0, round 1 with row 1; row 1's one meta-iteration sits in the
  // middle pass of each round.
  using Order = std::vector<std::size_t>;
  REQUIRE(t.order.size() == 2);
  CHECK(t.order[0] == Order{0, 0, 1, 0});
  CHECK(t.order[1] == Order{0, 1, 0, 0});
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(t.samples[0][r].size() == 3);
    REQUIRE(t.samples[1][r].size() == 1);
    std::vector<double> three = t.samples[0][r];
    std::sort(three.begin(), three.end());
    CHECK(three[0] > 0);
    CHECK(t.seconds[0][r] == three[1]);  // the median of three
    CHECK(t.seconds[1][r] == t.samples[1][r][0]);
  }
}

TEST_CASE("mlo ablate: a row of several ranks is timed against the baseline measured just "
          "before and after it", "[cli][ablate]") {
  using mlo::run::AblationRowResult;
  mlo::run::AblationResult result;
  AblationRowResult base;
  base.iteration_seconds = {20, 22, 99};  // the first measurement: a slow start
  AblationRowResult row;
  row.ranks = 2;
  row.iteration_seconds = {11, 13, 12, 50};      // beyond `rounds`: not counted
  row.baseline_before_seconds = {10, 10, 30};    // median 10
  row.baseline_after_seconds = {12, 13, 14, 100};  // median of the first 3: 13
  AblationRowResult unbracketed = row;  // its brackets failed: the first measurement instead
  unbracketed.baseline_before_seconds.clear();
  unbracketed.baseline_after_seconds = {1, 2};  // fewer than `rounds`: not used
  AblationRowResult one_side = row;
  one_side.baseline_after_seconds.clear();
  AblationRowResult short_row = row;  // fewer meta-iterations than rounds: left as it was
  short_row.iteration_seconds = {5, 6};
  short_row.time_ratio = 7;
  result.rows = {base, row, unbracketed, one_side, short_row};
  mlo::run::detail::time_own_processes(3, result);

  // Its median 12 over the median of both brackets' first 3 together (10 10 12 13 14 30: 12.5,
  // not the mean of the two medians, 11.5, nor 13 with the 4th after); the range: its fastest
  // 11 over the slower bracket's median 13, its slowest 13 over the faster one's 10.
  const auto& r = result.rows[1];
  CHECK(r.seconds == 12);
  CHECK(r.time_ratio == Approx(12.0 / 12.5));
  CHECK(r.time_ratio_low == Approx(11.0 / 13.0));
  CHECK(r.time_ratio_high == Approx(13.0 / 10.0));
  const auto& u = result.rows[2];
  CHECK(u.time_ratio == Approx(12.0 / 22.0));
  CHECK(u.time_ratio_low == Approx(11.0 / 22.0));
  CHECK(u.time_ratio_high == Approx(13.0 / 22.0));
  const auto& o = result.rows[3];
  CHECK(o.time_ratio == Approx(12.0 / 10.0));
  CHECK(o.time_ratio_low == Approx(11.0 / 10.0));
  CHECK(o.time_ratio_high == Approx(13.0 / 10.0));
  CHECK(result.rows[4].time_ratio == 7);
  CHECK(result.rows[0].time_ratio == 0);  // the baseline itself is not touched here
}

TEST_CASE("mlo ablate: the baseline is measured again around each row of several ranks, shared "
          "only between two such rows in a row", "[cli][ablate]") {
  const fs::path dir = mlo_test::scratch_dir("ablate_bracket_test");
  const std::string config = (dir / "tiny.yaml").string();
  std::ofstream(config) << mlo_test::kTinyReweighting;
  mlo::run::AblationOptions options;
  // A single-process row between two rows of ranks, and the middle row of ranks failing.
  options.iterations(1).rounds(2).round_seconds(0).rows(
      {"data_parallel", "precision", "zero", "zero3"});
  std::vector<std::string> log;
  // Stand-in ranks (what they measure is not the point here): 3 meta-iterations of 1 s; ZeRO-2's
  // fail.
  const mlo::run::RankRunner ranks = [&](const std::vector<std::string>& overrides,
                                         int64_t nproc, int64_t iterations) {
    const std::string strategy = *std::find_if(overrides.begin(), overrides.end(),
                                               [](const std::string& o) {
                                                 return o.rfind("engine.strategy=", 0) == 0;
                                               });
    log.push_back("ranks " + strategy);
    CHECK(iterations == 2);
    if (strategy == "engine.strategy=zero2") throw std::runtime_error("a rank died");
    mlo::run::AblationRowResult rank;
    rank.iteration_seconds = {1, 1, 1};
    rank.peak_bytes = rank.floor_bytes = 1000;
    return std::vector<mlo::run::AblationRowResult>(static_cast<std::size_t>(nproc), rank);
  };
  const auto result = mlo::run::run_ablation(
      config, {}, options,
      [&](const std::string& line) {
        if (line.find("the baseline again") != std::string::npos) log.push_back(line);
      },
      ranks);
  if (!MLO_WITH_GLOO) {
    // No Gloo (a LibTorch wheel): the rows of 2 CPU ranks are left out, and nothing is bracketed.
    CHECK(log.empty());
    CHECK(result.missing.size() == 3);
    return;
  }
  // The baseline's own measurement is the bracket before data parallel, right after it; the
  // precision row in between ends the sharing, so ZeRO-2 measures its own, and its failure
  // leaves none for ZeRO-3.
  CHECK(log == std::vector<std::string>{
                   "ranks engine.strategy=distributed",
                   "      the baseline again, after +data parallel, 2 ranks (per rank)",
                   "      the baseline again, before +ZeRO-2, 2 ranks (per rank)",
                   "ranks engine.strategy=zero2",
                   "      the baseline again, before +ZeRO-3, 2 ranks (per rank)",
                   "ranks engine.strategy=zero3",
                   "      the baseline again, after +ZeRO-3, 2 ranks (per rank)"});
  REQUIRE(result.missing.size() == 1);
  CHECK_THAT(result.missing[0], Contains("a rank died"));
  const auto& base = result.row("baseline");
  const auto& dp = result.row("data_parallel");
  const auto& zero3 = result.row("zero3");
  CHECK(dp.baseline_before_seconds ==
        std::vector<double>(base.iteration_seconds.begin(), base.iteration_seconds.begin() + 2));
  for (const auto* v : {&dp.baseline_after_seconds, &zero3.baseline_before_seconds,
                        &zero3.baseline_after_seconds}) {
    REQUIRE(v->size() == 2);
    CHECK(std::all_of(v->begin(), v->end(), [](double s) { return s > 0; }));
  }
  CHECK(zero3.baseline_before_seconds != dp.baseline_after_seconds);
  CHECK(zero3.baseline_before_seconds != zero3.baseline_after_seconds);
  CHECK(result.row("precision").baseline_before_seconds.empty());
  CHECK(result.row("precision").baseline_after_seconds.empty());
  CHECK(dp.seconds == 1);
  CHECK(result.timing_error.empty());
}

TEST_CASE("mlo ablate: chosen rows once each, only their options checked, unknown rows named",
          "[cli][ablate]") {
  mlo::run::AblationOptions options;
  // (the reweighting experiment's own keys, as Experiment::memory_keys gives them)
  options.batch_key("data.batch_size").other_batch_keys({{"reweighter", "data.meta_batch_size"}});
  // An accumulation that does not divide the batch matters only to the accumulation row.
  options.accumulation(3).rows({"precision", "precision", "baseline"});
  const auto rows = mlo::run::ablation_rows("classifier", 16, false, options);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].key == "baseline");
  CHECK(rows[1].key == "precision");
  options.rows({"accumulation"});
  REQUIRE_THROWS_WITH(mlo::run::ablation_rows("classifier", 16, false, options),
                      Contains("the batch 16 is not a multiple of the accumulation 3"));
  // Level-wise features on every level given (the default), or narrowed to the main problem:
  // then the other level keeps its baseline batch and its precision.
  options.accumulation(4).rows({"precision", "accumulation"});
  const std::vector<std::pair<std::string, int64_t>> meta{{"reweighter", 8}};
  const auto both = mlo::run::ablation_rows("classifier", 16, true, options, meta, {"reweighter"});
  REQUIRE(both.size() == 3);
  CHECK(both[1].overrides == std::vector<std::string>{"problems.classifier.precision=fp16",
                                                      "problems.reweighter.precision=fp16"});
  CHECK(both[2].overrides == std::vector<std::string>{
                                 "problems.classifier.gradient_accumulation=4",
                                 "data.batch_size=4", "problems.reweighter.gradient_accumulation=4",
                                 "data.meta_batch_size=2"});
  const auto narrowed = mlo::run::ablation_rows("classifier", 16, true, options, meta, {});
  CHECK(narrowed[1].overrides == std::vector<std::string>{"problems.classifier.precision=fp16"});
  CHECK(narrowed[2].overrides == std::vector<std::string>{
                                     "problems.classifier.gradient_accumulation=4",
                                     "data.batch_size=4", "data.meta_batch_size=8"});
  CHECK(narrowed[2].levels == std::vector<std::string>{"classifier"});
  // A level's batch that the accumulation does not divide is named.
  REQUIRE_THROWS_WITH(
      mlo::run::ablation_rows("classifier", 16, false, options, {{"reweighter", 6}}, {"reweighter"}),
      Contains("reweighter's batch 6 (data.meta_batch_size) is not a multiple of the accumulation 4"));
  // The timing options are checked before any experiment is built.
  REQUIRE_THROWS_WITH(
      mlo::run::run_ablation("unread.yaml", {}, mlo::run::AblationOptions().round_seconds(-0.5)),
      Contains("round_seconds must be a finite number >= 0 (0: one meta-iteration per round), "
               "got -0.5"));
  // Without the experiment's keys the rows that need them are left out, saying why.
  const auto plain = mlo::run::ablation_rows("classifier", 16, false, mlo::run::AblationOptions());
  for (const auto& row : plain) {
    if (row.key == "accumulation") {
      CHECK(row.unavailable == "the experiment names no batch-size key for classifier");
    } else if (row.key == "activations") {
      CHECK(row.unavailable == "the experiment names no memory-efficient form of its model");
    } else {
      CHECK(row.unavailable.empty());
    }
  }
  options.rows({"swish"});
  REQUIRE_THROWS_WITH(mlo::run::ablation_rows("classifier", 16, false, options),
                      Contains("unknown row 'swish' (rows: baseline, precision, accumulation, "
                               "checkpointing, activations, finite_difference, all, data_parallel, zero, zero3)"));
}

TEST_CASE("mlo ablate: each row written as it finishes; --resume keeps finished rows, a folder "
          "that holds an ablation is refused, --overwrite moves it aside",
          "[cli][ablate]") {
  const fs::path dir = mlo_test::scratch_dir("ablate_resume_test");
  const std::string config = (dir / "tiny.yaml").string();
  std::ofstream(config) << small_cnn_config();
  mlo::cli::AblateOptions options;
  options.out_dir = (dir / "out").string();
  options.ablation.iterations(1).rounds(0).rows({"precision", "accumulation"});
  const auto first = mlo::cli::ablate_command(config, {}, options);
  REQUIRE(first.rows.size() == 3);
  CHECK(first.model == "cnn");
  // The experiment's own keys: the accumulation row divides data.batch_size and pins the
  // reweighter's meta batch.
  CHECK(first.rows[2].row.overrides ==
        std::vector<std::string>{"problems.classifier.gradient_accumulation=4",
                                 "data.batch_size=4",
                                 "problems.reweighter.gradient_accumulation=4",
                                 "data.meta_batch_size=1"});
  for (const char* key : {"baseline", "precision", "accumulation"}) {
    CHECK(fs::exists(dir / "out" / "rows" / (std::string(key) + ".json")));
  }
  CHECK_THAT(read_text(dir / "out" / "ablation.md"), Contains(", model cnn"));

  // Run again into the same folder: refused, nothing changed.
  const std::string md = read_text(dir / "out" / "ablation.md");
  CHECK_THROWS_WITH(mlo::cli::ablate_command(config, {}, options),
                    Contains("holds an ablation (ablation.md, ablation.csv, ablation.json") &&
                        Contains("continue it with --resume"));
  CHECK(read_text(dir / "out" / "ablation.md") == md);

  // As if interrupted during the accumulation row: --resume keeps the two finished rows (the
  // very same figures, times too) and measures the third.
  fs::remove(dir / "out" / "rows" / "accumulation.json");
  options.resume = true;
  const auto resumed = mlo::cli::ablate_command(config, {}, options);
  REQUIRE(resumed.rows.size() == 3);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(resumed.rows[i].peak_bytes == first.rows[i].peak_bytes);
    CHECK(resumed.rows[i].measured_seconds == first.rows[i].measured_seconds);
    CHECK(resumed.rows[i].iteration_seconds == first.rows[i].iteration_seconds);
  }
  CHECK(resumed.rows[2].peak_bytes == first.rows[2].peak_bytes);  // measured again: the meter
  CHECK(fs::exists(dir / "out" / "rows" / "accumulation.json"));
  // A row measured with other settings is measured again.
  options.ablation.iterations(2);
  const auto other = mlo::cli::ablate_command(config, {}, options);
  CHECK(other.rows[0].iteration_seconds.size() == 2);

  // --overwrite: the earlier files move into replaced-<time>/.
  options.resume = false;
  options.overwrite = true;
  const std::string before = read_text(dir / "out" / "ablation.md");
  mlo::cli::ablate_command(config, {}, options);
  std::vector<fs::path> aside;
  for (const auto& entry : fs::directory_iterator(dir / "out")) {
    if (entry.path().filename().string().rfind("replaced-", 0) == 0) aside.push_back(entry.path());
  }
  REQUIRE(aside.size() == 1);
  CHECK(read_text(aside[0] / "ablation.md") == before);
  CHECK(fs::exists(aside[0] / "rows" / "baseline.json"));
  options.resume = true;
  CHECK_THROWS_WITH(mlo::cli::ablate_command(config, {}, options),
                    Contains("ask for one of them"));
}

}  // namespace ablate_test
