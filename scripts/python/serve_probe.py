"""Asks a running `kiln serve` for the first N Fashion-MNIST test images (PNG bodies, one request
each) and prints {"classes": [...], "probabilities": [[...], ...]} as JSON: scripts/gpu_check.sh
compares the answers of a server on the GPU with one on the CPU.
usage: serve_probe.py PORT N SERVER_PID [IDX_IMAGES_GZ]"""
import gzip
import io
import json
import os
import sys
import time
import urllib.request

import numpy as np
from PIL import Image


def main():
    port, n, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    path = sys.argv[4] if len(sys.argv) > 4 else "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
    raw = gzip.open(path).read()
    images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(-1, 28, 28)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:  # readyz answers 200 once the model is loaded and warm
        try:
            if urllib.request.urlopen(base + "/readyz", timeout=5).status == 200:
                break
        except Exception:
            pass
        try:  # gone, or a zombie its parent has not reaped yet
            alive = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            alive = False
        if not alive:
            sys.exit("serve_probe: the server stopped before it was ready")
        if time.time() > deadline:
            sys.exit("serve_probe: the server was not ready within 120 s")
        time.sleep(0.5)
    classes, probabilities = [], []
    for i in range(n):
        png = io.BytesIO()
        Image.fromarray(images[i]).save(png, format="PNG")
        request = urllib.request.Request(base + "/v1/predict", data=png.getvalue(), headers={"Content-Type": "image/png"})
        answer = json.load(urllib.request.urlopen(request, timeout=30))["predictions"][0]
        classes.append(answer["class_index"])
        probabilities.append(answer["probabilities"])
    print(json.dumps({"classes": classes, "probabilities": probabilities}))


if __name__ == "__main__":
    main()
