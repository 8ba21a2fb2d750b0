// LSTM text models: `lstm_classifier` (the mean of the top layer's states over the real tokens,
// or the last real state, then a linear head; [B, T] ids -> [B, classes]) and `lstm_lm` (a
// next-token layer on every state, optionally tied to the embedding; [B, T] -> [B, T, vocab]).
#include "absl/strings/str_cat.h"
#include "components/models/model.h"
#include "lib/core/status_macros.h"
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
    torch::Tensor states = std::get<0>(lstm->forward(x));
    if (o_.dropout > 0) states = torch::dropout(states, o_.dropout, is_training());
    return states;
  }

 public:
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

OptionSchema LstmSchema() {
  return OptionSchema()
      .Required("vocab_size", OptionType::kInt,
                "token ids are below it (the tokenizer's vocab_size)")
      .Int("dim", 128, "embedding width")
      .Int("hidden", 256, "LSTM state width")
      .Int("layers", 1, "stacked LSTM layers")
      .Float("dropout", 0.0, "dropout on embeddings, between layers and on the states");
}

absl::StatusOr<LstmOptions> ReadLstmOptions(const config::Config& cfg) {
  LstmOptions o;
  KILN_ASSIGN_OR_RETURN(o.vocab_size, cfg.Get<int64_t>("vocab_size"));
  KILN_ASSIGN_OR_RETURN(o.dim, cfg.Get<int64_t>("dim"));
  KILN_ASSIGN_OR_RETURN(o.hidden, cfg.Get<int64_t>("hidden"));
  KILN_ASSIGN_OR_RETURN(o.layers, cfg.Get<int64_t>("layers"));
  KILN_ASSIGN_OR_RETURN(o.dropout, cfg.Get<double>("dropout"));
  if (o.vocab_size < 2 || o.dim < 1 || o.hidden < 1 || o.layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", cfg.prefix(), "': vocab_size, dim, hidden and layers must be positive"));
  }
  return o;
}

KILN_REGISTER(
    Model, "lstm_classifier",
    "LSTM text classifier: mean (or last) state over the real tokens, linear head",
    LstmSchema()
        .Required("num_classes", OptionType::kInt, "number of classes")
        .String("pool", "mean",
                "mean (of the states at real tokens) or last (the last real token's state)"),
    [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_ASSIGN_OR_RETURN(LstmOptions o, ReadLstmOptions(cfg));
      KILN_ASSIGN_OR_RETURN(int64_t classes, cfg.Get<int64_t>("num_classes"));
      KILN_ASSIGN_OR_RETURN(std::string pool, cfg.Get<std::string>("pool"));
      if (pool != "mean" && pool != "last") {
        return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey("pool"),
                                                       "' must be mean or last, got '", pool, "'"));
      }
      if (classes < 2)
        return absl::InvalidArgumentError(
            absl::StrCat("option '", cfg.FullKey("num_classes"), "' must be at least 2"));
      return std::make_shared<LstmClassifier>(o, classes, pool == "last");
    });

KILN_REGISTER(Model, "lstm_lm",
              "LSTM language model: next-token logits at every position, optionally tied",
              LstmSchema().Bool("tie_weights", false,
                                "the output layer reuses the embedding (needs dim == hidden)"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Model>> {
                KILN_ASSIGN_OR_RETURN(LstmOptions o, ReadLstmOptions(cfg));
                KILN_ASSIGN_OR_RETURN(bool tie, cfg.Get<bool>("tie_weights"));
                if (tie && o.dim != o.hidden) {
                  return absl::InvalidArgumentError(
                      absl::StrCat("option '", cfg.FullKey("tie_weights"), "' needs dim (", o.dim,
                                   ") == hidden (", o.hidden, ")"));
                }
                return std::make_shared<LstmLm>(o, tie);
              });

}  // namespace
}  // namespace kiln
