// torch::nn::LSTM's forward for kiln's models, bf16-mixed included on every CPU.
//
// Under CPU autocast, PyTorch runs an LSTM with float32 weights through oneDNN's bf16 LSTM, which
// oneDNN builds only on CPUs with bf16 instructions (avx512_bf16, AMX). Elsewhere PyTorch itself
// fails with "could not create a primitive descriptor for the LSTM forward propagation primitive".
// There this forward runs the LSTM in float32 with autocast off around it (what PyTorch computes
// with oneDNN turned off); everywhere else it is the LSTM's own forward.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <tuple>

namespace kiln {

using LstmState = std::tuple<torch::Tensor, torch::Tensor>;

// The output [B, T, hidden] (batch_first) and the final (h, c), as LSTMImpl::forward.
std::tuple<torch::Tensor, LstmState> LstmForward(
    torch::nn::LSTM& lstm, const torch::Tensor& input,
    const std::optional<LstmState>& state = std::nullopt);

// Whether oneDNN builds a bf16 LSTM on this CPU (probed once: a one-unit LSTM's forward under
// CPU autocast); false means LstmForward runs LSTMs in float32 under CPU autocast.
bool CpuAutocastRunsBf16Lstm();

}  // namespace kiln
