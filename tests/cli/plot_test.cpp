// mlo plot: curves read back from metrics.csv (a run, or a --seeds folder as mean and band, in
// closed form), the default metrics, the errors a user meets, and the PNG gnuplot draws.
#include "support/scratch.h"
#include "support/text_files.h"
#include "curves.h"
#include "plot.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace plot_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// metrics.csv of a run: the classifier's loss at steps 1..4 (base + step), validation at 2, 4.
void write_run(const fs::path& dir, double base, bool skip_step_3 = false) {
  fs::create_directories(dir);
  std::ofstream out(dir / "metrics.csv");
  out << "step,source,metric,value\n";
  for (int step = 1; step <= 4; ++step) {
    if (skip_step_3 && step == 3) continue;
    out << step << ",classifier,loss," << base + step << "\n";
    out << step << ",classifier,lr,0.1\n";
    out << step << ",reweighter,loss," << 2 * base << "\n";
  }
  out << "2,validation,valid/acc," << base / 10 << "\n2,validation,valid/acc/coat,0.5\n";
  out << "4,validation,valid/acc," << base / 5 << "\n4,validation,valid/acc/coat,0.6\n";
  out << "4,test,acc,NaN\n";
}

bool has_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

}  // namespace

TEST_CASE("plot: a run's metrics.csv read back under TensorBoard's tags", "[cli][plot]") {
  mlo_test::TempDir dir("plot_read");
  write_run(dir.path / "a", 1.0);
  const auto metrics = mlo::cli::read_run_metrics((dir.path / "a").string());
  CHECK(metrics.at("classifier/loss").at(3) == 4.0);
  CHECK(metrics.at("valid/acc").at(4) == 0.2);
  CHECK(metrics.at("valid/acc/coat").size() == 2);
  CHECK(std::isnan(metrics.at("test/acc").at(4)));

  const auto run = mlo::cli::load_run_curves((dir.path / "a").string());
  CHECK(run.label == "a");
  CHECK(run.seeds.size() == 1);
  // each problem's loss, then the validation metrics without a per-class part
  CHECK(mlo::cli::default_metrics({run}) ==
        std::vector<std::string>{"classifier/loss", "reweighter/loss", "valid/acc"});

  // A malformed line names the file and the line.
  std::ofstream(dir.path / "a" / "metrics.csv", std::ios::app) << "5,classifier,loss,abc\n";
  CHECK_THROWS_WITH(mlo::cli::read_run_metrics((dir.path / "a").string()),
                    Contains("metrics.csv:19") && Contains("not a number: 'abc'"));
  CHECK_THROWS_WITH(mlo::cli::load_run_curves((dir.path / "absent").string()),
                    Contains("absent") && Contains("no such folder"));
  fs::create_directories(dir.path / "empty");
  CHECK_THROWS_WITH(mlo::cli::load_run_curves((dir.path / "empty").string()),
                    Contains("neither metrics.csv") && Contains("seed_<s>/metrics.csv"));
}

TEST_CASE("plot: a --seeds folder is its mean with a min-max or +-std band", "[cli][plot]") {
  mlo_test::TempDir dir("plot_seeds");
  write_run(dir.path / "b" / "seed_0", 1.0);
  write_run(dir.path / "b" / "seed_1", 2.0);
  write_run(dir.path / "b" / "seed_2", 6.0, /*skip_step_3=*/true);
  const auto run = mlo::cli::load_run_curves((dir.path / "b").string());
  REQUIRE(run.seeds.size() == 3);
  const auto minmax = mlo::cli::make_curve(run, "classifier/loss", mlo::cli::Band::kMinMax);
  // step 3 is missing in seed 2: left out, so the band is over the same seeds everywhere
  CHECK(minmax.steps == std::vector<int64_t>{1, 2, 4});
  // step 1: values 2, 3, 7
  CHECK(minmax.mean[0] == Approx(4.0));
  CHECK(minmax.low[0] == 2.0);
  CHECK(minmax.high[0] == 7.0);
  const auto std_band = mlo::cli::make_curve(run, "classifier/loss", mlo::cli::Band::kStd);
  // sample std of {2, 3, 7}: sqrt(((-2)^2 + (-1)^2 + 3^2) / 2) = sqrt(7)
  CHECK(std_band.low[0] == Approx(4.0 - std::sqrt(7.0)));
  CHECK(std_band.high[0] == Approx(4.0 + std::sqrt(7.0)));
  CHECK_THAT(mlo::cli::make_curve(run, "valid/acc", mlo::cli::Band::kMinMax).mean,
             Catch::Matchers::Approx(std::vector<double>{0.3, 0.6}));
  CHECK(mlo::cli::make_curve(run, "absent/metric", mlo::cli::Band::kMinMax).steps.empty());

  // A seed still running (its metrics.csv has only the header): the curves are over the others,
  // and say which seed they leave out.
  fs::create_directories(dir.path / "b" / "seed_3");
  std::ofstream(dir.path / "b" / "seed_3" / "metrics.csv") << "step,source,metric,value\n";
  fs::create_directories(dir.path / "b" / "seed_04");  // not a seed folder: seed_4 is
  std::ofstream(dir.path / "b" / "seed_04" / "metrics.csv") << "step,source,metric,value\n";
  const auto four = mlo::cli::load_run_curves((dir.path / "b").string());
  CHECK(four.seed_names == std::vector<std::string>{"seed_0", "seed_1", "seed_2", "seed_3"});
  const auto three = mlo::cli::make_curve(four, "classifier/loss", mlo::cli::Band::kMinMax);
  CHECK(three.seeds == 3);
  CHECK(three.missing == std::vector<std::string>{"seed_3"});
  CHECK(three.mean == minmax.mean);
}

