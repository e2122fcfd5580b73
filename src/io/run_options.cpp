// RunOptions: the YAML keys a run reads (`engine.save_step`, `engine.tensorboard`) and a
// program's own command line.
#include <mlo/io/run.h>

#include <mlo/base/error.h>

#include <exception>
#include <string>

namespace mlo {

void RunOptions::visit(Fields& f) {
  f("save_step", save_step_, at_least(0));
  f("tensorboard", tensorboard_);
}

RunOptions RunOptions::from_command_line(int argc, const char* const* argv,
                                         std::string default_dir,
                                         std::vector<std::string>* rest) {
  RunOptions options(std::move(default_dir));
  bool have_dir = false;
  const std::string program = argc > 0 && argv[0] ? argv[0] : "program";
  const std::string usage = "usage: " + program +
                            " [DIR] [--resume] [--overwrite] [--stop-at STEP] [--no-progress]";
  for (int i = 0; i < argc; ++i) options.command_line_.push_back(argv[i] ? argv[i] : "");
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i] ? argv[i] : "";
    if (arg == "--" && rest != nullptr) {
      for (++i; i < argc; ++i) rest->push_back(argv[i] ? argv[i] : "");
      break;
    }
    if (arg == "--resume") {
      options.resume(true);
    } else if (arg == "--overwrite") {
      options.overwrite(true);
    } else if (arg == "--no-progress") {
      options.progress(false);
    } else if (arg == "--stop-at") {
      MLO_CHECK(i + 1 < argc, "--stop-at needs a global step; ", usage);
      const std::string value = argv[++i] ? argv[i] : "";
      size_t used = 0;
      int64_t step = 0;
      try {
        step = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      MLO_CHECK(used == value.size() && step > 0, "--stop-at: must be a global step >= 1, got '",
                value, "'");
      options.stop_at(step);
    } else if (!arg.empty() && arg[0] == '-') {
      MLO_CHECK(rest != nullptr, "unknown option '", arg, "'; ", usage);
      // NOTE: whether a program's option takes a value is the program's to know: a word after
      // one would be read as the output folder.
      const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
      MLO_CHECK(arg.find('=') != std::string::npos || next == nullptr || next[0] == '-',
                "option '", arg, "' is followed by '", next ? next : "", "': give a value as ",
                arg, "=VALUE, put the output folder first, or the program's own arguments after ",
                "--; ", usage);
      rest->push_back(arg);
    } else {
      MLO_CHECK(!have_dir, "one output folder, got '", options.dir(), "' and '", arg, "'; ",
                usage);
      options.dir(arg);
      have_dir = true;
    }
  }
  MLO_CHECK(!options.dir().empty(), "an empty output folder; ", usage);
  return options;
}

}  // namespace mlo
