#include "ablation_report.h"

#include <mlo/base/atomic_file.h>
#include <mlo/base/error.h>
#include "cli/gnuplot.h"
#include <mlo/memory/meter.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>


namespace mlo {
namespace run {
namespace {

std::string data_label(const AblationResult& r) { return r.synthetic ? "synthetic" : "real"; }

std::string format(const char* fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), fmt, value);
  return buffer;
}

std::string mib(int64_t bytes) { return format("%.1f", memory::to_mib(bytes)); }

// MiB with the digits a small model needs (an MWN's 301 parameters are 0.0011 MiB).
std::string small_mib(int64_t bytes) {
  const double m = memory::to_mib(bytes);
  return bytes == 0 ? "0" : format(m >= 10 ? "%.1f" : m >= 0.1 ? "%.2f" : "%.4f", m);
}

// "-12.3%" change of `ratio` against 1.
std::string change(double ratio) { return format("%+.1f%%", (ratio - 1.0) * 100.0); }

std::string join_levels(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : sep) + part;
  return out;
}

// CSV field: quoted when it holds a comma or a quote.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

nlohmann::json footprints_json(const std::vector<LevelFootprint>& footprints) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : footprints) {
    out.push_back({{"problem", f.problem},
                   {"parameters", f.parameters},
                   {"gradients", f.gradients},
                   {"optimizer_state", f.optimizer_state}});
  }
  return out;
}

}  // namespace

