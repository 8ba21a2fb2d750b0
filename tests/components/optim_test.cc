#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "components/models/model.h"
#include "components/optim/fused_adam.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"
#include "lib/trainer/optimization.h"

namespace kiln {
namespace optim_test {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

config::Config ConfigOf(const std::string& yaml, const std::string& key) {
  auto node = config::ParseYaml(yaml, key + ".yaml");
  EXPECT_TRUE(node.ok()) << node.status();
  return config::Config(*node, key);
}

absl::StatusOr<std::shared_ptr<OptimizerFactory>> BuildOptimizer(const std::string& yaml) {
  return Registry<OptimizerFactory>::Get().Instantiate(ConfigOf(yaml, "optimizer"));
}

absl::StatusOr<std::shared_ptr<Scheduler>> BuildScheduler(const std::string& yaml) {
  return Registry<Scheduler>::Get().Instantiate(ConfigOf(yaml, "scheduler"));
}

// Two linear layers around a LayerNorm: 2 matrices, 4 vectors (2 biases, norm weight and bias).
struct TinyNet : torch::nn::Module {
  TinyNet() {
    fc1 = register_module("fc1", torch::nn::Linear(3, 4));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})));
    fc2 = register_module("fc2", torch::nn::Linear(4, 2));
  }
  torch::nn::Linear fc1{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc2{nullptr};
};

NamedParameters Named(torch::nn::Module& module) {
  NamedParameters out;
  for (const auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

std::unique_ptr<torch::optim::Optimizer> CreateOver(const std::string& yaml,
                                                    const NamedParameters& params) {
  auto factory = BuildOptimizer(yaml);
  EXPECT_TRUE(factory.ok()) << factory.status();
  if (!factory.ok()) return nullptr;
  auto optimizer = (*factory)->Create(params);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  return optimizer.ok() ? std::move(*optimizer) : nullptr;
}

// The error message of a config that must be refused, checked to be one line.
std::string OptimizerError(const std::string& yaml) {
  auto factory = BuildOptimizer(yaml);
  EXPECT_FALSE(factory.ok());
  std::string message = factory.ok() ? "" : std::string(factory.status().message());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

std::string SchedulerError(const std::string& yaml) {
  auto scheduler = BuildScheduler(yaml);
  EXPECT_FALSE(scheduler.ok());
  std::string message = scheduler.ok() ? "" : std::string(scheduler.status().message());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Optimizers, AllRegistered) {
  for (const char* name : {"sgd", "adam", "adamw"}) {
    EXPECT_TRUE(Registry<OptimizerFactory>::Get().Contains(name)) << name;
  }
  for (const char* name :
       {"step", "multistep", "cosine_with_warmup", "one_cycle", "linear", "reduce_on_plateau"}) {
    EXPECT_TRUE(Registry<Scheduler>::Get().Contains(name)) << name;
  }
}

TEST(Sgd, DefaultsAndOneGroup) {
  TinyNet net;
  auto optimizer = CreateOver("_target_: sgd\nlr: 0.1\n", Named(net));
  auto* sgd = dynamic_cast<torch::optim::SGD*>(optimizer.get());
  ASSERT_NE(sgd, nullptr);
  ASSERT_EQ(sgd->param_groups().size(), 1u);
  EXPECT_EQ(sgd->param_groups()[0].params().size(), 6u);
  auto& options = static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.1);
  EXPECT_EQ(options.momentum(), 0.9);
  EXPECT_FALSE(options.nesterov());
  EXPECT_EQ(options.dampening(), 0.0);
  EXPECT_EQ(options.weight_decay(), 0.0);
}

TEST(Adam, Defaults) {
  TinyNet net;
  auto optimizer = CreateOver("_target_: adam\nlr: 1e-3\n", Named(net));
  auto* adam = dynamic_cast<torch::optim::Adam*>(optimizer.get());
  ASSERT_NE(adam, nullptr);
  auto& options = static_cast<torch::optim::AdamOptions&>(adam->param_groups()[0].options());
  EXPECT_EQ(options.lr(), 1e-3);
  EXPECT_EQ(std::get<0>(options.betas()), 0.9);
  EXPECT_EQ(std::get<1>(options.betas()), 0.999);
  EXPECT_EQ(options.eps(), 1e-8);
  EXPECT_EQ(options.weight_decay(), 0.0);
  EXPECT_FALSE(options.amsgrad());
}

// `from`'s state saved and loaded into `to` (a checkpoint's round trip), and copies of `params` for
// `to` to step.
void CopyState(const torch::optim::Optimizer& from, torch::optim::Optimizer& to) {
  std::stringstream saved;
  torch::serialize::OutputArchive out;
  from.save(out);
  out.save_to(saved);
  torch::serialize::InputArchive in;
  in.load_from(saved);
  to.load(in);
}
std::vector<torch::Tensor> Copies(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_());
  return copies;
}

// kiln's adam and adamw step with ATen's fused kernels: the same updates as torch::optim's
// (float32 rounding apart) over several steps, with two parameter groups, weight decay and AMSGrad;
// the state is torch::optim's, so a state saved mid-run and loaded into a new optimizer continues
// bitwise as the uninterrupted run.
template <typename Fused, typename Torch, typename Options>
void ExpectFusedMatchesTorch(bool amsgrad) {
  auto make_params = [] {
    torch::manual_seed(3);
    return std::vector<torch::Tensor>{torch::randn({5, 3}).requires_grad_(),
                                      torch::randn({7}).requires_grad_()};
  };
  auto groups_of = [&](const std::vector<torch::Tensor>& p) {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(
        std::vector<torch::Tensor>{p[0]},
        std::make_unique<Options>(Options(1e-2).weight_decay(0.1).amsgrad(amsgrad)));
    groups.emplace_back(
        std::vector<torch::Tensor>{p[1]},
        std::make_unique<Options>(Options(3e-2).weight_decay(0.0).amsgrad(amsgrad)));
    return groups;
  };
  auto fused_params = make_params(), torch_params = make_params();
  Fused fused(groups_of(fused_params), Options(1e-2));
  Torch reference(groups_of(torch_params), Options(1e-2));
  auto step = [](torch::optim::Optimizer& optimizer, std::vector<torch::Tensor>& params, int i) {
    optimizer.zero_grad();
    torch::manual_seed(100 + i);
    (params[0].sum() * torch::randn({}) + (params[1] * params[1]).sum()).backward();
    optimizer.step();
  };
  for (int i = 0; i < 6; ++i) {
    step(fused, fused_params, i);
    step(reference, torch_params, i);
    for (size_t j = 0; j < fused_params.size(); ++j) {
      EXPECT_TRUE(torch::allclose(fused_params[j], torch_params[j], 1e-5, 1e-6))
          << "step " << i << " param " << j;
    }
  }
  // Save at step 6, load into a new optimizer over copies, take two more steps on both.
  std::vector<torch::Tensor> resumed_params = Copies(fused_params);
  Fused resumed(groups_of(resumed_params), Options(1e-2));
  CopyState(fused, resumed);
  for (int i = 6; i < 8; ++i) {
    step(fused, fused_params, i);
    step(resumed, resumed_params, i);
  }
  for (size_t j = 0; j < fused_params.size(); ++j)
    EXPECT_TRUE(torch::equal(fused_params[j], resumed_params[j])) << j;
}

TEST(FusedAdam, StepsAsTorchsAdamWAndResumesBitwise) {
  ExpectFusedMatchesTorch<FusedAdamW, torch::optim::AdamW, torch::optim::AdamWOptions>(false);
  ExpectFusedMatchesTorch<FusedAdamW, torch::optim::AdamW, torch::optim::AdamWOptions>(true);
}

TEST(FusedAdam, StepsAsTorchsAdamAndResumesBitwise) {
  ExpectFusedMatchesTorch<FusedAdam, torch::optim::Adam, torch::optim::AdamOptions>(false);
  ExpectFusedMatchesTorch<FusedAdam, torch::optim::Adam, torch::optim::AdamOptions>(true);
}

// trainer.cuda_graphs: once capturable, the step counts and lr live in tensors the kernel reads, so
// a captured step replays with the current values. A "replay" here is a step taken while capturing
// (the host counts left alone) and AfterReplay (they advance): the parameters follow the plain
// optimizer's, an lr the scheduler changed reaches the kernel through BeforeReplay, and the state a
// checkpoint keeps (host step counts included) continues bitwise in a plain optimizer.
TEST(FusedAdam, CapturableStepsFollowThePlainOnes) {
  auto make_params = [] {
    torch::manual_seed(5);
    return std::vector<torch::Tensor>{torch::randn({4, 3}).requires_grad_(),
                                      torch::randn({6}).requires_grad_()};
  };
  auto groups_of = [](const std::vector<torch::Tensor>& p) {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{p[0]},
                        std::make_unique<torch::optim::AdamWOptions>(1e-2));
    groups.emplace_back(std::vector<torch::Tensor>{p[1]},
                        std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(3e-2).weight_decay(0)));
    return groups;
  };
  auto plain_params = make_params(), captured_params = make_params();
  FusedAdamW plain(groups_of(plain_params), torch::optim::AdamWOptions(1e-2));
  FusedAdamW captured(groups_of(captured_params), torch::optim::AdamWOptions(1e-2));
  auto grads = [](std::vector<torch::Tensor>& params, int i) {
    torch::manual_seed(200 + i);
    (params[0].sum() * torch::randn({}) + (params[1] * params[1]).sum()).backward();
  };
  for (int i = 0; i < 8; ++i) {
    if (i == 5) {  // the scheduler changes the lr between steps
      for (auto* o : {&plain, &captured}) o->param_groups()[0].options().set_lr(4e-3);
    }
    plain.zero_grad();
    grads(plain_params, i);
    plain.step();
    captured.zero_grad();
    grads(captured_params, i);
    if (i < 2) {
      captured.step();  // warm-up, before the capture
      continue;
    }
    if (i == 2) ASSERT_TRUE(captured.MakeCapturable().ok());
    if (i == 3) {
      captured.step();  // an eager step of a capturable optimizer (a batch of another shape)
      continue;
    }
    captured.BeforeReplay();
    captured.SetCapturing(true);
    captured.step();
    captured.SetCapturing(false);
    captured.AfterReplay();
  }
  for (size_t j = 0; j < plain_params.size(); ++j) {
    EXPECT_TRUE(torch::allclose(plain_params[j], captured_params[j], 1e-6, 1e-7)) << j;
  }
  for (const auto& p : captured_params) {
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(
        *captured.state().at(p.unsafeGetTensorImpl()));
    EXPECT_EQ(state.step(), 8);
  }
  // The state goes on in a plain optimizer (a checkpoint resumed without graphs).
  std::vector<torch::Tensor> resumed_params = Copies(captured_params);
  FusedAdamW resumed(groups_of(resumed_params), torch::optim::AdamWOptions(1e-2));
  resumed.param_groups()[0].options().set_lr(4e-3);
  CopyState(captured, resumed);
  for (auto [o, params] :
       {std::pair{&plain, &plain_params}, std::pair{&resumed, &resumed_params}}) {
    o->zero_grad();
    grads(*params, 8);
    o->step();
  }
  for (size_t j = 0; j < plain_params.size(); ++j) {
    EXPECT_TRUE(torch::allclose(plain_params[j], resumed_params[j], 1e-6, 1e-7)) << j;
  }
}

