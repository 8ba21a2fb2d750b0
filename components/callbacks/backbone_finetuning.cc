// BackboneFinetuning (Lightning's): the parameters matching `params` are frozen until epoch
// `unfreeze_at_epoch`, then trained again, added to the optimizer at its lr times `lr_factor` (a
// scheduler then scales them like the rest). BatchNorm layers among them keep training while the
// rest is frozen (`train_bn`, as Lightning), or are frozen too and kept in eval mode.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/freezing.h"
#include "lib/trainer/trainer.h"

namespace kiln {
namespace {

struct BackboneFinetuningOptions {
  std::vector<std::string> params;
  int64_t unfreeze_at_epoch = 10;
  double lr_factor = 0.1;
  bool train_bn = true;
};

class BackboneFinetuning : public Callback {
 public:
  BackboneFinetuning(BackboneFinetuningOptions o, std::string params_key)
      : o_(std::move(o)), params_key_(std::move(params_key)) {}

  std::string state_key() const override {
    return absl::StrCat("BackboneFinetuning{params=", absl::StrJoin(o_.params, ","), "}");
  }

  absl::Status OnSetup(Trainer& trainer) override {
    torch::nn::Module& module = trainer.task()->module();
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> matched,
                          ParametersMatching(module, o_.params, params_key_));
    // What model.freeze froze stays frozen: only trainable parameters are this callback's.
    names_.clear();
    std::set<std::string> bn_names = BatchNormParameterNames(module, matched);
    for (const auto& p : module.named_parameters()) {
      bool wanted = std::find(matched.begin(), matched.end(), p.key()) != matched.end();
      if (wanted && p.value().requires_grad() && !(o_.train_bn && bn_names.count(p.key()) > 0))
        names_.push_back(p.key());
    }
    if (o_.unfreeze_at_epoch == 0) {
      unfrozen_ = true;  // never frozen: the optimizer has the backbone from the start
      return absl::OkStatus();
    }
    SetTrainable(module, names_, false);
    if (!AnyTrainable(module)) {
      return absl::InvalidArgumentError(
          absl::StrCat(params_key_, ": [", absl::StrJoin(o_.params, ", "),
                       "] freezes every parameter of the model until epoch ", o_.unfreeze_at_epoch,
                       "; nothing would train"));
    }
    if (!o_.train_bn) frozen_norms_ = BatchNormsWithin(module, names_);
    Logger::Instance().Info(absl::StrCat("backbone_finetuning: ", names_.size(),
                                         " parameters frozen until epoch ", o_.unfreeze_at_epoch));
    return absl::OkStatus();
  }

  absl::Status OnFitStart(Trainer& trainer) override {
    if (!unfrozen_ && o_.unfreeze_at_epoch >= trainer.options().max_epochs &&
        trainer.options().max_steps <= 0) {
      Logger::Instance().Warning(
          absl::StrCat("backbone_finetuning: unfreeze_at_epoch=", o_.unfreeze_at_epoch,
                       " is not before max_epochs=", trainer.options().max_epochs,
                       ": the backbone stays frozen"));
    }
    return absl::OkStatus();
  }

  absl::Status OnTrainEpochStart(Trainer& trainer) override {
    if (unfrozen_ || trainer.current_epoch() < o_.unfreeze_at_epoch) return absl::OkStatus();
    Logger::Instance().Info(absl::StrCat("backbone_finetuning: unfreezing ", names_.size(),
                                         " parameters at epoch ", trainer.current_epoch(),
                                         ", lr x ", o_.lr_factor));
    return Unfreeze(trainer);
  }

  absl::Status OnTrainBatchStart(Trainer&, const data::Batch&) override {
    if (!unfrozen_) {
      for (auto& norm : frozen_norms_) norm->eval();
    }
    return absl::OkStatus();
  }

  void SaveState(torch::serialize::OutputArchive& archive) const override {
    archive.write("unfrozen", torch::tensor(unfrozen_ ? 1 : 0, torch::kInt64));
  }
  void LoadState(torch::serialize::InputArchive& archive) override {
    torch::Tensor unfrozen;
    restored_unfrozen_ = archive.try_read("unfrozen", unfrozen) && unfrozen.item<int64_t>() != 0;
  }
  // A checkpoint written after the unfreezing has the backbone's groups in its optimizer state.
  absl::Status OnLoadCheckpoint(Trainer& trainer) override {
    if (!restored_unfrozen_ || unfrozen_) return absl::OkStatus();
    return Unfreeze(trainer);
  }

 private:
  static std::set<std::string> BatchNormParameterNames(torch::nn::Module& module,
                                                       const std::vector<std::string>& names) {
    std::set<std::string> out;
    for (const auto& item : module.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
      if (item.value()->name().find("BatchNorm") == std::string::npos) continue;
      for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
        out.insert(item.key().empty() ? p.key() : item.key() + "." + p.key());
      }
    }
    std::set<std::string> within;
    for (const auto& n : names) {
      if (out.count(n) > 0) within.insert(n);
    }
    return within;
  }

  absl::Status Unfreeze(Trainer& trainer) {
    SetTrainable(trainer.task()->module(), names_, true);
    frozen_norms_.clear();
    unfrozen_ = true;
    return trainer.AddParamGroups(names_, o_.lr_factor);
  }

  BackboneFinetuningOptions o_;
  std::string params_key_;
  std::vector<std::string> names_;  // the parameters this callback freezes and unfreezes
  std::vector<std::shared_ptr<torch::nn::Module>> frozen_norms_;
  bool unfrozen_ = false;
  bool restored_unfrozen_ = false;
};

KILN_REGISTER_BOUND(Callback, "backbone_finetuning",
                    "Freezes the parameters matching `params` until an epoch, then trains them at "
                    "a lower lr (Lightning's "
                    "BackboneFinetuning)",
                    OptionBinding<BackboneFinetuningOptions>()
                        .Required("params", &BackboneFinetuningOptions::params,
                                  "globs of the backbone's parameter names ([conv*, bn*, fc1.*])",
                                  NonEmpty())
                        .Field("unfreeze_at_epoch", &BackboneFinetuningOptions::unfreeze_at_epoch,
                               "the epoch at which the backbone starts training", AtLeast(0))
                        .Field("lr_factor", &BackboneFinetuningOptions::lr_factor,
                               "the backbone's lr as a fraction of the optimizer's", GreaterThan(0))
                        .Field("train_bn", &BackboneFinetuningOptions::train_bn,
                               "BatchNorm layers in the backbone keep training while it is frozen; "
                               "false: frozen too, in eval mode"),
                    [](const BackboneFinetuningOptions& o,
                       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Callback>> {
                      return std::make_shared<BackboneFinetuning>(o, context.FullKey("params"));
                    });

}  // namespace
}  // namespace kiln