std::string ablation_markdown(const AblationResult& r) {
  std::ostringstream out;
  out << "Memory ablation of `" << r.experiment << "` (" << r.config_path << "), main problem '"
      << r.problem << "'" << (r.model.empty() ? std::string() : ", model " + r.model) << "\n\n"
      << "Data: **" << (r.synthetic ? "SYNTHETIC (not real data)" : "real")
      << "**. Device: " << r.device << ", " << r.threads << " thread(s), batch " << r.batch
      << ". Memory: " << r.iterations
      << " meta-iteration(s) per row (more where a level steps less often) after a warm-up, "
         "one row at a time. ";
  if (r.rounds > 0) {
    std::vector<std::string> counts;
    for (const auto& row : r.rows)
      if (row.round_iterations > 0)
        counts.push_back(row.row.name + " " + std::to_string(row.round_iterations));
    out << "Time: " << r.rounds << " interleaved round(s), each timing every row for "
        << (r.round_seconds > 0 ? "about " + format("%g", r.round_seconds) +
                                      " s at its measured pace (meta-iterations per round: " +
                                      join_levels(counts, ", ") + ")"
                                : std::string("one meta-iteration"))
        << "; the rows take turns meta-iteration by meta-iteration; a row's time is the "
           "median over rounds of its median meta-iteration in each; the time ratio is the "
           "median of the per-round ratios to the baseline, with their range; a row of several "
           "ranks: the median of as many metered meta-iterations against the baseline's, "
           "measured again just before and just after it (range: its fastest against the "
           "slower of the two, its slowest against the faster)."
        << (r.heap_reuse ? " During the rounds freed heap memory was kept for reuse, as a GPU's "
                           "caching allocator keeps device memory (rows of several ranks: "
                           "not)."
                         : "")
        << (r.timing_error.empty() ? std::string() : " " + r.timing_error + ".");
  } else {
    const bool bracketed =
        std::any_of(r.rows.begin(), r.rows.end(), [](const AblationRowResult& row) {
          return !row.baseline_before_seconds.empty() || !row.baseline_after_seconds.empty();
        });
    out << "Time: the memory measurement's (rows one after the other, meter on)"
        << (bracketed ? "; a row of several ranks: against the baseline measured again just "
                        "before and just after it"
                      : "")
        << (r.timing_error.empty() ? std::string(".") : ". " + r.timing_error + ".");
  }
  if (!r.overrides.empty()) {
    out << " Overrides:";
    for (const auto& o : r.overrides) out << " `--set " << o << "`";
  }
  // On CUDA the exact peak is the caching allocator's allocated peak; its reserved peak (the
  // figure nvidia-smi users compare) gets a column of its own.
  const bool cuda = std::any_of(r.rows.begin(), r.rows.end(), [](const AblationRowResult& row) {
    return row.reserved_peak_bytes > 0;
  });
  out << "\n\n"
      << "| row | levels | peak MiB (exact) | saving | " << (cuda ? "reserved MiB | " : "")
      << "RSS growth MiB | s / meta-iter | time ratio (range) | floor MiB | peak/floor |\n"
      << "| --- | --- | ---: | ---: | " << (cuda ? "---: | " : "")
      << "---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& row : r.rows) {
    std::string ratio = format("%.2f", row.time_ratio);
    if (row.row.key != "baseline" && !row.round_seconds.empty()) {
      ratio += " (" + format("%.2f", row.time_ratio_low) + "-" +
               format("%.2f", row.time_ratio_high) + ")";
    } else if (row.ranks > 1 && row.time_ratio_high > row.time_ratio_low) {
      ratio += " (" + format("%.2f", row.time_ratio_low) + "-" +
               format("%.2f", row.time_ratio_high) + ", own processes)";
    } else if (row.ranks > 1) {
      ratio += " (own processes)";
    }
    out << "| " << row.row.name << " | "
        << (row.row.levels.empty() ? std::string("-") : join_levels(row.row.levels, ", ")) << " | "
        << mib(row.peak_bytes) << " | "
        << (row.row.key == "baseline" ? std::string("-") : change(row.peak_ratio)) << " | "
        << (cuda ? mib(row.reserved_peak_bytes) + " | " : std::string())
        << mib(row.rss_growth_bytes) << " | " << format("%.2f", row.seconds) << " | " << ratio
        << " | " << mib(row.floor_bytes) << " | " << format("%.2f", row.over_floor) << " |\n";
  }
  for (const auto& missing : r.missing) {
    out << "| " << missing << " | | | | " << (cuda ? "| " : "") << "| | | | |\n";
  }
  out << "\nPeak: parameters and buffers plus the exact meter's highest tensor count in a "
         "meta-iteration (saving: its change against the baseline's). Levels: the problems "
         "whose configuration the row changes. Floor: a lower bound of the peak, tensors that "
         "must be alive together at one instant of every meta-iteration (parameters, buffers "
         "and optimizer states of every level, plus the largest set of tensors that provably "
         "coexist at one instant). RSS growth: the process's peak resident set during the row "
         "minus the resident set before it.\n\n";
  for (const auto& row : r.rows) {
    out << "- " << row.row.name << ": " << row.row.note;
    if (!row.plan.empty()) out << " (plan: " << row.plan << ")";
    if (!row.timing_plan.empty()) out << " (the timing rounds' plan: " << row.timing_plan << ")";
    out << "; micro-batch " << row.micro_batch << ", " << row.steps_per_iteration
        << " global step(s) per meta-iteration; floor = " << mib(row.persistent_bytes)
        << " MiB persistent + " << mib(row.transient_bytes) << " MiB at "
        << (row.floor_instant.empty() ? std::string("no instant") : row.floor_instant) << ".\n";
  }
  // The parameter footprint: the baseline's per level, and each row whose footprint differs.
  out << "\nParameter footprint per level (MiB: parameters / gradients a backward returns / "
         "optimizer state):\n\n| row |";
  std::vector<std::string> levels;
  for (const auto& row : r.rows) {
    for (const auto& f : row.footprints) {
      if (std::find(levels.begin(), levels.end(), f.problem) == levels.end())
        levels.push_back(f.problem);
    }
  }
  for (const auto& level : levels) out << " " << level << " |";
  out << "\n| --- |";
  for (std::size_t i = 0; i < levels.size(); ++i) out << " ---: |";
  out << "\n";
  const auto cells = [&](const AblationRowResult& row) {
    std::string line;
    for (const auto& level : levels) {
      std::string cell = "-";
      for (const auto& f : row.footprints) {
        if (f.problem == level) {
          cell = small_mib(f.parameters) + " / " + small_mib(f.gradients) + " / " +
                 small_mib(f.optimizer_state);
        }
      }
      line += " " + cell + " |";
    }
    return line;
  };
  const std::string base_cells = r.rows.empty() ? std::string() : cells(r.rows.front());
  for (const auto& row : r.rows) {
    const std::string line = cells(row);
    if (row.row.key != "baseline" && line == base_cells) continue;
    out << "| " << row.row.name << " |" << line << "\n";
  }
  out << "\nRows not listed hold the baseline's footprint.\n";
  return out.str();
}