TEST(FusedAdam, TheRegisteredOptimizersAreTheFusedOnes) {
  TinyNet net;
  EXPECT_NE(dynamic_cast<FusedAdamW*>(CreateOver("_target_: adamw\nlr: 1e-3\n", Named(net)).get()),
            nullptr);
  EXPECT_NE(dynamic_cast<FusedAdam*>(CreateOver("_target_: adam\nlr: 1e-3\n", Named(net)).get()),
            nullptr);
}

TEST(AdamW, DefaultsAndExplicitOptions) {
  TinyNet net;
  auto optimizer = CreateOver("_target_: adamw\nlr: 3e-4\n", Named(net));
  auto* adamw = dynamic_cast<torch::optim::AdamW*>(optimizer.get());
  ASSERT_NE(adamw, nullptr);
  auto& defaults = static_cast<torch::optim::AdamWOptions&>(adamw->param_groups()[0].options());
  EXPECT_EQ(defaults.weight_decay(), 0.01);
  EXPECT_FALSE(defaults.amsgrad());

  optimizer = CreateOver(
      "_target_: adamw\nlr: 3e-4\nbetas: [0.8, 0.99]\neps: 1e-6\n"
      "weight_decay: 0.1\namsgrad: true\n",
      Named(net));
  auto& set = static_cast<torch::optim::AdamWOptions&>(optimizer->param_groups()[0].options());
  EXPECT_EQ(std::get<0>(set.betas()), 0.8);
  EXPECT_EQ(std::get<1>(set.betas()), 0.99);
  EXPECT_EQ(set.eps(), 1e-6);
  EXPECT_EQ(set.weight_decay(), 0.1);
  EXPECT_TRUE(set.amsgrad());
}

