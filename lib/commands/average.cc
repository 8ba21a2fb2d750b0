// `kiln average`: the mean model of several checkpoints of one run.
#include <cstdio>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/files.h"
#include "lib/commands/command_options.h"
#include "lib/logging/logger.h"
#include "lib/run/command.h"
#include "lib/weights/checkpoint_average.h"

namespace kiln {
namespace {

// `average`: the mean model of `ckpt: [...]` or of the newest `last_n` checkpoints of `run_dir`.
struct AverageOptions {
  std::optional<std::vector<std::string>> ckpt;
  std::optional<int64_t> last_n;
  std::optional<std::string> run_dir;
  std::optional<std::string> out;
};

absl::Status AverageCommand(run::JobContext& ctx) {
  using O = AverageOptions;
  static const auto* binding = new OptionBinding<O>(
      OptionBinding<O>()
          .Field("ckpt", &O::ckpt, "checkpoints to average, in training order")
          .Field("last_n", &O::last_n, "average the newest N checkpoints of run_dir",
                 GreaterThan(1))
          .Field("run_dir", &O::run_dir, "the run whose checkpoints last_n takes")
          .Field("out", &O::out,
                 "the averaged checkpoint (null: averaged.ckpt beside the last one averaged)"));
  KILN_ASSIGN_OR_RETURN(O o, CommandOptions(ctx.cfg, *binding, "average"));
  std::vector<std::string> paths;
  if (o.ckpt.has_value() == o.last_n.has_value()) {
    return absl::InvalidArgumentError(
        "kiln average: give either ckpt=[A,B,...] or last_n=N run_dir=DIR");
  }
  if (o.ckpt.has_value()) {
    paths = *o.ckpt;
  } else {
    if (!o.run_dir.has_value())
      return absl::InvalidArgumentError("kiln average: last_n=N needs run_dir=DIR");
    KILN_ASSIGN_OR_RETURN(paths, NewestCheckpoints(*o.run_dir, *o.last_n));
  }
  KILN_ASSIGN_OR_RETURN(AveragedWeights averaged, AverageCheckpoints(paths));
  // Beside the checkpoints, in their run: `kiln test ckpt_path=.../averaged.ckpt` then starts from
  // the config of the run that trained them (stored_config.h), as for any of its checkpoints.
  const std::string& last = paths.back();
  size_t slash = last.find_last_of('/');
  std::string out = o.out.value_or(
      slash == std::string::npos ? "averaged.ckpt" : last.substr(0, slash) + "/averaged.ckpt");
  KILN_RETURN_IF_ERROR(WriteAveragedCheckpoint(out, averaged, paths));
  Logger::Instance().Info(absl::StrCat("averaged ", paths.size(), " checkpoints (",
                                       absl::StrJoin(paths, ", "), ") into ", out));
  std::printf("%s\n", out.c_str());
  return absl::OkStatus();
}

const bool kAverageRegistered = [] {
  run::RegisterCommand("average", AverageCommand);
  return true;
}();

}  // namespace
}  // namespace kiln
