"""Would a row-blocked SwiGLU MLP beat kiln's whole-tensor one in a LoRA step's frozen MLP?

Usage: mlp_blocking.py [THREADS] [ROUNDS]   (run by python_tuned; needs a C++ compiler: the
kernels build with torch.utils.cpp_extension on first use, into $TMPDIR/kiln_mlp_blocking)

The issue-54 lead "a row-blocked frozen MLP backward": bench/lora_speed.sh's Llama (4096 rows of
dim 128, SwiGLU 344) with its MLP frozen (LoRA on q_proj and v_proj) needs, per layer, gate and up
forward, silu(g) u, down forward; backward, dh = dy Wd, the SwiGLU backward, dx = dg Wg + du Wu. The
whole-tensor form (what kiln's LlamaMlp runs: MKL on all rows over both threads, the elementwise
pass over [4096, 344] tensors) writes and rereads g, u, h, dh, dg and du, 5.6 MB each, beyond L2.
The blocked form gives each thread its blocks of rows, runs gate and up as one product into a
[block, 688] buffer that stays in L2, the elementwise pass on it, and down, so that only g and u
(for the backward) leave the cache. Both forms use the same elementwise loops, so the difference
is the blocking alone. Prints each form's forward and backward ms per layer, and the products
alone (the four products on whole tensors, no elementwise pass) for scale.
"""

import os
import sys
import tempfile

import torch
from torch.utils.cpp_extension import load_inline