TEST(NoDecayNormAndBias, SplitsVectorsIntoASecondGroupWithoutDecay) {
  TinyNet net;
  auto optimizer =
      CreateOver("_target_: adamw\nlr: 1e-3\nno_decay_norm_and_bias: true\n", Named(net));
  ASSERT_EQ(optimizer->param_groups().size(), 2u);
  const auto& decayed = optimizer->param_groups()[0];
  const auto& plain = optimizer->param_groups()[1];
  ASSERT_EQ(decayed.params().size(), 2u);
  EXPECT_TRUE(decayed.params()[0].is_same(net.fc1->weight));
  EXPECT_TRUE(decayed.params()[1].is_same(net.fc2->weight));
  ASSERT_EQ(plain.params().size(), 4u);
  EXPECT_TRUE(plain.params()[0].is_same(net.fc1->bias));
  EXPECT_TRUE(plain.params()[1].is_same(net.norm->weight));
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(decayed.options()).weight_decay(), 0.01);
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(plain.options()).weight_decay(), 0.0);
  EXPECT_EQ(plain.options().get_lr(), 1e-3);
}

TEST(NoDecayNormAndBias, WorksForSgdAndAdam) {
  TinyNet net;
  auto sgd = CreateOver("_target_: sgd\nlr: 0.1\nweight_decay: 0.5\nno_decay_norm_and_bias: true\n",
                        Named(net));
  ASSERT_EQ(sgd->param_groups().size(), 2u);
  EXPECT_EQ(static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[0].options()).weight_decay(),
            0.5);
  EXPECT_EQ(static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[1].options()).weight_decay(),
            0.0);
  auto adam = CreateOver(
      "_target_: adam\nlr: 0.1\nweight_decay: 0.5\nno_decay_norm_and_bias: true\n", Named(net));
  ASSERT_EQ(adam->param_groups().size(), 2u);
  EXPECT_EQ(
      static_cast<torch::optim::AdamOptions&>(adam->param_groups()[1].options()).weight_decay(),
      0.0);
}

TEST(NoDecayNormAndBias, EmptyGroupIsSkipped) {
  TinyNet net;
  NamedParameters biases = {{"fc1.bias", net.fc1->bias}, {"fc2.bias", net.fc2->bias}};
  auto optimizer = CreateOver("_target_: adamw\nlr: 1e-3\nno_decay_norm_and_bias: true\n", biases);
  ASSERT_EQ(optimizer->param_groups().size(), 1u);
  EXPECT_EQ(static_cast<torch::optim::AdamWOptions&>(optimizer->param_groups()[0].options())
                .weight_decay(),
            0.0);
  NamedParameters weights = {{"fc1.weight", net.fc1->weight}};
  optimizer = CreateOver("_target_: adamw\nlr: 1e-3\nno_decay_norm_and_bias: true\n", weights);
  ASSERT_EQ(optimizer->param_groups().size(), 1u);
  EXPECT_EQ(static_cast<torch::optim::AdamWOptions&>(optimizer->param_groups()[0].options())
                .weight_decay(),
            0.01);
}

TEST(Optimizers, TiedParameterIsOptimizedOnce) {
  TinyNet net;
  NamedParameters tied = {{"a.weight", net.fc1->weight}, {"b.weight", net.fc1->weight}};
  auto optimizer = CreateOver("_target_: sgd\nlr: 0.1\n", tied);
  ASSERT_EQ(optimizer->param_groups().size(), 1u);
  EXPECT_EQ(optimizer->param_groups()[0].params().size(), 1u);
}

TEST(Optimizers, NoParametersIsAnError) {
  auto factory = BuildOptimizer("_target_: adam\nlr: 0.1\n");
  ASSERT_TRUE(factory.ok()) << factory.status();
  EXPECT_FALSE((*factory)->Create({}).ok());
}

// Two steps of SGD with momentum and weight decay on loss = sum(w * c), so grad = c, against
// PyTorch's update written out: d = g + wd * w; buf = d (first step) or m * buf + (1 - damp) * d;
// w -= lr * buf (or lr * (d + m * buf) with Nesterov).
void CheckSgdSteps(bool nesterov) {
  const double lr = 0.1, momentum = 0.9, dampening = 0.0, wd = 0.01;
  std::vector<double> w = {1.0, -2.0, 3.0};
  const std::vector<double> c = {0.5, -1.0, 2.0};
  torch::Tensor weight = torch::tensor(w, torch::dtype(torch::kFloat64)).set_requires_grad(true);
  auto optimizer = CreateOver(std::string("_target_: sgd\nlr: 0.1\nweight_decay: 0.01\n") +
                                  (nesterov ? "nesterov: true\n" : ""),
                              {{"w", weight}});
  ASSERT_NE(optimizer, nullptr);
  torch::Tensor coeff = torch::tensor(c, torch::dtype(torch::kFloat64));
  std::vector<double> buf(3);
  for (int step = 0; step < 2; ++step) {
    optimizer->zero_grad();
    (weight * coeff).sum().backward();
    optimizer->step();
    for (int i = 0; i < 3; ++i) {
      double d = c[i] + wd * w[i];
      buf[i] = step == 0 ? d : momentum * buf[i] + (1 - dampening) * d;
      w[i] -= lr * (nesterov ? d + momentum * buf[i] : buf[i]);
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(weight[i].item<double>(), w[i], 1e-12) << "step " << step << " index " << i;
    }
  }
}

TEST(Sgd, MomentumUpdateMatchesHandComputation) { CheckSgdSteps(/*nesterov=*/false); }
TEST(Sgd, NesterovUpdateMatchesHandComputation) { CheckSgdSteps(/*nesterov=*/true); }

TEST(OptimizerOptions, NonPositiveLrNamesKeyAndLine) {
  std::string m = OptimizerError("_target_: adamw\nlr: 0\n");
  EXPECT_TRUE(Contains(m, "optimizer.lr")) << m;
  EXPECT_TRUE(Contains(m, "optimizer.yaml:2")) << m;
  EXPECT_TRUE(Contains(m, "greater than 0")) << m;
  m = OptimizerError("_target_: sgd\nlr: -0.1\n");
  EXPECT_TRUE(Contains(m, "optimizer.lr")) << m;
}

TEST(OptimizerOptions, BetaOutOfRangeNamesElement) {
  std::string m = OptimizerError("_target_: adam\nlr: 0.1\nbetas: [0.9, 1.0]\n");
  EXPECT_TRUE(Contains(m, "optimizer.betas.1")) << m;
  EXPECT_TRUE(Contains(m, "optimizer.yaml:3")) << m;
  EXPECT_TRUE(Contains(m, "[0, 1)")) << m;
  m = OptimizerError("_target_: adamw\nlr: 0.1\nbetas: [-0.1, 0.9]\n");
  EXPECT_TRUE(Contains(m, "optimizer.betas.0")) << m;
  m = OptimizerError("_target_: adamw\nlr: 0.1\nbetas: [0.9]\n");
  EXPECT_TRUE(Contains(m, "optimizer.betas")) << m;
}

