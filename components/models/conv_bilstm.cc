// `conv_bilstm`: a CTC acoustic model (DeepSpeech 2 / ESPnet style) over speech features
// [B, frames, F]. A convolutional front-end (3x3 convolutions with batch normalization and ReLU,
// each halving the frequency axis and striding time by its entry of time_strides), a
// bidirectional LSTM, dropout
// and a linear layer to per-frame class logits [B, frames', num_classes]; the output lengths
// follow the time strides. The backward direction reads each sequence reversed within its own
// length, so padding never reaches a real frame's state in either direction. (Each direction is
// its own one-layer LSTM over the padded batch: LibTorch 1.13's packed-sequence LSTM on CPU runs
// about 10x slower than the padded one.)
#include "absl/strings/str_cat.h"
#include "components/models/lstm_forward.h"
#include "components/models/model.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

// For each sequence b, the time index that reverses its first lengths[b] frames and keeps the
// padding after them in place: [B, T] int64.
torch::Tensor ReverseWithinLength(const torch::Tensor& lengths, int64_t frames,
                                  torch::Device device) {
  torch::Tensor t = torch::arange(frames, torch::kInt64).unsqueeze(0);
  torch::Tensor len = lengths.unsqueeze(1);
  return torch::where(t < len, len - 1 - t, t).to(device);
}

struct ConvBiLstmOptions {
  int64_t features = 40, channels = 32, hidden = 256, layers = 3, num_classes = 0;
  std::vector<int64_t> time_strides = {2, 1};
  double dropout = 0.2;
  bool batch_norm = true;
};

class ConvBiLstm : public SequenceModel {
 public:
  explicit ConvBiLstm(const ConvBiLstmOptions& o) : o_(o) {
    int64_t in = 1, freq = o.features;
    for (size_t i = 0; i < o.time_strides.size(); ++i) {
      convs_.push_back(register_module(absl::StrCat("conv", i + 1),
                                       torch::nn::Conv2d(torch::nn::Conv2dOptions(in, o.channels, 3)
                                                             .stride({o.time_strides[i], 2})
                                                             .padding(1)
                                                             .bias(!o.batch_norm))));
      if (o.batch_norm) {
        norms_.push_back(
            register_module(absl::StrCat("norm", i + 1), torch::nn::BatchNorm2d(o.channels)));
      }
      in = o.channels;
      freq = (freq - 1) / 2 + 1;
    }
    int64_t width = in * freq;
    for (int64_t i = 0; i < o.layers; ++i) {
      forward_.push_back(register_module(
          absl::StrCat("lstm", i + 1, "_forward"),
          torch::nn::LSTM(torch::nn::LSTMOptions(width, o.hidden).batch_first(true))));
      backward_.push_back(register_module(
          absl::StrCat("lstm", i + 1, "_backward"),
          torch::nn::LSTM(torch::nn::LSTMOptions(width, o.hidden).batch_first(true))));
      width = 2 * o.hidden;
    }
    head_ = register_module("head", torch::nn::Linear(2 * o.hidden, o.num_classes));
  }

  // The tokenizer's ids and CTC's blank (0) are the classes it emits per frame.
  TokenIds token_ids() const override { return {o_.num_classes, "num_classes"}; }

  std::pair<torch::Tensor, torch::Tensor> forward_padded(torch::Tensor x,
                                                         torch::Tensor lengths) override {
    TORCH_CHECK(x.dim() == 3 && x.size(2) == o_.features, "conv_bilstm expects features [batch, ",
                "frames, ", o_.features, "], got ", x.sizes());
    lengths = lengths.to(torch::kCPU, torch::kInt64);
    x = x.unsqueeze(1);
    for (size_t i = 0; i < convs_.size(); ++i) {
      x = convs_[i]->forward(x);
      if (!norms_.empty()) x = norms_[i]->forward(x);
      x = torch::relu(x);
      lengths = (torch::div(lengths - 1, o_.time_strides[i], "floor") + 1).clamp_min(1);
      // Padding frames back to zero, as the next convolution's border sees them alone.
      torch::Tensor real =
          torch::arange(x.size(2), torch::kInt64).unsqueeze(0) < lengths.unsqueeze(1);
      x = x * real.to(x.device(), x.scalar_type()).unsqueeze(1).unsqueeze(3);
    }
    const int64_t frames = x.size(2);
    x = x.transpose(1, 2).flatten(2);  // [B, frames, channels * freq]
    torch::Tensor reverse =
        ReverseWithinLength(lengths, frames, x.device()).unsqueeze(2);  // [B, frames, 1]
    for (size_t i = 0; i < forward_.size(); ++i) {
      if (i > 0 && o_.dropout > 0) x = torch::dropout(x, o_.dropout, is_training());
      torch::Tensor ahead = std::get<0>(LstmForward(forward_[i], x));
      torch::Tensor flipped = x.gather(1, reverse.expand({-1, -1, x.size(2)}));
      torch::Tensor back = std::get<0>(LstmForward(backward_[i], flipped));
      back = back.gather(1, reverse.expand({-1, -1, back.size(2)}));  // the reversal is its inverse
      x = torch::cat({ahead, back}, 2);
    }
    if (o_.dropout > 0) x = torch::dropout(x, o_.dropout, is_training());
    return {head_->forward(x), lengths};
  }

 private:
  ConvBiLstmOptions o_;
  std::vector<torch::nn::Conv2d> convs_;
  std::vector<torch::nn::BatchNorm2d> norms_;        // after each convolution, when batch_norm
  std::vector<torch::nn::LSTM> forward_, backward_;  // one layer each
  torch::nn::Linear head_{nullptr};
};

KILN_REGISTER_BOUND(
    Model, "conv_bilstm",
    "CTC acoustic model: convolutional front-end, bidirectional LSTM over the real frames, "
    "per-frame logits [B, frames', classes]",
    OptionBinding<ConvBiLstmOptions>()
        .Required("features", &ConvBiLstmOptions::features,
                  "feature size F of the input [B, frames, F]", AtLeast(1))
        .Field("channels", &ConvBiLstmOptions::channels, "channels of the front-end convolutions",
               AtLeast(1))
        .Field("time_strides", &ConvBiLstmOptions::time_strides,
               "one 3x3 convolution per entry, striding time by it (frequency by 2)",
               Each(AtLeast(1)))
        .Field("hidden", &ConvBiLstmOptions::hidden, "LSTM units per direction", AtLeast(1))
        .Field("layers", &ConvBiLstmOptions::layers, "LSTM layers", AtLeast(1))
        .Field("dropout", &ConvBiLstmOptions::dropout,
               "dropout between LSTM layers and before the output layer", InHalfOpenRange(0, 1))
        .Field("batch_norm", &ConvBiLstmOptions::batch_norm,
               "batch normalization after each convolution (DeepSpeech 2; shortens CTC's all-blank "
               "plateau)")
        .Required("num_classes", &ConvBiLstmOptions::num_classes,
                  "outputs per frame: the tokenizer's vocabulary (id 0, <pad>, is the CTC blank)",
                  AtLeast(2)),
    [](const ConvBiLstmOptions& o) -> absl::StatusOr<std::shared_ptr<Model>> {
      return std::make_shared<ConvBiLstm>(o);
    });

}  // namespace
}  // namespace kiln
