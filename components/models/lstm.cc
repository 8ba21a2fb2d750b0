// LSTM text models: `lstm_classifier` (the mean of the top layer's states over the real tokens,
// or the last real state, then a linear head; [B, T] ids -> [B, classes]) and `lstm_lm` (a
// next-token layer on every state, optionally tied to the embedding; [B, T] -> [B, T, vocab]).
#include <torch/csrc/jit/frontend/tracer.h>

#include "absl/strings/str_cat.h"
#include "components/models/lstm_forward.h"
#include "components/models/model.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

struct LstmOptions {
  int64_t vocab_size = 0, dim = 128, hidden = 256, layers = 1;
  double dropout = 0.0;
};

class LstmBase : public Model {
 protected:
  explicit LstmBase(const LstmOptions& o) : o_(o) {
    embedding = register_module(
        "embedding",
        torch::nn::Embedding(torch::nn::EmbeddingOptions(o.vocab_size, o.dim).padding_idx(0)));
    lstm = register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(o.dim, o.hidden)
                                                       .num_layers(o.layers)
                                                       .batch_first(true)
                                                       .dropout(o.layers > 1 ? o.dropout : 0.0)));
  }
  // The top layer's states [B, T, hidden].
  torch::Tensor States(const torch::Tensor& input) {
    torch::Tensor x = embedding->forward(input);
    if (o_.dropout > 0) x = torch::dropout(x, o_.dropout, is_training());
    torch::Tensor states;
    if (torch::jit::tracer::isTracing() && x.size(1) > 0) {
      // LibTorch's LSTM makes its zero initial state with the batch size as a number, which a trace
      // (TorchScript export) would keep; this one takes the batch from x: [layers, B, hidden].
      torch::Tensor zero = torch::zeros_like(x.select(1, 0).narrow(1, 0, 1))
                               .unsqueeze(0)
                               .expand({o_.layers, -1, o_.hidden})
                               .contiguous();
      states = std::get<0>(LstmForward(lstm, x, LstmState(zero, zero)));
    } else {
      states = std::get<0>(LstmForward(lstm, x));
    }
    if (o_.dropout > 0) states = torch::dropout(states, o_.dropout, is_training());
    return states;
  }

 public:
  TokenIds token_ids() const override { return {o_.vocab_size, "vocab_size"}; }

  torch::nn::Embedding embedding{nullptr};
  torch::nn::LSTM lstm{nullptr};

 protected:
  LstmOptions o_;
};

class LstmClassifier : public LstmBase {
 public:
  LstmClassifier(const LstmOptions& o, int64_t num_classes, bool last) : LstmBase(o), last_(last) {
    head = register_module("head", torch::nn::Linear(o.hidden, num_classes));
  }
  torch::Tensor forward(torch::Tensor input) override {
    torch::Tensor states = States(input);
    torch::Tensor mask = input.ne(0);
    torch::Tensor pooled;
    if (last_) {
      torch::Tensor last = (mask.sum(1) - 1).clamp_min(0);  // right padding: the last real position
      pooled = states.gather(1, last.view({-1, 1, 1}).expand({-1, 1, states.size(2)})).squeeze(1);
    } else {
      torch::Tensor m = mask.unsqueeze(-1).to(states.dtype());
      pooled = (states * m).sum(1) / m.sum(1).clamp_min(1.0);
    }
    return head->forward(pooled);
  }
  torch::nn::Linear head{nullptr};

 private:
  bool last_;
};

class LstmLm : public LstmBase {
 public:
  LstmLm(const LstmOptions& o, bool tie) : LstmBase(o), tie_(tie) {
    if (!tie) head = register_module("head", torch::nn::Linear(o.hidden, o.vocab_size));
  }
  torch::Tensor forward(torch::Tensor input) override {
    torch::Tensor states = States(input);
    return tie_ ? torch::linear(states, embedding->weight) : head->forward(states);
  }
  torch::nn::Linear head{nullptr};

 private:
  bool tie_;
};

// Declares what both LSTM models take, on S deriving from LstmOptions.
template <typename S>
OptionBinding<S> LstmBinding() {
  using L = LstmOptions;
  return OptionBinding<S>()
      .Required("vocab_size", static_cast<int64_t S::*>(&L::vocab_size),
                "token ids are below it (the tokenizer's vocab_size)", AtLeast(2))
      .Field("dim", static_cast<int64_t S::*>(&L::dim), "embedding width", AtLeast(1))
      .Field("hidden", static_cast<int64_t S::*>(&L::hidden), "LSTM state width", AtLeast(1))
      .Field("layers", static_cast<int64_t S::*>(&L::layers), "stacked LSTM layers", AtLeast(1))
      .Field("dropout", static_cast<double S::*>(&L::dropout),
             "dropout on embeddings, between layers and on the states");
}

struct LstmClassifierOptions : LstmOptions {
  int64_t num_classes = 0;
  std::string pool = "mean";
};

struct LstmLmOptions : LstmOptions {
  bool tie_weights = false;
};

KILN_REGISTER_BOUND(
    Model, "lstm_classifier",
    "LSTM text classifier: mean (or last) state over the real tokens, linear head",
    LstmBinding<LstmClassifierOptions>()
        .Required("num_classes", &LstmClassifierOptions::num_classes, "number of classes",
                  AtLeast(2))
        .Field("pool", &LstmClassifierOptions::pool,
               "mean (of the states at real tokens) or last (the last real token's state)",
               OneOf({"mean", "last"})),
    [](const LstmClassifierOptions& o) -> absl::StatusOr<std::shared_ptr<Model>> {
      return std::make_shared<LstmClassifier>(o, o.num_classes, o.pool == "last");
    });

KILN_REGISTER_BOUND(Model, "lstm_lm",
                    "LSTM language model: next-token logits at every position, optionally tied",
                    LstmBinding<LstmLmOptions>().Field(
                        "tie_weights", &LstmLmOptions::tie_weights,
                        "the output layer reuses the embedding (needs dim == hidden)"),
                    [](const LstmLmOptions& o,
                       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
                      if (o.tie_weights && o.dim != o.hidden) {
                        return context.Refuse("tie_weights",
                                              absl::StrCat("false unless dim (", o.dim,
                                                           ") == hidden (", o.hidden, ")"));
                      }
                      return std::make_shared<LstmLm>(o, o.tie_weights);
                    });

}  // namespace
}  // namespace kiln