TEST(OptimizerOptions, NesterovNeedsMomentumAndNoDampening) {
  std::string m = OptimizerError("_target_: sgd\nlr: 0.1\nmomentum: 0\nnesterov: true\n");
  EXPECT_TRUE(Contains(m, "optimizer.nesterov")) << m;
  EXPECT_TRUE(Contains(m, "optimizer.yaml:4")) << m;
  EXPECT_TRUE(Contains(m, "momentum > 0")) << m;
  m = OptimizerError("_target_: sgd\nlr: 0.1\nnesterov: true\ndampening: 0.1\n");
  EXPECT_TRUE(Contains(m, "optimizer.nesterov")) << m;
  EXPECT_TRUE(Contains(m, "dampening")) << m;
}

TEST(OptimizerOptions, NegativeWeightDecayAndMissingLr) {
  std::string m = OptimizerError("_target_: adamw\nlr: 0.1\nweight_decay: -1\n");
  EXPECT_TRUE(Contains(m, "optimizer.weight_decay")) << m;
  m = OptimizerError("_target_: adam\n");
  EXPECT_TRUE(Contains(m, "optimizer.lr")) << m;
}

// --- Parameter groups ----------------------------------------------------------------------------

// The parameter group that holds `tensor`.
const torch::optim::OptimizerParamGroup& GroupOf(torch::optim::Optimizer& optimizer,
                                                 const torch::Tensor& tensor) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (p.is_same(tensor)) return group;
    }
  }
  ADD_FAILURE() << "tensor in no group";
  return optimizer.param_groups().front();
}

// One plain SGD step (momentum 0) with every gradient 1: each parameter moves by
// -lr * (1 + weight_decay * p), with the lr and weight decay of its own group.
TEST(ParamGroups, EachParameterMovesByItsGroupsLrAndWeightDecay) {
  TinyNet net;
  auto optimizer = CreateOver(
      "_target_: sgd\nlr: 0.1\nmomentum: 0\nweight_decay: 0.01\nparam_groups:\n"
      "  - {params: [fc2.*], lr: 0.5, weight_decay: 0.2}\n"
      "  - {params: ['norm.*'], lr: 0.01}\n",
      Named(net));
  ASSERT_NE(optimizer, nullptr);
  // The rest (fc1) first, then the groups in their order.
  ASSERT_EQ(optimizer->param_groups().size(), 3u);
  EXPECT_TRUE(optimizer->param_groups()[0].params()[0].is_same(net.fc1->weight));
  EXPECT_TRUE(optimizer->param_groups()[1].params()[0].is_same(net.fc2->weight));
  EXPECT_TRUE(optimizer->param_groups()[2].params()[0].is_same(net.norm->weight));
  std::map<std::string, std::pair<double, double>> expected = {
      {"fc1.weight", {0.1, 0.01}}, {"fc1.bias", {0.1, 0.01}},  {"norm.weight", {0.01, 0.01}},
      {"norm.bias", {0.01, 0.01}}, {"fc2.weight", {0.5, 0.2}}, {"fc2.bias", {0.5, 0.2}}};
  std::map<std::string, torch::Tensor> before;
  for (const auto& p : net.named_parameters()) {
    before[p.key()] = p.value().detach().clone();
    p.value().mutable_grad() = torch::ones_like(p.value());
  }
  optimizer->step();
  for (const auto& p : net.named_parameters()) {
    auto [lr, wd] = expected.at(p.key());
    torch::Tensor want = before[p.key()] - lr * (1 + wd * before[p.key()]);
    EXPECT_TRUE(torch::allclose(p.value(), want, 1e-6, 1e-7)) << p.key();
  }
}

// A group's options are the optimizer's with the group's own values over them (betas, eps,
// amsgrad for Adam); no_decay_norm_and_bias splits every group.
TEST(ParamGroups, GroupOptionsOverrideTheOptimizersOwn) {
  TinyNet net;
  auto optimizer = CreateOver(
      "_target_: adamw\nlr: 1e-3\nno_decay_norm_and_bias: true\nparam_groups:\n"
      "  - {params: ['fc2.*'], betas: [0.5, 0.9], eps: 1e-6, amsgrad: true}\n",
      Named(net));
  ASSERT_NE(optimizer, nullptr);
  // rest: fc1.weight; rest without decay: fc1.bias, norm.*; fc2.weight; fc2.bias without decay.
  ASSERT_EQ(optimizer->param_groups().size(), 4u);
  auto& fc2 = static_cast<const torch::optim::AdamWOptions&>(
      GroupOf(*optimizer, net.fc2->weight).options());
  EXPECT_EQ(fc2.lr(), 1e-3);
  EXPECT_EQ(std::get<0>(fc2.betas()), 0.5);
  EXPECT_EQ(std::get<1>(fc2.betas()), 0.9);
  EXPECT_EQ(fc2.eps(), 1e-6);
  EXPECT_TRUE(fc2.amsgrad());
  EXPECT_EQ(fc2.weight_decay(), 0.01);
  auto& fc2_bias =
      static_cast<const torch::optim::AdamWOptions&>(GroupOf(*optimizer, net.fc2->bias).options());
  EXPECT_EQ(fc2_bias.weight_decay(), 0.0);
  EXPECT_TRUE(fc2_bias.amsgrad());
  auto& fc1 = static_cast<const torch::optim::AdamWOptions&>(
      GroupOf(*optimizer, net.fc1->weight).options());
  EXPECT_EQ(std::get<0>(fc1.betas()), 0.9);
  EXPECT_FALSE(fc1.amsgrad());
}

// Frozen parameters stay out, but their names still count: a group of frozen parameters only
// is no error (backbone_finetuning adds them later), and layers are counted over the model.
TEST(ParamGroups, GlobsAreCheckedAgainstTheWholeModel) {
  TinyNet net;
  auto factory =
      BuildOptimizer("_target_: sgd\nlr: 0.1\nparam_groups: [{params: ['fc2.*'], lr: 0.5}]\n");
  ASSERT_TRUE(factory.ok()) << factory.status();
  NamedParameters trainable = {{"fc1.weight", net.fc1->weight}, {"fc1.bias", net.fc1->bias}};
  std::vector<std::string> all;
  for (const auto& p : net.named_parameters()) all.push_back(p.key());
  auto optimizer = (*factory)->Create(trainable, all);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  ASSERT_EQ((*optimizer)->param_groups().size(), 1u);
  EXPECT_EQ((*optimizer)->param_groups()[0].options().get_lr(), 0.1);
  // Only fc2 given (as when it is unfrozen): its own group's lr.
  optimizer = (*factory)->Create({{"fc2.weight", net.fc2->weight}}, all);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  EXPECT_EQ((*optimizer)->param_groups()[0].options().get_lr(), 0.5);
}

