// Activation checkpointing (Chen et al. 2016; torch.utils.checkpoint's reentrant form): a block
// runs its forward without keeping its activations, and the backward runs it again, with
// gradients, from the block's saved input. Memory for activations drops to one tensor per block
// plus one block's worth during the backward; the cost is one more forward per block. The
// recompute sees what the first forward saw: the CPU (and CUDA) random state, so dropout draws
// the same masks, and the autocast state, so bf16-mixed computes in the same precision.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace kiln {

// block(x) with its activations recomputed in the backward. Outside training (no gradient mode)
// it is block(x).
torch::Tensor Checkpointed(std::function<torch::Tensor(const torch::Tensor&)> block,
                           const torch::Tensor& x);

}  // namespace kiln
