// Config composition through the library: compose kiln's installed `train` config with
// Hydra overrides (exactly what `kiln train --cfg job ...` does), then instantiate the model
// and the optimizer the config names, and print what was built.
//   compose_instantiate CONFIG_DIR [overrides...]      e.g.  compose_instantiate $KILN_CONFIG_DIR
//   model=mlp
#include <kiln/config.h>
#include <kiln/models.h>
#include <kiln/registry.h>
#include <kiln/trainer.h>

#include <cstdio>
#include <string>
#include <vector>

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: compose_instantiate CONFIG_DIR [overrides...]\n");
    return 2;
  }
  kiln::config::ComposeOptions options;
  options.search_path.push_back({"main", argv[1]});
  options.config_name = "train";
  options.overrides.assign(argv + 2, argv + argc);
  auto composed = kiln::config::Compose(options);
  if (!composed.ok()) return Fail(composed.status());
  auto job = kiln::config::ResolveJob(*composed);
  if (!job.ok()) return Fail(job.status());
  kiln::config::Config cfg(*job);

  auto model_cfg = cfg.Sub("model");
  if (!model_cfg.ok()) return Fail(model_cfg.status());
  std::printf("model config:\n%s", kiln::config::ToYaml(*model_cfg->node()).c_str());
  auto model = kiln::Registry<kiln::Model>::Get().Instantiate(*model_cfg);
  if (!model.ok()) return Fail(model.status());
  int64_t count = 0;
  for (const auto& p : (*model)->parameters()) count += p.numel();
  auto target = model_cfg->Get<std::string>("_target_");
  std::printf("built model '%s' with %lld parameters\n", target->c_str(),
              static_cast<long long>(count));

  auto optimizer_cfg = cfg.Sub("optimizer");
  if (!optimizer_cfg.ok()) return Fail(optimizer_cfg.status());
  auto factory = kiln::Registry<kiln::OptimizerFactory>::Get().Instantiate(*optimizer_cfg);
  if (!factory.ok()) return Fail(factory.status());
  kiln::NamedParameters params;
  for (const auto& item : (*model)->named_parameters())
    params.emplace_back(item.key(), item.value());
  auto optimizer = (*factory)->Create(params);
  if (!optimizer.ok()) return Fail(optimizer.status());
  std::printf("built optimizer '%s' with %zu parameter groups\n",
              optimizer_cfg->Get<std::string>("_target_")->c_str(),
              (*optimizer)->param_groups().size());
  return 0;
}