std::string CreateError(const std::string& yaml, torch::nn::Module& module) {
  auto factory = BuildOptimizer(yaml);
  EXPECT_TRUE(factory.ok()) << factory.status();
  if (!factory.ok()) return "";
  auto optimizer = (*factory)->Create(Named(module));
  EXPECT_FALSE(optimizer.ok());
  std::string message = optimizer.ok() ? "" : std::string(optimizer.status().message());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

TEST(ParamGroups, BadGroupsAreRefusedInOneLine) {
  TinyNet net;
  // As torch.optim: a parameter in two groups is an error, not first-match-wins.
  EXPECT_EQ(CreateError("_target_: sgd\nlr: 0.1\nparam_groups:\n  - {params: ['fc*'], lr: 0.5}\n"
                        "  - {params: ['*.weight'], lr: 0.01}\n",
                        net),
            "'fc1.weight' is in two parameter groups: optimizer.param_groups.0 ('fc*') and "
            "optimizer.param_groups.1 ('*.weight'); a parameter can be in one group only, as in "
            "torch.optim");
  // As model.freeze and init_ignore: a glob that matches nothing is an error.
  EXPECT_EQ(
      CreateError("_target_: sgd\nlr: 0.1\nparam_groups: [{params: [fc2.*, head.*], lr: 0.5}]\n",
                  net),
      "optimizer.param_groups.0.params: 'head.*' matches no parameter of the model (its 6: "
      "fc1.weight, fc1.bias, norm.weight, norm.bias, fc2.weight, fc2.bias)");
  EXPECT_EQ(
      OptimizerError("_target_: sgd\nlr: 0.1\nparam_groups: [{lr: 0.5}]\n"),
      "option 'optimizer.param_groups.0.params' of optimizer 'sgd' must be a non-empty list of "
      "parameter-name globs ([head.*, fc*]), got null");
  EXPECT_EQ(
      OptimizerError("_target_: sgd\nlr: 0.1\nparam_groups:\n  - {params: [fc2.*], lr: -1}\n"),
      "option 'optimizer.param_groups.0.lr' of optimizer 'sgd' must be greater than 0, got -1 "
      "(set at optimizer.yaml:4)");
  std::string m =
      OptimizerError("_target_: sgd\nlr: 0.1\nparam_groups:\n  - {params: [fc2.*], momentun: 0}\n");
  EXPECT_TRUE(Contains(m, "optimizer.param_groups.0.momentun")) << m;
  EXPECT_TRUE(Contains(m, "did you mean 'momentum'")) << m;
  EXPECT_EQ(
      OptimizerError(
          "_target_: sgd\nlr: 0.1\nparam_groups:\n  - {params: [fc2.*], lr_decay: 0.5}\n"),
      "option 'optimizer.param_groups.0.lr_decay' of optimizer 'sgd' must be set for the whole "
      "optimizer, not in a group, got 0.5 (set at optimizer.yaml:4)");
  m = OptimizerError(
      "_target_: sgd\nlr: 0.1\nparam_groups:\n  - {params: [fc2.*], momentum: 0, nesterov: "
      "true}\n");
  EXPECT_TRUE(Contains(
      m, "option 'optimizer.param_groups.0.nesterov' of optimizer 'sgd' must be false unless"))
      << m;
  EXPECT_EQ(
      OptimizerError("_target_: sgd\nlr: 0.1\nparam_groups: [fc2.*]\n"),
      "option 'optimizer.param_groups.0' of optimizer 'sgd' must be a mapping {params: [globs], "
      "OPTION: value, ...}, got fc2.* (set at optimizer.yaml:3)");
}

std::shared_ptr<Model> BuildModel(const std::string& yaml) {
  auto model = Registry<Model>::Get().Instantiate(ConfigOf(yaml, "model"));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// The lr of each named parameter's group.
std::map<std::string, double> LrByName(const std::string& optimizer_yaml,
                                       torch::nn::Module& model) {
  auto optimizer = CreateOver(optimizer_yaml, Named(model));
  std::map<std::string, double> out;
  if (optimizer == nullptr) return out;
  for (const auto& p : model.named_parameters())
    out[p.key()] = GroupOf(*optimizer, p.value()).options().get_lr();
  return out;
}

// BEiT's layer-wise decay with L blocks: embeddings lr * d^(L+1), block N lr * d^(L-N), the final
// norm and the head lr, on the real parameter names of gpt, transformer_classifier and vit.
TEST(LayerWiseLrDecay, FollowsBeitsLayerIdsOnTransformers) {
  const double lr = 0.1, d = 0.5;
  const std::string adamw = "_target_: adamw\nlr: 0.1\nlr_decay: 0.5\n";
  auto gpt = BuildModel(
      "_target_: gpt\nvocab_size: 11\nblock_size: 8\ndim: 8\ndepth: 3\nheads: 2\nmlp_dim: 16\n");
  ASSERT_NE(gpt, nullptr);
  auto lrs = LrByName(adamw, *gpt);
  EXPECT_DOUBLE_EQ(lrs.at("transformer.wte.weight"), lr * std::pow(d, 4));
  EXPECT_DOUBLE_EQ(lrs.at("transformer.wpe.weight"), lr * std::pow(d, 4));
  EXPECT_DOUBLE_EQ(lrs.at("transformer.h.0.attn.c_attn.weight"), lr * std::pow(d, 3));
  EXPECT_DOUBLE_EQ(lrs.at("transformer.h.1.mlp.c_fc.weight"), lr * std::pow(d, 2));
  EXPECT_DOUBLE_EQ(lrs.at("transformer.h.2.ln_2.bias"), lr * d);
  EXPECT_DOUBLE_EQ(lrs.at("transformer.ln_f.weight"), lr);
  auto classifier = BuildModel(
      "_target_: transformer_classifier\nvocab_size: 11\nmax_length: 8\ndim: 8\ndepth: 2\n"
      "heads: 2\nmlp_dim: 16\nnum_classes: 3\n");
  ASSERT_NE(classifier, nullptr);
  lrs = LrByName(adamw, *classifier);
  EXPECT_DOUBLE_EQ(lrs.at("transformer.wte.weight"), lr * std::pow(d, 3));
  EXPECT_DOUBLE_EQ(lrs.at("transformer.h.0.ln_1.weight"), lr * std::pow(d, 2));
  EXPECT_DOUBLE_EQ(lrs.at("transformer.h.1.ln_1.weight"), lr * d);
  EXPECT_DOUBLE_EQ(lrs.at("head.weight"), lr);
  auto vit = BuildModel(
      "_target_: vit\nimage_size: 8\npatch_size: 4\nin_channels: 1\ndim: 8\ndepth: 4\nheads: 2\n"
      "mlp_dim: 16\nnum_classes: 3\n");
  ASSERT_NE(vit, nullptr);
  lrs = LrByName(
      "_target_: sgd\nlr: 0.1\nlr_decay: 0.5\nparam_groups: [{params: ['heads.*'], lr: 0.3}]\n",
      *vit);
  EXPECT_DOUBLE_EQ(lrs.at("conv_proj.weight"), lr * std::pow(d, 5));
  EXPECT_DOUBLE_EQ(lrs.at("class_token"), lr * std::pow(d, 5));
  EXPECT_DOUBLE_EQ(lrs.at("encoder.pos_embedding"), lr * std::pow(d, 5));
  EXPECT_DOUBLE_EQ(lrs.at("encoder.layers.encoder_layer_0.ln_1.weight"), lr * std::pow(d, 4));
  EXPECT_DOUBLE_EQ(lrs.at("encoder.layers.encoder_layer_3.mlp.0.weight"), lr * d);
  EXPECT_DOUBLE_EQ(lrs.at("encoder.ln.weight"), lr);
  // A group's own lr, decayed by its layer (the head's: x 1).
  EXPECT_DOUBLE_EQ(lrs.at("heads.head.weight"), 0.3);
}

TEST(LayerWiseLrDecay, ModelsWithoutOneStackOfBlocksAreRefused) {
  auto cnn = BuildModel(
      "_target_: cnn\nin_channels: 1\nchannels: [4, 8]\ninput_size: 8\nhidden: 16\nnum_classes: "
      "3\n");
  ASSERT_NE(cnn, nullptr);
  EXPECT_EQ(CreateError("_target_: adamw\nlr: 0.1\nlr_decay: 0.75\n", *cnn),
            "optimizer.lr_decay: the model has no stacked blocks to decay over (parameter names "
            "PREFIX.N.* such as blocks.3.attn.weight; its parameters: conv1.weight, bn1.weight, "
            "bn1.bias, conv2.weight, ...)");
  auto resnet = BuildModel("_target_: resnet\nnum_classes: 3\n");
  ASSERT_NE(resnet, nullptr);
  std::string m = CreateError("_target_: adamw\nlr: 0.1\nlr_decay: 0.75\n", *resnet);
  EXPECT_TRUE(Contains(
      m,
      "optimizer.lr_decay: the model has 4 stacks of numbered blocks (layer1., layer2., layer3., "
      "layer4.); name the one to decay over with optimizer.lr_decay_blocks=PREFIX"))
      << m;
  // Naming one: layer4's 2 blocks decay, what comes before them is the "embedding".
  auto lrs = LrByName("_target_: sgd\nlr: 0.1\nlr_decay: 0.5\nlr_decay_blocks: layer4.\n", *resnet);
  EXPECT_DOUBLE_EQ(lrs.at("layer1.0.conv1.weight"), 0.1 * 0.125);
  EXPECT_DOUBLE_EQ(lrs.at("layer4.0.conv1.weight"), 0.1 * 0.25);
  EXPECT_DOUBLE_EQ(lrs.at("layer4.1.conv1.weight"), 0.1 * 0.5);
  EXPECT_DOUBLE_EQ(lrs.at("fc.weight"), 0.1);
  EXPECT_EQ(
      CreateError("_target_: adamw\nlr: 0.1\nlr_decay: 0.75\nlr_decay_blocks: blocks.\n", *resnet),
      "optimizer.lr_decay_blocks: no parameter name is 'blocks.' followed by a block number and "
      "a dot (e.g. blocks.0.weight)");
  m = OptimizerError("_target_: adamw\nlr: 0.1\nlr_decay: 1.5\n");
  EXPECT_TRUE(Contains(m, "option 'optimizer.lr_decay' of optimizer 'adamw' must be in (0, 1]"))
      << m;
}

// Schedules scale every group from its own base lr: two groups at 0.1 and 0.02 keep their ratio
// through cosine_with_warmup's warmup and decay.
TEST(ParamGroups, SchedulesKeepEachGroupsRatio) {
  TinyNet net;
  auto optimizer = CreateOver(
      "_target_: adamw\nlr: 0.1\nparam_groups: [{params: [fc2.*, 'norm.*'], lr: 0.02}]\n",
      Named(net));
  ASSERT_EQ(optimizer->param_groups().size(), 2u);
  auto scheduler =
      BuildScheduler("_target_: cosine_with_warmup\nwarmup_steps: 3\ntotal_steps: 10\n");
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  ASSERT_TRUE((*scheduler)->Attach(optimizer.get(), 10, 5).ok());
  for (int step = 1; step <= 9; ++step) {
    (*scheduler)->Step(kNaN);
    double first = optimizer->param_groups()[0].options().get_lr();
    double second = optimizer->param_groups()[1].options().get_lr();
    double expected =
        step < 3 ? 0.1 * step / 3.0 : 0.1 * 0.5 * (1 + std::cos(M_PI * (step - 3) / 7.0));
    EXPECT_DOUBLE_EQ(first, expected) << "step " << step;
    EXPECT_NEAR(second / first, 0.2, 1e-12) << "step " << step;
  }
}

// --- Schedulers ---------------------------------------------------------------------------------

// An SGD optimizer with two groups (lr 0.1 and 0.02), so schedules are checked per group.
struct TwoGroups {
  TwoGroups() {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{a},
                        std::make_unique<torch::optim::SGDOptions>(0.1));
    groups.emplace_back(std::vector<torch::Tensor>{b},
                        std::make_unique<torch::optim::SGDOptions>(0.02));
    optimizer =
        std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(0.1));
  }
  double lr(size_t group) const { return optimizer->param_groups()[group].options().get_lr(); }

  torch::Tensor a = torch::zeros({2}, torch::requires_grad());
  torch::Tensor b = torch::zeros({2}, torch::requires_grad());
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  static constexpr double kBase[2] = {0.1, 0.02};
};

