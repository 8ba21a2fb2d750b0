// A fastText-style classifier (Joulin et al. 2017): the mean of the token embeddings (and, with
// ngram_buckets > 0, of hashed bigram embeddings), an optional hidden layer, a linear head.
// Input [B, T] token ids (0 = padding), output [B, classes].
#include "components/models/model.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

struct BagOptions {
  int64_t vocab_size = 0, dim = 64, hidden = 0, ngram_buckets = 0, num_classes = 2;
  double dropout = 0.0;
};

class BagOfEmbeddings : public Model {
 public:
  explicit BagOfEmbeddings(const BagOptions& o) : o_(o) {
    embedding = register_module(
        "embedding", torch::nn::EmbeddingBag(
                         torch::nn::EmbeddingBagOptions(o.vocab_size, o.dim).mode(torch::kSum)));
    if (o.ngram_buckets > 0) {
      ngrams = register_module(
          "ngrams", torch::nn::EmbeddingBag(
                        torch::nn::EmbeddingBagOptions(o.ngram_buckets, o.dim).mode(torch::kSum)));
    }
    int64_t width = o.dim;
    if (o.hidden > 0) {
      hidden = register_module("hidden", torch::nn::Linear(o.dim, o.hidden));
      width = o.hidden;
    }
    head = register_module("head", torch::nn::Linear(width, o.num_classes));
    torch::NoGradGuard no_grad;
    embedding->weight.uniform_(-1.0 / static_cast<double>(o.dim), 1.0 / static_cast<double>(o.dim));
    if (ngrams)
      ngrams->weight.uniform_(-1.0 / static_cast<double>(o.dim), 1.0 / static_cast<double>(o.dim));
  }

  TokenIds token_ids() const override { return {o_.vocab_size, "vocab_size"}; }

  torch::Tensor forward(torch::Tensor input) override {
    torch::Tensor mask = input.ne(0);
    // Padding (id 0) weighs nothing in the sum; dividing by the count gives the mean. The weights
    // are in the table's dtype (bf16 with bf16-true), the counts in float32 (exact past 256).
    torch::Tensor weights = mask.to(embedding->weight.scalar_type());
    torch::Tensor x = embedding->forward(input, {}, weights);
    torch::Tensor count = mask.sum(1, /*keepdim=*/true, torch::kFloat32);
    if (ngrams && input.size(1) > 1) {
      torch::Tensor a = input.narrow(1, 0, input.size(1) - 1),
                    b = input.narrow(1, 1, input.size(1) - 1);
      torch::Tensor ids = (a * 1000003 + b).remainder(o_.ngram_buckets);
      torch::Tensor pair_mask = mask.narrow(1, 1, input.size(1) - 1);
      x = x + ngrams->forward(ids, {}, pair_mask.to(ngrams->weight.scalar_type()));
      count = count + pair_mask.sum(1, true, torch::kFloat32);
    }
    x = (x / count.clamp_min(1.0)).to(x.scalar_type());
    if (hidden) x = torch::relu(hidden->forward(x));
    if (o_.dropout > 0) x = torch::dropout(x, o_.dropout, is_training());
    return head->forward(x);
  }

  torch::nn::EmbeddingBag embedding{nullptr}, ngrams{nullptr};
  torch::nn::Linear hidden{nullptr}, head{nullptr};

 private:
  BagOptions o_;
};

KILN_REGISTER_BOUND(Model, "bag_of_embeddings",
                    "fastText-style classifier: mean of token (and hashed bigram) embeddings, "
                    "optional hidden layer, linear head",
                    OptionBinding<BagOptions>()
                        .Required("vocab_size", &BagOptions::vocab_size,
                                  "token ids are below it (the tokenizer's vocab_size)", AtLeast(2))
                        .Required("num_classes", &BagOptions::num_classes, "number of classes",
                                  AtLeast(2))
                        .Field("dim", &BagOptions::dim, "embedding width", AtLeast(1))
                        .Field("hidden", &BagOptions::hidden,
                               "width of a ReLU hidden layer (0: none, as fastText)", AtLeast(0))
                        .Field("ngram_buckets", &BagOptions::ngram_buckets,
                               "hash buckets for bigram embeddings (0: unigrams only)", AtLeast(0))
                        .Field("dropout", &BagOptions::dropout, "dropout before the head"),
                    [](const BagOptions& o) -> absl::StatusOr<std::shared_ptr<Model>> {
                      return std::make_shared<BagOfEmbeddings>(o);
                    });

}  // namespace
}  // namespace kiln