import timing

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
static inline void silu_mul(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { float s = 1.f / (1.f + std::exp(-g[i])); y[i] = g[i] * s * u[i]; }
}
static inline void silu_mul_backward(const float* dy, const float* g, const float* u, float* dg,
                                     float* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float s = 1.f / (1.f + std::exp(-g[i]));
    du[i] = dy[i] * g[i] * s;
    dg[i] = dy[i] * u[i] * s * (1.f + g[i] * (1.f - s));
  }
}
std::vector<at::Tensor> whole_forward(at::Tensor x, at::Tensor wg, at::Tensor wu, at::Tensor wd) {
  auto g = at::mm(x, wg.t()), u = at::mm(x, wu.t());
  auto h = at::empty_like(g);
  const float *gp = g.data_ptr<float>(), *up = u.data_ptr<float>();
  float* hp = h.data_ptr<float>();
  at::parallel_for(0, g.numel(), 32768, [&](int64_t b, int64_t e) { silu_mul(gp + b, up + b, hp + b, e - b); });
  return {at::mm(h, wd.t()), g, u};
}
at::Tensor whole_backward(at::Tensor dy, at::Tensor g, at::Tensor u, at::Tensor wg, at::Tensor wu,
                          at::Tensor wd) {
  auto dh = at::mm(dy, wd);
  auto dg = at::empty_like(g), du = at::empty_like(u);
  const float *dhp = dh.data_ptr<float>(), *gp = g.data_ptr<float>(), *up = u.data_ptr<float>();
  float *dgp = dg.data_ptr<float>(), *dup = du.data_ptr<float>();
  at::parallel_for(0, g.numel(), 32768, [&](int64_t b, int64_t e) {
    silu_mul_backward(dhp + b, gp + b, up + b, dgp + b, dup + b, e - b);
  });
  auto dx = at::mm(dg, wg);
  dx.addmm_(du, wu);
  return dx;
}
// wgu [2H, D] (gate's rows, then up's); returns y and gu [N, 2H], kept for the backward.
std::vector<at::Tensor> blocked_forward(at::Tensor x, at::Tensor wgu, at::Tensor wd, int64_t block) {
  const int64_t n = x.size(0), h = wgu.size(0) / 2, d = wd.size(0);
  auto gu = at::empty({n, 2 * h}, x.options());
  auto y = at::empty({n, d}, x.options());
  auto wgu_t = wgu.t(), wd_t = wd.t();
  at::parallel_for(0, (n + block - 1) / block, 1, [&](int64_t b0, int64_t b1) {
    auto hidden = at::empty({block, h}, x.options());
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r = b * block, rows = std::min(block, n - r);
      auto gub = gu.narrow(0, r, rows);
      at::mm_out(gub, x.narrow(0, r, rows), wgu_t);
      const float* gp = gub.data_ptr<float>();
      float* hp = hidden.data_ptr<float>();
      for (int64_t i = 0; i < rows; ++i) silu_mul(gp + i * 2 * h, gp + i * 2 * h + h, hp + i * h, h);
      auto yb = y.narrow(0, r, rows);
      at::mm_out(yb, hidden.narrow(0, 0, rows), wd_t);
    }
  });
  return {y, gu};
}
at::Tensor blocked_backward(at::Tensor dy, at::Tensor gu, at::Tensor wgu, at::Tensor wd, int64_t block) {
  const int64_t n = dy.size(0), h = wgu.size(0) / 2;
  auto dx = at::empty({n, wgu.size(1)}, dy.options());
  at::parallel_for(0, (n + block - 1) / block, 1, [&](int64_t b0, int64_t b1) {
    auto dh = at::empty({block, h}, dy.options());
    auto dgu = at::empty({block, 2 * h}, dy.options());
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r = b * block, rows = std::min(block, n - r);
      auto dhb = dh.narrow(0, 0, rows);
      at::mm_out(dhb, dy.narrow(0, r, rows), wd);
      const float *gp = gu.data_ptr<float>() + r * 2 * h, *dp = dhb.data_ptr<float>();
      float* op = dgu.data_ptr<float>();
      for (int64_t i = 0; i < rows; ++i)
        silu_mul_backward(dp + i * h, gp + i * 2 * h, gp + i * 2 * h + h, op + i * 2 * h,
                          op + i * 2 * h + h, h);
      auto dxb = dx.narrow(0, r, rows);
      at::mm_out(dxb, dgu.narrow(0, 0, rows), wgu);
    }
  });
  return dx;
}
at::Tensor products(at::Tensor x, at::Tensor wgu, at::Tensor wd, at::Tensor dy, at::Tensor h,
                    at::Tensor dgu) {
  at::mm(x, wgu.t());
  at::mm(h, wd.t());
  at::mm(dy, wd);
  return at::mm(dgu, wgu);
}
"""


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    build = os.path.join(tempfile.gettempdir(), "kiln_mlp_blocking")
    os.makedirs(build, exist_ok=True)
    m = load_inline("kiln_mlp_blocking", cpp_sources=SOURCE, build_directory=build,
                    functions=["whole_forward", "whole_backward", "blocked_forward", "blocked_backward",
                               "products"],
                    extra_cflags=["-O3", "-mavx2", "-mfma", "-ffast-math"])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    n, d, hidden = 4096, 128, 344
    x, dy = torch.randn(n, d), torch.randn(n, d)
    wg, wu, wd = (torch.randn(hidden, d) * 0.1, torch.randn(hidden, d) * 0.1, torch.randn(d, hidden) * 0.1)
    wgu = torch.cat([wg, wu]).contiguous()
    y, g, u = m.whole_forward(x, wg, wu, wd)
    dx = m.whole_backward(dy, g, u, wg, wu, wd)
    blocks = [128, 256, 512]
    saved = {}
    for block in blocks:
        y2, gu = m.blocked_forward(x, wgu, wd, block)
        saved[block] = gu
        dx2 = m.blocked_backward(dy, gu, wgu, wd, block)
        assert torch.allclose(y, y2, atol=1e-4) and torch.allclose(dx, dx2, atol=1e-4), block
    h, dgu = torch.randn(n, hidden), torch.randn(n, 2 * hidden)

    def ms(fn):
        return timing.median_ms(fn, 100, warmup=5)

    print("# ms per layer (median of 100 calls), %d threads, torch %s; rows %d, dim %d, SwiGLU %d"
          % (threads, torch.__version__, n, d, hidden))
    print("%-6s %14s %14s %14s %s" % ("round", "whole fwd+bwd", "products only", "best blocked",
                                       "  blocked fwd+bwd by block"))
    for r in range(1, rounds + 1):
        whole = ms(lambda: m.whole_forward(x, wg, wu, wd)) + ms(lambda: m.whole_backward(dy, g, u, wg, wu, wd))
        alone = ms(lambda: m.products(x, wgu, wd, dy, h, dgu))
        blocked = {b: ms(lambda: m.blocked_forward(x, wgu, wd, b)) +
                   ms(lambda: m.blocked_backward(dy, saved[b], wgu, wd, b)) for b in blocks}
        print("%-6d %14.3f %14.3f %14.3f   %s" % (r, whole, alone, min(blocked.values()),
                                                " ".join("%d:%.3f" % kv for kv in blocked.items())))


if __name__ == "__main__":
    main()