std::shared_ptr<Scheduler> Attached(const std::string& yaml, TwoGroups& opt, int64_t total = 0,
                                    int64_t per_epoch = 0) {
  auto scheduler = BuildScheduler(yaml);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  if (!scheduler.ok()) return nullptr;
  absl::Status attached = (*scheduler)->Attach(opt.optimizer.get(), total, per_epoch);
  EXPECT_TRUE(attached.ok()) << attached;
  return *scheduler;
}

// Checks the lr of both groups for steps 0..n-1 against `expected(step, base)`.
template <typename Fn>
void ExpectSequence(Scheduler& scheduler, TwoGroups& opt, int n, Fn expected) {
  for (int step = 0; step < n; ++step) {
    if (step > 0) scheduler.Step(kNaN);
    for (size_t g = 0; g < 2; ++g) {
      EXPECT_DOUBLE_EQ(opt.lr(g), expected(step, TwoGroups::kBase[g]))
          << "step " << step << " group " << g;
    }
  }
}

TEST(StepSchedule, DecaysEveryStepSize) {
  TwoGroups opt;
  auto s = Attached("_target_: step\nstep_size: 3\ngamma: 0.5\n", opt);
  EXPECT_EQ(s->interval(), Scheduler::Interval::kEpoch);
  EXPECT_EQ(s->monitor(), "");
  ExpectSequence(*s, opt, 10, [](int n, double base) { return base * std::pow(0.5, n / 3); });
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.1 * 0.125);  // step 9
}