TEST_CASE("plot: the PNG, its script and data; an unknown metric lists the known ones",
          "[cli][plot]") {
  mlo_test::TempDir dir("plot_png");
  write_run(dir.path / "a", 1.0);
  write_run(dir.path / "b" / "seed_0", 1.0);
  write_run(dir.path / "b" / "seed_1", 3.0);
  mlo::cli::PlotOptions options;
  options.metrics = {"classifier/los"};
  CHECK_THROWS_WITH(
      mlo::cli::plot_runs({(dir.path / "a").string(), (dir.path / "b").string()}, options),
      Contains("no run logged the metric 'classifier/los'") && Contains("classifier/loss") &&
          Contains("valid/acc"));
  if (!has_gnuplot()) {
    WARN("gnuplot is not installed: the PNG is not drawn (apt-get install gnuplot-nox)");
    return;
  }
  options.metrics.clear();
  options.out = (dir.path / "out" / "curves.png").string();
  const std::string png =
      mlo::cli::plot_runs({(dir.path / "a").string(), (dir.path / "b").string()}, options);
  CHECK(png == options.out);
  const std::string bytes = mlo_test::read_text(png);
  CHECK(bytes.substr(0, 4) == "\x89PNG");
  CHECK_FALSE(fs::exists(png + ".tmp"));
  const std::string data = mlo_test::read_text(dir.path / "out" / "curves.dat");
  // block 1: classifier/loss of b, the mean of 1 + step and 3 + step, min and max
  CHECK_THAT(data, Contains("# block 1: classifier/loss, b\n# step mean low high\n1 3 2 4\n"));
  const std::string script = mlo_test::read_text(dir.path / "out" / "curves.gp");
  CHECK_THAT(script, Contains("set multiplot layout 2,2"));
  CHECK_THAT(script, Contains("b: mean of 2 seeds, band min-max"));
  CHECK_THAT(script, Contains("filledcurves"));
  // the script redraws the PNG by itself, into the same file
  CHECK_THAT(script, Contains("if (!exists(\"outfile\")) outfile = '" + png + "'"));
  // The picture has the mode of any new file, as its script and data have (under umask 022:
  // readable by all), not the private mode of the file gnuplot drew into.
  const auto mode = [](const fs::path& p) {
    return fs::status(p).permissions() & fs::perms::all;
  };
  CHECK(mode(png) == mode(dir.path / "out" / "curves.gp"));
  CHECK(mode(png) == mode(dir.path / "out" / "curves.dat"));
}

TEST_CASE("plot: a run without a metric leaves no hole in the data blocks", "[cli][plot]") {
  // Run c has no reweighter and a test/acc that is NaN: its blocks are not written, so every
  // later curve still reads its own block (gnuplot's `index` skips no empty block).
  mlo_test::TempDir dir("plot_missing");
  write_run(dir.path / "a", 1.0);
  fs::create_directories(dir.path / "c");
  std::ofstream(dir.path / "c" / "metrics.csv")
      << "step,source,metric,value\n1,classifier,loss,5\n2,classifier,loss,6\n"
         "2,validation,valid/acc,0.7\n4,test,acc,NaN\n";
  if (!has_gnuplot()) {
    WARN("gnuplot is not installed: the PNG is not drawn (apt-get install gnuplot-nox)");
    return;
  }
  mlo::cli::PlotOptions options;
  options.out = (dir.path / "curves.png").string();
  // the defaults come from every run: the reweighter's loss though c has none
  mlo::cli::plot_runs({(dir.path / "c").string(), (dir.path / "a").string()}, options);
  const std::string data = mlo_test::read_text(dir.path / "curves.dat");
  const std::string script = mlo_test::read_text(dir.path / "curves.gp");
  // blocks: 0 classifier/loss c, 1 classifier/loss a, 2 reweighter/loss a, 3 valid/acc c,
  // 4 valid/acc a
  CHECK_THAT(data, Contains("# block 2: reweighter/loss, a\n# step mean low high\n1 2 2 2\n"));
  CHECK_THAT(data, Contains("# block 3: valid/acc, c\n# step mean low high\n2 0.7 0.7 0.7\n"));
  CHECK_THAT(script, Contains("index 2 using 1:2 with linespoints pt 7 ps 0.4 lw 2 lc rgb "
                              "'#d62728' title 'a'"));
  CHECK(script.find("index 5") == std::string::npos);
  // test/acc: NaN only, so nothing to draw: refused clearly rather than a gnuplot error
  options.metrics = {"test/acc"};
  CHECK_THROWS_WITH(
      mlo::cli::plot_runs({(dir.path / "c").string(), (dir.path / "a").string()}, options),
      Contains("no run has a finite value of any metric asked for"));
  options.metrics.clear();
  options.out = dir.path.string();
  CHECK_THROWS_WITH(mlo::cli::plot_runs({(dir.path / "a").string()}, options),
                    Contains("is a folder"));
}

