"""Python side of torchscript_test.cc: runs kiln's TorchScript export as a user would, without kiln.

  torchscript_interop.py DIR [onnx]
    torch.jit.load(DIR/model.pt) on every tensor of DIR/inputs.safetensors (input_1, input_2, ...)
    -> DIR/outputs.safetensors (output_1, output_2, ...). With `onnx`: torch.onnx.export of the
    loaded module to DIR/model.onnx with a dynamic batch axis, checked with onnx.checker when
    python3-onnx is installed; prints "onnx: checked" or "onnx: not checked (no python3-onnx)".
"""
import sys

import torch

from safetensors_io import read, write


def main():
    d = sys.argv[1]
    torch.set_num_threads(1)
    model = torch.jit.load(f"{d}/model.pt")
    model.eval()
    inputs = read(f"{d}/inputs.safetensors")
    outputs = {}
    with torch.no_grad():
        for name, x in sorted(inputs.items()):
            outputs[name.replace("input", "output")] = model(x)
    write(f"{d}/outputs.safetensors", outputs)
    if len(sys.argv) > 2 and sys.argv[2] == "onnx":
        example = inputs["input_1"]
        torch.onnx.export(model, (example,), f"{d}/model.onnx", input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=14)
        try:
            import onnx
        except ImportError:
            print("onnx: not checked (no python3-onnx)")
            return
        onnx.checker.check_model(onnx.load(f"{d}/model.onnx"), full_check=True)
        print("onnx: checked")


if __name__ == "__main__":
    main()
