"""Python side of interop_test.cc: moves ResNet-18 weights between kiln and torchvision through
safetensors files, written and read here with json + struct (Python's safetensors package is not in
Debian).

  torchvision_interop.py load DIR   kiln's DIR/weights.safetensors -> torchvision resnet18;
                                    writes its logits on DIR/input.safetensors to DIR/logits.safetensors
  torchvision_interop.py make DIR   a torchvision resnet18 of its own -> DIR/weights.safetensors and
                                    its logits on DIR/input.safetensors -> DIR/logits.safetensors
"""
import json
import struct
import sys

import torch
import torchvision

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write(path, tensors):
    names = {v: k for k, v in DTYPES.items()}
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def main():
    mode, d = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    model = torchvision.models.resnet18(num_classes=10)
    if mode == "load":
        model.load_state_dict(read(f"{d}/weights.safetensors"), strict=True)
    else:
        torch.manual_seed(1)
        model = torchvision.models.resnet18(num_classes=10)
        model.train()
        with torch.no_grad():  # move the BatchNorm running statistics away from their defaults
            for _ in range(3):
                model(torch.randn(4, 3, 64, 64))
        write(f"{d}/weights.safetensors", model.state_dict())
    model.eval()
    with torch.no_grad():
        logits = model(read(f"{d}/input.safetensors")["input"])
    write(f"{d}/logits.safetensors", {"logits": logits})


if __name__ == "__main__":
    main()
