// A run knows its config: the commands that start from a trained model (test, validate, predict,
// export, serve) take the job config of the run that trained it, as Lightning's
// load_from_checkpoint restores hyperparameters, instead of the defaults plus whatever the user
// remembers to repeat.
//
//   kiln export ckpt_path=RUN/checkpoints/last.ckpt       # the run's model, data, task ...
//   kiln test run_dir=RUN data.test_images=other.gz       # RUN's last checkpoint, another test set
//
// The stored config is RUN/.hydra/config.yaml, as the run wrote it (interpolations unresolved,
// so output paths follow the new command's run directory). The command line applies on top:
// `key=value` overrides change the stored config (`+key=value` sets a key the run already added);
// a config group override (`model=cnn`) replaces that group's node with the group's config,
// unless it repeats the run's own choice (`experiment=spam_bow` as in the training command),
// which the stored config holds already; another choice for a group of the global package
// (`experiment=...`) is refused: `stored_config=false` starts from the defaults as before.
// Torch-free: `--cfg job` shows the result at once.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/config/compose.h"

namespace kiln::run {

// The commands that read a stored config.
bool StartsFromATrainedModel(const std::string& command);

// When `composed` (the command line's composition) names a run (`run_dir=DIR`) or a checkpoint
// file inside one (`ckpt_path=RUN/checkpoints/NAME.ckpt` or `RUN/NAME.ckpt`), replaces its job
// config by the run's stored config with the command line's overrides on top, and returns the
// run directory; returns "" and changes nothing when there is no run to start from (a
// checkpoint outside a run directory, `last`, `best`). A `run_dir` without a stored config, a
// stored config that does not parse, or an override that does not apply is an error naming it.
absl::StatusOr<std::string> StartFromStoredConfig(config::ComposeResult& composed);

// RUN's checkpoint `which`: "last" (RUN/checkpoints/last.ckpt) or "best", the file that RUN's
// model_checkpoint recorded in RUN/checkpoints/best_model_path.txt (looked for in
// RUN/checkpoints when the run folder has moved since); any other value is returned as it is.
// Lightning's trainer.test(ckpt_path="best"), for a finished run: NotFound when RUN kept no best.
absl::StatusOr<std::string> RunCheckpoint(const std::string& run_dir, const std::string& which);

}  // namespace kiln::run