std::string ablation_csv(const AblationResult& r) {
  std::ostringstream out;
  out << "# data: " << data_label(r) << "; experiment: " << r.experiment << "; device: " << r.device
      << "; threads: " << r.threads << "; batch: " << r.batch << "\n";
  out << "key,row,data,peak_bytes,peak_ratio,rss_growth_bytes,rss_peak_bytes,seconds,time_ratio,"
         "floor_bytes,persistent_bytes,transient_bytes,peak_over_floor,state_bytes,"
         "micro_batch,steps_per_iteration,reserved_peak_bytes,ranks,floor_instant,levels,"
         "measured_seconds,time_ratio_low,time_ratio_high,round_seconds\n";
  for (const auto& row : r.rows) {
    out << row.row.key << "," << csv_field(row.row.name) << "," << data_label(r) << ","
        << row.peak_bytes << "," << format("%.6f", row.peak_ratio) << "," << row.rss_growth_bytes
        << "," << row.rss_peak_bytes << "," << format("%.6f", row.seconds) << ","
        << format("%.6f", row.time_ratio) << "," << row.floor_bytes << "," << row.persistent_bytes
        << "," << row.transient_bytes << "," << format("%.6f", row.over_floor) << ","
        << row.state_bytes << "," << row.micro_batch << "," << row.steps_per_iteration << ","
        << row.reserved_peak_bytes << "," << row.ranks << "," << csv_field(row.floor_instant) << ","
        << csv_field(join_levels(row.row.levels, ";")) << ","
        << format("%.6f", row.measured_seconds) << "," << format("%.6f", row.time_ratio_low) << ","
        << format("%.6f", row.time_ratio_high) << ",";
    std::vector<std::string> rounds;
    for (double seconds : row.round_seconds) rounds.push_back(format("%.6f", seconds));
    out << join_levels(rounds, ";") << "\n";
  }
  return out.str();
}

std::string ablation_json(const AblationResult& r) {
  nlohmann::json j;
  j["experiment"] = r.experiment;
  j["config"] = r.config_path;
  j["problem"] = r.problem;
  j["data"] = data_label(r);
  j["description"] = r.description;
  j["model"] = r.model;
  j["device"] = r.device;
  j["threads"] = r.threads;
  j["batch"] = r.batch;
  j["iterations"] = r.iterations;
  j["rounds"] = r.rounds;
  j["round_target_seconds"] = r.round_seconds;
  j["heap_reuse"] = r.heap_reuse;
  j["timing_error"] = r.timing_error;
  j["overrides"] = r.overrides;
  j["missing"] = r.missing;
  j["rows"] = nlohmann::json::array();
  for (const auto& row : r.rows) {
    j["rows"].push_back({{"key", row.row.key},
                         {"name", row.row.name},
                         {"overrides", row.row.overrides},
                         {"note", row.row.note},
                         {"plan", row.plan},
                         {"peak_bytes", row.peak_bytes},
                         {"peak_ratio", row.peak_ratio},
                         {"state_bytes", row.state_bytes},
                         {"rss_growth_bytes", row.rss_growth_bytes},
                         {"rss_peak_bytes", row.rss_peak_bytes},
                         {"reserved_peak_bytes", row.reserved_peak_bytes},
                         {"seconds", row.seconds},
                         {"time_ratio", row.time_ratio},
                         {"floor_bytes", row.floor_bytes},
                         {"persistent_bytes", row.persistent_bytes},
                         {"transient_bytes", row.transient_bytes},
                         {"floor_instant", row.floor_instant},
                         {"peak_over_floor", row.over_floor},
                         {"micro_batch", row.micro_batch},
                         {"steps_per_iteration", row.steps_per_iteration},
                         {"ranks", row.ranks},
                         {"levels", row.row.levels},
                         {"measured_seconds", row.measured_seconds},
                         {"iteration_seconds", row.iteration_seconds},
                         {"round_seconds", row.round_seconds},
                         {"round_iterations", row.round_iterations},
                         {"baseline_before_seconds", row.baseline_before_seconds},
                         {"baseline_after_seconds", row.baseline_after_seconds},
                         {"time_ratio_low", row.time_ratio_low},
                         {"time_ratio_high", row.time_ratio_high},
                         {"timing_plan", row.timing_plan},
                         {"footprints", footprints_json(row.footprints)}});
  }
  return j.dump(2) + "\n";
}

