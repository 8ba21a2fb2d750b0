"""Python side of torchscript_test.cc: runs kiln's TorchScript export as a user would, without kiln.

  torchscript_interop.py DIR [onnx]
    torch.jit.load(DIR/model.pt) on every tensor of DIR/inputs.safetensors (input_1, input_2, ...)
    -> DIR/outputs.safetensors (output_1, output_2, ...). With `onnx`: torch.onnx.export of the
    loaded module to DIR/model.onnx with a dynamic batch axis (the TorchScript exporter: torch 2.x's
    default, dynamo, takes Python modules, not a loaded ScriptModule), checked with onnx.checker when
    onnx is installed; prints "onnx: checked" or "onnx: not checked (no onnx)".
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
        # torch 2.11's TorchScript exporter loses the dtype of BatchNorm's output in a loaded module
        # at opsets 14 and later (relu after it then fails: "Cannot determine scalar type"); opset 9's
        # BatchNorm keeps it. Models without BatchNorm export at 14.
        for opset in (14, 9):
            try:
                torch.onnx.export(model, (example,), f"{d}/model.onnx", input_names=["input"],
                                  output_names=["output"], opset_version=opset, dynamo=False,
                                  dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
                break
            except torch.onnx.errors.SymbolicValueError:
                if opset == 9:
                    raise
        print(f"onnx: opset {opset}")
        try:
            import onnx
        except ImportError:
            print("onnx: not checked (no onnx)")
            return
        onnx.checker.check_model(onnx.load(f"{d}/model.onnx"), full_check=True)
        print("onnx: checked")


if __name__ == "__main__":
    main()