TEST(MultiStepSchedule, DecaysAtEachMilestone) {
  TwoGroups opt;
  auto s = Attached("_target_: multistep\nmilestones: [5, 2]\n", opt);
  EXPECT_EQ(s->interval(), Scheduler::Interval::kEpoch);
  const double factor[] = {1, 1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01};
  ExpectSequence(*s, opt, 8, [&](int n, double base) { return base * factor[n]; });
}

TEST(CosineWithWarmup, WarmupThenCosineToMinLr) {
  TwoGroups opt;
  auto s = Attached(
      "_target_: cosine_with_warmup\nwarmup_steps: 4\nmin_lr: 0.001\ntotal_steps: 12\n", opt);
  EXPECT_EQ(s->interval(), Scheduler::Interval::kStep);
  EXPECT_EQ(opt.lr(0), 0.0);  // step 0 of a warmup, as LambdaLR sets it
  const double min = 0.001;
  auto expected = [&](int n, double base) {
    if (n < 4) return base * n / 4.0;
    double progress = std::min(1.0, (n - 4) / 8.0);
    return min + (base - min) * 0.5 * (1 + std::cos(M_PI * progress));
  };
  ExpectSequence(*s, opt, 16, expected);
  // Landmarks, independent of the formula above.
  TwoGroups again;
  auto t = Attached(
      "_target_: cosine_with_warmup\nwarmup_steps: 4\nmin_lr: 0.001\ntotal_steps: 12\n", again);
  std::vector<double> lrs;
  for (int n = 0; n <= 14; ++n) {
    if (n > 0) t->Step(kNaN);
    lrs.push_back(again.lr(0));
  }
  EXPECT_DOUBLE_EQ(lrs[2], 0.05);
  EXPECT_DOUBLE_EQ(lrs[4], 0.1);
  EXPECT_DOUBLE_EQ(lrs[8], (0.1 + 0.001) / 2);  // the midpoint of the cosine
  EXPECT_DOUBLE_EQ(lrs[12], 0.001);
  EXPECT_DOUBLE_EQ(lrs[14], 0.001);  // held after the end
  for (int n = 5; n <= 12; ++n) EXPECT_LT(lrs[n], lrs[n - 1]) << n;
}

TEST(CosineWithWarmup, WithoutWarmupStartsAtBaseAndTakesLengthFromAttach) {
  TwoGroups opt;
  auto s = Attached("_target_: cosine_with_warmup\n", opt, /*total=*/10);
  ExpectSequence(*s, opt, 11,
                 [](int n, double base) { return base * 0.5 * (1 + std::cos(M_PI * n / 10.0)); });
  EXPECT_EQ(opt.lr(0), 0.0);  // step 10: min_lr 0
}

TEST(CosineWithWarmup, EpochIntervalCountsEpochs) {
  TwoGroups opt;
  // 100 steps at 30 per epoch is 4 epochs (the last one short).
  auto s = Attached("_target_: cosine_with_warmup\ninterval: epoch\n", opt, 100, 30);
  EXPECT_EQ(s->interval(), Scheduler::Interval::kEpoch);
  s->Step(kNaN);
  s->Step(kNaN);
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.05);
  s->Step(kNaN);
  s->Step(kNaN);
  EXPECT_EQ(opt.lr(0), 0.0);
}

TEST(CosineWithWarmup, UnknownLengthIsAnError) {
  TwoGroups opt;
  auto s = BuildScheduler("_target_: cosine_with_warmup\n");
  ASSERT_TRUE(s.ok()) << s.status();
  absl::Status status = (*s)->Attach(opt.optimizer.get(), 0, 0);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(std::string(status.message()), "scheduler.total_steps")) << status;
}

TEST(OneCycle, FollowsPyTorchFormulas) {
  TwoGroups opt;
  auto s = Attached("_target_: one_cycle\nmax_lr: 1.0\n", opt, /*total=*/10);
  EXPECT_EQ(s->interval(), Scheduler::Interval::kStep);
  // initial 1/25 = 0.04, floor 0.04 / 1e4; warm phase ends at step 0.3 * 10 - 1 = 2, last is 9.
  auto anneal = [](double start, double end, double pct) {
    return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1);
  };
  std::vector<double> lrs;
  for (int n = 0; n < 12; ++n) {
    if (n > 0) s->Step(kNaN);
    EXPECT_EQ(opt.lr(0), opt.lr(1)) << "max_lr sets every group, base lrs are ignored";
    double expected =
        n <= 2 ? anneal(0.04, 1.0, n / 2.0) : anneal(1.0, 0.04 / 1e4, (std::min(n, 9) - 2) / 7.0);
    EXPECT_DOUBLE_EQ(opt.lr(0), expected) << n;
    lrs.push_back(opt.lr(0));
  }
  // PyTorch's formula gives 1 + (0.04 - 1) = 0.040000000000000036 at step 0, and so do we.
  EXPECT_NEAR(lrs[0], 0.04, 1e-15);
  EXPECT_DOUBLE_EQ(lrs[1], 0.52);
  EXPECT_DOUBLE_EQ(lrs[2], 1.0);
  EXPECT_DOUBLE_EQ(lrs[9], 4e-6);
  EXPECT_DOUBLE_EQ(lrs[11], 4e-6);  // held after the last step
}

TEST(LinearSchedule, InterpolatesFactorThenHolds) {
  TwoGroups opt;
  auto s = Attached("_target_: linear\nstart_factor: 0.5\nend_factor: 1.0\ntotal_steps: 4\n", opt);
  EXPECT_EQ(s->interval(), Scheduler::Interval::kStep);
  const double factor[] = {0.5, 0.625, 0.75, 0.875, 1.0, 1.0, 1.0};
  ExpectSequence(*s, opt, 7, [&](int n, double base) { return base * factor[n]; });
}

TEST(LinearSchedule, DefaultsDecayToZeroOverTheRun) {
  TwoGroups opt;
  auto s = Attached("_target_: linear\n", opt, /*total=*/5);
  ExpectSequence(*s, opt, 7, [](int n, double base) {
    return base * (1.0 + (0.0 - 1.0) * std::min(n, 5) / 5.0);
  });
}