std::string row_measurement_json(const AblationRowResult& row) {
  const nlohmann::json j{{"peak_bytes", row.peak_bytes},
                         {"state_bytes", row.state_bytes},
                         {"rss_peak_bytes", row.rss_peak_bytes},
                         {"reserved_peak_bytes", row.reserved_peak_bytes},
                         {"rss_growth_bytes", row.rss_growth_bytes},
                         {"measured_seconds", row.measured_seconds},
                         {"iteration_seconds", row.iteration_seconds},
                         {"floor_bytes", row.floor_bytes},
                         {"persistent_bytes", row.persistent_bytes},
                         {"transient_bytes", row.transient_bytes},
                         {"floor_instant", row.floor_instant},
                         {"micro_batch", row.micro_batch},
                         {"steps_per_iteration", row.steps_per_iteration},
                         {"plan", row.plan},
                         {"footprints", footprints_json(row.footprints)}};
  return j.dump() + "\n";
}

AblationRowResult row_measurement_from_json(const std::string& text) {
  AblationRowResult row;
  try {
    const auto j = nlohmann::json::parse(text);
    row.peak_bytes = j.at("peak_bytes").get<int64_t>();
    row.state_bytes = j.at("state_bytes").get<int64_t>();
    row.rss_peak_bytes = j.at("rss_peak_bytes").get<int64_t>();
    row.rss_growth_bytes = j.at("rss_growth_bytes").get<int64_t>();
    row.reserved_peak_bytes = j.at("reserved_peak_bytes").get<int64_t>();
    row.measured_seconds = j.at("measured_seconds").get<double>();
    row.seconds = row.measured_seconds;
    row.iteration_seconds = j.at("iteration_seconds").get<std::vector<double>>();
    row.floor_bytes = j.at("floor_bytes").get<int64_t>();
    row.persistent_bytes = j.at("persistent_bytes").get<int64_t>();
    row.transient_bytes = j.at("transient_bytes").get<int64_t>();
    row.floor_instant = j.at("floor_instant").get<std::string>();
    row.micro_batch = j.at("micro_batch").get<int64_t>();
    row.steps_per_iteration = j.at("steps_per_iteration").get<int64_t>();
    row.plan = j.at("plan").get<std::string>();
    for (const auto& f : j.at("footprints")) {
      row.footprints.push_back(
          LevelFootprint{f.at("problem").get<std::string>(), f.at("parameters").get<int64_t>(),
                         f.at("gradients").get<int64_t>(), f.at("optimizer_state").get<int64_t>()});
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("ablation: a rank's measurement does not parse: ") + e.what());
  }
  return row;
}

