"""Python side of interop_test.cc: moves ResNet-18 weights between kiln and torchvision through
safetensors files (safetensors_io.py).

  torchvision_interop.py load DIR   kiln's DIR/weights.safetensors -> torchvision resnet18;
                                    writes its logits on DIR/input.safetensors to DIR/logits.safetensors
  torchvision_interop.py make DIR   a torchvision resnet18 of its own -> DIR/weights.safetensors and
                                    its logits on DIR/input.safetensors -> DIR/logits.safetensors
"""
import sys

import torch
import torchvision

from safetensors_io import read, write


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