TEST_CASE("plot: --out must be a PNG, and no file that mlo plot did not write is replaced",
          "[cli][plot]") {
  mlo_test::TempDir dir("plot_out_safety");
  write_run(dir.path / "a", 1.0);
  const std::string results = "{\"test\": {\"acc\": 0.5}}\n";
  std::ofstream(dir.path / "a" / "results.json") << results;
  const std::string notes = "my notes\n";
  std::ofstream(dir.path / "a" / "notes.png") << notes;
  std::ofstream(dir.path / "a" / "mine.gp") << notes;
  mlo::cli::PlotOptions options;
  options.out = (dir.path / "a" / "results.json").string();
  CHECK_THROWS_WITH(mlo::cli::plot_runs({(dir.path / "a").string()}, options),
                    Contains("--out '" + options.out + "' does not end in .png"));
  options.out = (dir.path / "a" / "notes.png").string();
  CHECK_THROWS_WITH(mlo::cli::plot_runs({(dir.path / "a").string()}, options),
                    Contains("exists and is not a PNG") && Contains("it is not replaced"));
  options.out = (dir.path / "a" / "mine.png").string();
  CHECK_THROWS_WITH(mlo::cli::plot_runs({(dir.path / "a").string()}, options),
                    Contains("mine.gp', the gnuplot script written beside") &&
                        Contains("was not written by mlo plot"));
  // A picture of the user's own (a PNG, with no script of mlo plot's beside it).
  const std::string picture = std::string("\x89PNG\r\n\x1a\n", 8) + "the user's own";
  std::ofstream(dir.path / "a" / "photo.png", std::ios::binary) << picture;
  options.out = (dir.path / "a" / "photo.png").string();
  CHECK_THROWS_WITH(mlo::cli::plot_runs({(dir.path / "a").string()}, options),
                    Contains("exists and was not drawn by mlo plot"));
  CHECK(mlo_test::read_text(dir.path / "a" / "photo.png") == picture);
  options.out_option = "--plot";
  options.out = (dir.path / "a" / "curves.PDF").string();
  CHECK_THROWS_WITH(mlo::cli::plot_runs({(dir.path / "a").string()}, options),
                    Contains("--plot '" + options.out + "' does not end in .png"));
  // Nothing was written or replaced by the refused calls.
  CHECK(mlo_test::read_text(dir.path / "a" / "results.json") == results);
  CHECK(mlo_test::read_text(dir.path / "a" / "notes.png") == notes);
  CHECK(mlo_test::read_text(dir.path / "a" / "mine.gp") == notes);
  CHECK_FALSE(fs::exists(dir.path / "a" / "mine.png"));
  CHECK_FALSE(fs::exists(dir.path / "a" / "mine.dat"));
  CHECK_FALSE(fs::exists(dir.path / "a" / "results.gp"));
  if (!has_gnuplot()) return;
  // Its own files are replaced: a chart drawn twice.
  options.out = (dir.path / "a" / "curves.png").string();
  mlo::cli::plot_runs({(dir.path / "a").string()}, options);
  const std::string first = mlo_test::read_text(dir.path / "a" / "curves.png");
  CHECK(mlo::cli::plot_runs({(dir.path / "a").string()}, options) == options.out);
  CHECK(mlo_test::read_text(dir.path / "a" / "curves.png").substr(0, 4) == "\x89PNG");
  CHECK(first.substr(0, 4) == "\x89PNG");
  for (const auto& entry : fs::directory_iterator(dir.path / "a")) {
    CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
  }
}

}  // namespace plot_test
