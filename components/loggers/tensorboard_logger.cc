// tensorboard: an event file (events.out.tfevents.TIME.HOST) in save_dir with one scalar summary
// per metric, readable by `tensorboard --logdir`; records are flushed as they are logged.
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "components/loggers/appending_file.h"
#include "components/loggers/tfrecord.h"
#include "lib/registry/registry.h"
#include "lib/trainer/callback.h"

namespace kiln {
namespace {

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string EventFileName() {
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  return absl::StrCat("events.out.tfevents.", static_cast<int64_t>(WallTime()), ".", host);
}

class TensorBoardLogger : public MetricsLogger {
 public:
  explicit TensorBoardLogger(const std::string& dir) : file_(dir + "/" + EventFileName()) {}

  absl::Status LogMetrics(const std::map<std::string, double>& metrics, int64_t step) override {
    if (file_.fresh())
      KILN_RETURN_IF_ERROR(file_.Append(tfrecord::Frame(tfrecord::FileVersionEvent(WallTime()))));
    std::vector<tfrecord::Scalar> scalars;
    for (const auto& [k, v] : metrics) scalars.push_back({k, static_cast<float>(v)});
    return file_.Append(tfrecord::Frame(tfrecord::ScalarsEvent(WallTime(), step, scalars)));
  }

  absl::Status Finish() override { return file_.Close(); }

 private:
  AppendingFile file_;
};

struct TensorBoardLoggerOptions {
  std::string save_dir = ".";
};

KILN_REGISTER_BOUND(
    MetricsLogger, "tensorboard", "TensorBoard event file with a scalar summary per metric",
    OptionBinding<TensorBoardLoggerOptions>().Field("save_dir", &TensorBoardLoggerOptions::save_dir,
                                                    "folder for the events.out.tfevents.* file"),
    [](const TensorBoardLoggerOptions& o) -> absl::StatusOr<std::shared_ptr<MetricsLogger>> {
      return std::make_shared<TensorBoardLogger>(o.save_dir);
    });

}  // namespace
}  // namespace kiln