std::string write_ablation_chart(const AblationResult& r, const std::string& png_path) {
  if (r.rows.empty()) return "no rows to draw";
  const std::string stem = png_path.size() > 4 && png_path.substr(png_path.size() - 4) == ".png"
                               ? png_path.substr(0, png_path.size() - 4)
                               : png_path;
  const std::string dat = stem + ".dat", gp = stem + ".gp";
  write_file_atomically(dat, [&](std::ostream& out) {
    out << "# row peak_mib floor_mib saving color time_ratio time_low time_high time_label (data: "
        << data_label(r) << ")\n";
    for (const auto& row : r.rows) {
      std::string label = row.row.name;
      for (char& c : label) c = c == '"' ? '\'' : c;
      const bool base = row.row.key == "baseline";
      // The saving is what a reader looks for: printed over each bar, and a bar that saves
      // nothing (within 1%) drawn gray like the baseline.
      const bool saves = !base && row.peak_ratio < 0.99;
      const bool timed = std::isfinite(row.time_ratio) && row.time_ratio > 0;
      out << '"' << label << "\" " << mib(row.peak_bytes) << " " << mib(row.floor_bytes) << " \""
          << (base ? std::string("baseline") : change(row.peak_ratio)) << "\" "
          << (saves ? 0x4a7ebb : 0x9a9a9a) << " "  // colours as integers
          << (timed ? format("%.3f", row.time_ratio) : "NaN") << " "
          << (timed ? format("%.3f", row.time_ratio_low) : "NaN") << " "
          << (timed ? format("%.3f", row.time_ratio_high) : "NaN") << " \""
          << (timed ? format("x%.2f", row.time_ratio) : "not timed") << "\"\n";
    }
  });
  // The model as run names the chart (an override may have changed it from the config's name).
  const std::string what = r.model.empty() ? r.experiment : r.model + " (" + r.experiment + ")";
  const std::string tmp = png_path + ".tmp";
  write_file_atomically(gp, [&](std::ostream& out) {
    out << "# gnuplot script written by mlo ablate; `gnuplot " << gp << "` redraws the chart\n"
        << "if (!exists(\"outfile\")) outfile = '" << png_path << "'\n"
        << "set terminal pngcairo size 1600,640 noenhanced font ',11'\n"
        << "set output outfile\n"
        << "set multiplot layout 1,2 title 'Memory ablation: " << what << ", batch " << r.batch
        << ", " << r.device << " (" << (r.synthetic ? "SYNTHETIC data" : "real data") << ")'\n"
        << "set style fill solid 0.7 border -1\nset boxwidth 0.6\nset xtics rotate by -25\n"
        << "set grid ytics\nset key top center horizontal\n"
        // Memory: the peak per row, its saving over the bar, the floor as a red line.
        << "set title 'memory'\nset ylabel 'peak per meta-iteration (MiB, exact meter)'\n"
        << "set yrange [0:*]\nset offsets 0,0,graph 0.16,0\n"
        << "set arrow 1 from graph 0, first " << mib(r.rows.front().peak_bytes)
        << " to graph 1, first " << mib(r.rows.front().peak_bytes) << " nohead dt 2 lc 'gray40'\n"
        << "plot '" << dat
        << "' using 0:2:5:xtic(1) with boxes lc rgb variable "
           "title 'peak (gray: saves under 1%)', \\\n"
        << "     '' using 0:2:(sprintf(\"%.0f MiB\\n%s\", $2, strcol(4))) with labels "
           "offset 0,1.6 notitle, \\\n"
        << "     '' using 0:3:(0.3):(0) with vectors nohead lw 3 lc rgb '#c0392b' "
           "title 'floor (a lower bound of the peak)', \\\n"
        << "     '' using ($0-0.3):3:(0.6):(0) with vectors nohead lw 3 lc rgb '#c0392b' notitle\n"
        // Time: each row's time per meta-iteration over the baseline's, with its spread.
        << "set title 'time'\nset ylabel 'time per meta-iteration / baseline (range over rounds)'\n"
        << "set yrange [0:*]\nunset arrow 1\n"
        << "set arrow 2 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc 'gray40'\n"
        << "plot '" << dat
        << "' using 0:6:xtic(1) with boxes lc rgb '#e69f00' title 'time ratio', \\\n"
        << "     '' using 0:6:7:8 with yerrorbars lc rgb 'black' pt -1 title 'range', \\\n"
        << "     '' using 0:6:9 with labels offset 0,1.2 notitle\n"
        << "unset multiplot\n";
  });
  return run_gnuplot(gp, tmp, png_path);
}

AblationFiles write_ablation_tables(const std::string& folder, const AblationResult& result) {
  std::filesystem::create_directories(folder);
  AblationFiles files;
  const std::filesystem::path dir(folder);
  files.markdown = (dir / "ablation.md").string();
  files.csv = (dir / "ablation.csv").string();
  files.json = (dir / "ablation.json").string();
  files.png = (dir / "ablation.png").string();
  write_file_atomically(files.markdown,
                        [&](std::ostream& out) { out << ablation_markdown(result); });
  write_file_atomically(files.csv, [&](std::ostream& out) { out << ablation_csv(result); });
  write_file_atomically(files.json, [&](std::ostream& out) { out << ablation_json(result); });
  return files;
}

AblationFiles write_ablation(const std::string& folder, const AblationResult& result) {
  AblationFiles files = write_ablation_tables(folder, result);
  files.chart_error = write_ablation_chart(result, files.png);
  if (!files.chart_error.empty()) {
    // A chart from an earlier run would pass for this run's: it goes.
    std::filesystem::remove(files.png);
    files.png.clear();
  }
  return files;
}

}  // namespace run
}  // namespace mlo
