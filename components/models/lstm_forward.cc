#include "components/models/lstm_forward.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <exception>

#include "lib/base/torch_compat.h"

namespace kiln {

bool CpuAutocastRunsBf16Lstm() {
  static const bool runs = [] {
    const bool enabled = at::autocast::is_autocast_enabled(at::kCPU);
    const at::ScalarType dtype = at::autocast::get_autocast_dtype(at::kCPU);
    compat::SetCpuAutocast(true, at::kBFloat16);
    bool ok = true;
    try {
      torch::nn::LSTM probe(torch::nn::LSTMOptions(1, 1).batch_first(true));
      probe->forward(torch::zeros({1, 1, 1}));
    } catch (const std::exception&) {  // oneDNN's dnnl::error, not a c10::Error
      ok = false;
    }
    compat::SetCpuAutocast(enabled, dtype);
    return ok;
  }();
  return runs;
}

std::tuple<torch::Tensor, LstmState> LstmForward(torch::nn::LSTM& lstm, const torch::Tensor& input,
                                                 const std::optional<LstmState>& state) {
  const bool float32 = input.is_cpu() && at::autocast::is_autocast_enabled(at::kCPU) &&
                       lstm->parameters().front().scalar_type() == torch::kFloat32 &&
                       !CpuAutocastRunsBf16Lstm();
  if (!float32) return lstm->forward(input, state);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  std::optional<LstmState> state32;
  if (state.has_value()) {
    state32 =
        LstmState(std::get<0>(*state).to(torch::kFloat32), std::get<1>(*state).to(torch::kFloat32));
  }
  return lstm->forward(input.to(torch::kFloat32), state32);
}

}  // namespace kiln
