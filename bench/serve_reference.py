"""The simplest Python server a user would write for a model kiln trained, for bench/serve_speed.sh:
http.server's ThreadingHTTPServer and PyTorch (the .venv's torch), one forward pass per
request, the weights from `kiln export` (model.safetensors, read here with numpy: Debian has no
python3-safetensors). POST /v1/predict with a PNG (cnn) or a text (spam_bow, spam_transformer)
answers the class and its probability as JSON, as `kiln serve` does.

It does what PyTorch's inference and CPU performance guides tell a user to do: the forward pass
under torch.inference_mode(), the intra-op threads set with torch.set_num_threads (THREADS per
request thread; the caller also sets OMP_NUM_THREADS), the CNN in channels-last memory format as
kiln serves it (experiment=fashion_mnist sets trainer.channels_last), and the allocator tuned by
the caller (bench/serve_speed.sh runs it with GLIBC_TUNABLES matching kiln's mallopt settings).
No TorchScript: the model is the plain nn.Module.

    serve_reference.py cnn EXPORT_DIR PORT THREADS
    serve_reference.py spam_bow EXPORT_DIR PORT THREADS TRAIN_JSONL
    serve_reference.py spam_transformer EXPORT_DIR PORT THREADS SENTENCEPIECE_MODEL
      (needs python3-sentencepiece)
"""
import io
import json
import math
import os
import struct
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import torch
from PIL import Image
import yaml
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_reference import Cnn  # noqa: E402  kiln's `cnn` with PyTorch's names (dropout: eval)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": np.float32, "I64": np.int64, "F64": np.float64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtypes[info["dtype"]])
        out[name] = torch.from_numpy(array.reshape(info["shape"]).copy())
    return out


class BagOfEmbeddings(nn.Module):  # kiln's `bag_of_embeddings` without n-grams or hidden layer
    def __init__(self, weights):
        super().__init__()
        self.embedding = nn.EmbeddingBag(*weights["embedding.weight"].shape, mode="mean")
        self.head = nn.Linear(weights["head.weight"].shape[1], weights["head.weight"].shape[0])

    def forward(self, ids):
        return self.head(self.embedding(ids))


class Block(nn.Module):  # kiln's pre-LayerNorm block (text_transformer.cc) with its names
    def __init__(self, dim, heads, mlp_dim):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(dim, 3 * dim)
        self.attn.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(dim, mlp_dim)
        self.mlp.c_proj = nn.Linear(mlp_dim, dim)

    def forward(self, x, bias):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.attn.c_attn(self.ln_1(x)).view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(hd)) + bias, dim=-1)
        x = x + self.attn.c_proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class TransformerClassifier(nn.Module):  # kiln's `transformer_classifier`, pool: mean
    def __init__(self, weights, heads):
        super().__init__()
        vocab, dim = weights["transformer.wte.weight"].shape
        depth = len({k.split(".")[2] for k in weights if k.startswith("transformer.h.")})
        mlp_dim = weights["transformer.h.0.mlp.c_fc.weight"].shape[0]
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, dim)
        self.transformer.wpe = nn.Embedding(weights["transformer.wpe.weight"].shape[0], dim)
        self.transformer.h = nn.ModuleList([Block(dim, heads, mlp_dim) for _ in range(depth)])
        self.transformer.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, weights["head.weight"].shape[0])

    def forward(self, ids):
        t = ids.shape[1]
        x = self.transformer.wte(ids) + self.transformer.wpe(torch.arange(t))
        bias = torch.zeros(ids.shape).masked_fill(ids == 0, float("-inf"))[:, None, None, :]
        for block in self.transformer.h:
            x = block(x, bias)
        x = self.transformer.ln_f(x)
        mask = (ids != 0).unsqueeze(-1).to(x.dtype)
        return self.head((x * mask).sum(1) / mask.sum(1).clamp_min(1.0))


def whitespace_vocabulary(train_jsonl, vocab_size=30000, min_frequency=2):
    """kiln's `whitespace` tokenizer: ASCII-lowercased words, most frequent first, ties by bytes."""
    counts = Counter()
    with open(train_jsonl, "rb") as f:
        for line in f:
            counts.update(json.loads(line)["text"].encode().lower().split())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    vocab = {}
    for word, n in ranked:
        if len(vocab) + 5 >= vocab_size or n < min_frequency:
            break
        vocab[word] = len(vocab) + 5
    return vocab


def main():
    kind, export, port, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    weights = read_safetensors(export + "/model.safetensors")
    config = yaml.safe_load(open(export + "/config.yaml"))
    if kind == "cnn":
        model = Cnn()

        def preprocess(body):
            image = np.asarray(Image.open(io.BytesIO(body)).convert("L"), dtype=np.float32) / 255.0
            x = ((torch.from_numpy(image) - 0.2860) / 0.3530)[None, None]
            return x.contiguous(memory_format=torch.channels_last)
    elif kind == "spam_bow":
        model = BagOfEmbeddings(weights)
        vocab = whitespace_vocabulary(sys.argv[5])

        def preprocess(body):
            ids = [vocab.get(w, 1) for w in body.lower().split()][-2048:] or [1]
            return torch.tensor([ids])
    else:
        import sentencepiece

        model = TransformerClassifier(weights, config["model"]["heads"])
        pieces = sentencepiece.SentencePieceProcessor(model_file=sys.argv[5])
        length = config["data"]["max_length"]  # the last pieces (truncation_side: left)

        def preprocess(body):
            return torch.tensor([pieces.encode(body.decode("utf-8"))[-length:] or [1]])
    weights.pop("tokenizer_fingerprint", None)  # kiln's record of the tokenizer, not a weight
    model.load_state_dict(weights)
    model.eval()
    if kind == "cnn":
        model = model.to(memory_format=torch.channels_last)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Without these one-liners the simplest server is slower still: Nagle's algorithm holds
        # each answer ~40 ms, and a listen backlog of 5 refuses connections at concurrency 64.
        disable_nagle_algorithm = True

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with torch.inference_mode():
                p = torch.softmax(model(preprocess(body)), 1)[0]
            c = int(p.argmax())
            out = json.dumps({"predictions": [{"class_index": c, "probability": float(p[c]),
                                               "probabilities": p.tolist()}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