TEST(ReduceOnPlateau, CutsAfterPatienceRunsOut) {
  TwoGroups opt;
  auto s = Attached("_target_: reduce_on_plateau\npatience: 2\nfactor: 0.5\nmin_lr: 0.015\n", opt);
  EXPECT_EQ(s->interval(), Scheduler::Interval::kEpoch);
  EXPECT_EQ(s->monitor(), "val/loss");
  EXPECT_EQ(opt.lr(0), 0.1);
  s->Step(1.0);     // best
  s->Step(0.9999);  // within the 1e-4 relative threshold: bad 1
  s->Step(kNaN);    // no metric: ignored
  s->Step(1.5);     // bad 2
  EXPECT_EQ(opt.lr(0), 0.1);
  s->Step(1.0);  // bad 3 > patience: cut
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.05);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.015);  // 0.01 floored at min_lr
  s->Step(0.5);                        // improvement resets the count
  s->Step(0.5);
  s->Step(0.5);
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.05);
  s->Step(0.5);
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.025);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.015);
}

TEST(ReduceOnPlateau, MaxModeAndCustomMonitor) {
  TwoGroups opt;
  auto s = Attached("_target_: reduce_on_plateau\nmonitor: val/acc\nmode: max\npatience: 0\n", opt);
  EXPECT_EQ(s->monitor(), "val/acc");
  s->Step(0.5);
  s->Step(0.6);
  EXPECT_EQ(opt.lr(0), 0.1);
  s->Step(0.6);
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.01);
}

// Runs `yaml` for `before` steps, checkpoints it, restores into a fresh scheduler attached to an
// optimizer with different lrs, and checks both continue identically.
void CheckResume(const std::string& yaml, int64_t total, int before, bool load_before_attach,
                 const std::vector<double>& metrics = {}) {
  auto metric = [&](int n) { return metrics.empty() ? kNaN : metrics[n % metrics.size()]; };
  TwoGroups original;
  auto s = Attached(yaml, original, total);
  for (int n = 0; n < before; ++n) s->Step(metric(n));
  torch::serialize::OutputArchive out;
  s->Save(out);
  std::stringstream bytes;
  out.save_to(bytes);

  TwoGroups resumed;
  for (auto& group : resumed.optimizer->param_groups()) group.options().set_lr(0.7);
  auto r = BuildScheduler(yaml);
  ASSERT_TRUE(r.ok()) << r.status();
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  if (load_before_attach) (*r)->Load(in);
  ASSERT_TRUE((*r)->Attach(resumed.optimizer.get(), total, 0).ok());
  if (!load_before_attach) (*r)->Load(in);
  for (int n = before; n < before + 12; ++n) {
    for (size_t g = 0; g < 2; ++g) {
      EXPECT_EQ(resumed.lr(g), original.lr(g)) << yaml << " step " << n << " group " << g;
    }
    s->Step(metric(n));
    (*r)->Step(metric(n));
  }
}

TEST(SchedulerState, SaveLoadContinuesTheSameSequence) {
  for (bool load_first : {false, true}) {
    CheckResume("_target_: step\nstep_size: 2\n", 0, 3, load_first);
    CheckResume("_target_: multistep\nmilestones: [2, 6]\n", 0, 3, load_first);
    CheckResume("_target_: cosine_with_warmup\nwarmup_steps: 3\nmin_lr: 0.001\n", 15, 5,
                load_first);
    CheckResume("_target_: one_cycle\nmax_lr: 0.5\n", 15, 4, load_first);
    CheckResume("_target_: linear\nstart_factor: 0.2\n", 10, 3, load_first);
    CheckResume("_target_: reduce_on_plateau\npatience: 1\n", 0, 4, load_first,
                {1.0, 1.0, 1.0, 0.5, 0.9, 0.9});
  }
}

TEST(SchedulerState, ResumedLengthWinsOverANewPlan) {
  TwoGroups original;
  auto s = Attached("_target_: cosine_with_warmup\n", original, /*total=*/10);
  for (int n = 0; n < 5; ++n) s->Step(kNaN);
  torch::serialize::OutputArchive out;
  s->Save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  TwoGroups resumed;
  auto r = Attached("_target_: cosine_with_warmup\n", resumed, /*total=*/40);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  r->Load(in);
  EXPECT_DOUBLE_EQ(resumed.lr(0), 0.05);  // midpoint of the saved 10-step schedule
}

TEST(SchedulerOptions, BadValuesNameKeyAndLine) {
  std::string m = SchedulerError("_target_: step\nstep_size: 2\ninterval: batch\n");
  EXPECT_TRUE(Contains(m, "scheduler.interval")) << m;
  EXPECT_TRUE(Contains(m, "scheduler.yaml:3")) << m;
  EXPECT_TRUE(Contains(m, "one of: step, epoch")) << m;
  m = SchedulerError("_target_: step\nstep_size: 0\n");
  EXPECT_TRUE(Contains(m, "scheduler.step_size")) << m;
  EXPECT_TRUE(Contains(m, "scheduler.yaml:2")) << m;
  m = SchedulerError("_target_: multistep\nmilestones: [3, -1]\n");
  EXPECT_TRUE(Contains(m, "scheduler.milestones.1")) << m;
  m = SchedulerError("_target_: cosine_with_warmup\nwarmup_steps: -5\n");
  EXPECT_TRUE(Contains(m, "scheduler.warmup_steps")) << m;
  m = SchedulerError("_target_: cosine_with_warmup\ntotal_steps: 0\n");
  EXPECT_TRUE(Contains(m, "scheduler.total_steps")) << m;
  m = SchedulerError("_target_: one_cycle\nmax_lr: 0.1\npct_start: 1.5\n");
  EXPECT_TRUE(Contains(m, "scheduler.pct_start")) << m;
  EXPECT_TRUE(Contains(m, "scheduler.yaml:3")) << m;
  m = SchedulerError("_target_: one_cycle\nmax_lr: 0\n");
  EXPECT_TRUE(Contains(m, "scheduler.max_lr")) << m;
  m = SchedulerError("_target_: linear\nend_factor: -1\n");
  EXPECT_TRUE(Contains(m, "scheduler.end_factor")) << m;
  m = SchedulerError("_target_: reduce_on_plateau\nfactor: 1.5\n");
  EXPECT_TRUE(Contains(m, "scheduler.factor")) << m;
  m = SchedulerError("_target_: reduce_on_plateau\nmode: best\n");
  EXPECT_TRUE(Contains(m, "scheduler.mode")) << m;
  EXPECT_TRUE(Contains(m, "one of: min, max")) << m;
}

}  // namespace optim_test
}  // namespace kiln
