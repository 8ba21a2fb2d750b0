"""The simplest Python server a user would write for a model kiln trained, for bench/serve_speed.sh:
http.server's ThreadingHTTPServer and PyTorch (Debian's python3-torch), one forward pass per
request, the weights from `kiln export` (model.safetensors, read here with numpy: Debian has no
python3-safetensors). POST /v1/predict with a PNG (cnn) or a text (spam_bow) answers the class and
its probability as JSON, as `kiln serve` does.

    serve_reference.py cnn EXPORT_DIR PORT
    serve_reference.py spam_bow EXPORT_DIR PORT TRAIN_JSONL
"""
import io
import json
import os
import struct
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import torch
from PIL import Image
from torch import nn

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
    kind, export, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    weights = read_safetensors(export + "/model.safetensors")
    if kind == "cnn":
        model = Cnn()

        def preprocess(body):
            image = np.asarray(Image.open(io.BytesIO(body)).convert("L"), dtype=np.float32) / 255.0
            return ((torch.from_numpy(image) - 0.2860) / 0.3530)[None, None]
    else:
        model = BagOfEmbeddings(weights)
        vocab = whitespace_vocabulary(sys.argv[4])

        def preprocess(body):
            ids = [vocab.get(w, 1) for w in body.lower().split()][-2048:] or [1]
            return torch.tensor([ids])
    model.load_state_dict(weights, strict=False)
    model.eval()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Without these one-liners the simplest server is slower still: Nagle's algorithm holds
        # each answer ~40 ms, and a listen backlog of 5 refuses connections at concurrency 64.
        disable_nagle_algorithm = True

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with torch.no_grad():
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
