// `kiln predict`: a trained model (kiln::Predictor) answering the data module's prediction split.
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "lib/base/files.h"
#include "lib/commands/job.h"
#include "lib/inference/predictor.h"
#include "lib/logging/logger.h"
#include "lib/run/command.h"
#include "lib/trainer/prediction_writer.h"
#include "lib/trainer/process_settings.h"

namespace kiln {
namespace {

// The checkpoint of a command that loads its model through kiln::Predictor (predict), found
// without building the job: `last` and `best` ask the checkpoint keeper among the callbacks.
absl::StatusOr<std::string> CheckpointToLoad(const run::JobContext& ctx,
                                             const TrainerOptions& options) {
  std::string ckpt_path;
  if (!IsNull(ctx.cfg, "ckpt_path")) {
    KILN_ASSIGN_OR_RETURN(ckpt_path, ctx.cfg.Get<std::string>("ckpt_path"));
  } else if (!ctx.cfg.Get<std::string>("model.pretrained").value_or("").empty()) {
    return std::string();  // the weights are the pretrained folder's, as the model loads them
  }
  std::vector<std::shared_ptr<Callback>> callbacks;
  if (ckpt_path == "last" || ckpt_path == "best") {
    KILN_ASSIGN_OR_RETURN(callbacks, InstantiateAll<Callback>(ctx.cfg, "callbacks"));
  }
  CheckpointKeeper* keeper = FindCheckpointKeeper(callbacks);
  return EvaluationCheckpoint(ctx.command, ckpt_path, keeper, CheckpointDir(keeper, options));
}

// `predict`: kiln::Predictor, built from the job config (the checkpoint's stored config with the
// command line on top) and the checkpoint, answers the data module's prediction split
// (Predictor::PredictSplit); a record per input, written by the prediction writer
// (`+prediction_writer=jsonl`; csv by default). For a task that generates (a language model), the
// text after the task's prompt on stdout and in generated.txt.
absl::Status PredictCommand(run::JobContext& ctx) {
  StopSignals stop_signals;  // SIGINT/SIGTERM: exit 130/143, nothing written
  KILN_ASSIGN_OR_RETURN(config::Config trainer_cfg, ctx.cfg.Sub("trainer"));
  KILN_ASSIGN_OR_RETURN(TrainerOptions options, TrainerOptions::FromConfig(trainer_cfg));
  KILN_ASSIGN_OR_RETURN(std::string path, CheckpointToLoad(ctx, options));
  // Freed memory kept for reuse (process_settings.h; without it each batch's activations are
  // mapped and faulted in again), and trainer.num_threads when it is set; null keeps LibTorch's own
  // thread count, as `kiln predict` always has, so its answers stay bitwise those it wrote before.
  if (options.num_threads > 0) {
    ConfigureProcess(options.num_threads, 1);
  } else {
    KeepFreedMemoryForReuse();
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Predictor> predictor, Predictor::FromConfig(ctx.cfg, path));
  if (predictor->generates()) {
    KILN_ASSIGN_OR_RETURN(std::string generated, predictor->Generate());
    KILN_RETURN_IF_ERROR(CheckStopSignal("while generating; nothing was written"));
    std::string file = ctx.output_dir + "/generated.txt";
    KILN_RETURN_IF_ERROR(WriteFileAtomically(file, generated + "\n"));
    Logger::Instance().Info(absl::StrCat("generated ", generated.size(), " bytes with ",
                                         predictor->weights(), ": ", file));
    std::printf("%s\n", generated.c_str());
    return absl::OkStatus();
  }
  std::shared_ptr<PredictionWriter> writer;
  if (IsNull(ctx.cfg, "prediction_writer")) {
    KILN_ASSIGN_OR_RETURN(writer, Registry<PredictionWriter>::Get().Instantiate("csv", Options()));
  } else {
    KILN_ASSIGN_OR_RETURN(config::Config writer_cfg, ctx.cfg.Sub("prediction_writer"));
    KILN_ASSIGN_OR_RETURN(writer, Registry<PredictionWriter>::Get().Instantiate(writer_cfg));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Prediction> answers, predictor->PredictSplit());
  KILN_RETURN_IF_ERROR(CheckStopSignal("after predicting; no predictions were written"));
  std::vector<PredictionRecord> records;
  records.reserve(answers.size());
  for (Prediction& answer : answers)
    records.push_back({std::move(answer.source), std::move(answer.fields)});
  KILN_ASSIGN_OR_RETURN(std::string file, writer->Write(ctx.output_dir, records));
  Logger::Instance().Info(absl::StrCat("predicted ", records.size(), " inputs with ",
                                       predictor->weights(), ": ", file));
  std::printf("%s\n", file.c_str());
  return absl::OkStatus();
}

const bool kPredictRegistered = [] {
  run::RegisterCommand("predict", PredictCommand);
  return true;
}();

}  // namespace
}  // namespace kiln
