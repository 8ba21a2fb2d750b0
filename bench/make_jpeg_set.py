"""Writes a folder of photo-like JPEGs for the JPEG decode benchmarks (bench/jpeg_torchvision.py
and kiln's image_folder / sharded data modules), in torchvision's ImageFolder layout:

    OUT_DIR/train/c00/000000.jpg ... OUT_DIR/train/c09/009999.jpg     (image n is in class n % classes)
    OUT_DIR/make_jpeg_set.json                                        (settings, sources and totals)

    .venv/bin/python bench/make_jpeg_set.py OUT_DIR [--count 10000] [--classes 10] [--seed 0]
        [--sources DIR] [--processes 2]

How the images are made. Decode speed depends on content (entropy-coded bits per pixel), so the
images are cut from real colour photographs rather than drawn as flat colours or noise. This
machine has almost no photos of its own, so the sources are the sample photos that two PyPI
packages ship inside their wheels: scikit-image 0.26.0 (skimage/data: astronaut, chelsea, coffee,
hubble_deep_field, ihc (a stained tissue micrograph), motorcycle_left/right (a stereo pair),
retina (a fundus photo), rocket) and scikit-learn 1.9.1 (sklearn/datasets/images: china,
flower): 11 colour photos, the synthetic and grey-level samples left out. Nothing is
installed: unless --sources names a folder that already holds them, the two pinned wheels are
fetched with
`python -m pip download --no-deps` into SOURCES/wheels (default SOURCES /tmp/kiln-jpeg-sources)
and only those image files are read out of them (their sha256 are checked and recorded).
The sources are 451x300 to 1411x1411 pixels; the two larger than 800 on a side are scaled
down to 800 once when loaded.

Each output image n, from its own generator seeded with (seed, n) (so the set does not depend on
--processes), takes one source at random and:
  - picks an output size W x H, W uniform in 360..440 and H in 270..330;
  - cuts a random crop of the output's aspect ratio (jittered by up to 10%) covering 35-100% of
    the largest such crop, rotated by an angle uniform in -8..8 degrees (the crop is taken from
    the rotated source, inside the rotated frame, so there are no blank corners);
  - resizes it to W x H (bicubic): mostly a downscale, but small crops of the smaller sources
    are upscaled, up to about 2x for chelsea (451x300), which softens them somewhat;
  - flips it left-right with probability 0.5;
  - shifts its colour: brightness, contrast and saturation each times 0.75..1.25, and each RGB
    channel times 0.92..1.08 (a white-balance shift);
  - encodes it with Pillow at quality 90, 4:2:0 chroma subsampling (Pillow's default at that
    quality), baseline (not progressive, not optimized), no EXIF.
Deterministic given --seed, the count and the sources, with the same Pillow (its resampling
and its libjpeg-turbo encoder decide the bytes); `make_jpeg_set.json` records the Pillow version
and the total size. 10,000 images take about a minute or two on 2 cores (2 processes).
"""
import argparse
import hashlib
import json
import math
import multiprocessing
import os
import random
import subprocess
import sys
import time
import zipfile

from PIL import Image, ImageEnhance, __version__ as PIL_VERSION

# (wheel requirement, path inside the wheel)
SOURCES = [
    ("scikit-image==0.26.0", "skimage/data/astronaut.png"),
    ("scikit-image==0.26.0", "skimage/data/chelsea.png"),
    ("scikit-image==0.26.0", "skimage/data/coffee.png"),
    ("scikit-image==0.26.0", "skimage/data/hubble_deep_field.jpg"),
    ("scikit-image==0.26.0", "skimage/data/ihc.png"),
    ("scikit-image==0.26.0", "skimage/data/motorcycle_left.png"),
    ("scikit-image==0.26.0", "skimage/data/motorcycle_right.png"),
    ("scikit-image==0.26.0", "skimage/data/retina.jpg"),
    ("scikit-image==0.26.0", "skimage/data/rocket.jpg"),
    ("scikit-learn==1.9.1", "sklearn/datasets/images/china.jpg"),
    ("scikit-learn==1.9.1", "sklearn/datasets/images/flower.jpg"),
]
# sha256 of each source photo as read out of its wheel; a photo that differs stops the script
SHA256 = {
    "skimage/data/astronaut.png": "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5",
    "skimage/data/chelsea.png": "596aa1e7cb875eb79f437e310381d26b338a81c2da23439704a73c4651e8c4bb",
    "skimage/data/coffee.png": "cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7",
    "skimage/data/hubble_deep_field.jpg": "3a19c5dd8a927a9334bb1229a6d63711b1c0c767fb27e2286e7c84a3e2c2f5f4",
    "skimage/data/ihc.png": "f8dd1aa387ddd1f49d8ad13b50921b237df8e9b262606d258770687b0ef93cef",
    "skimage/data/motorcycle_left.png": "db18e9c4157617403c3537a6ba355dfeafe9a7eabb6b9b94cb33f6525dd49179",
    "skimage/data/motorcycle_right.png": "5fc913ae870e42a4b662314bc904d1786bcad8e2f0b9b67dba5a229406357797",
    "skimage/data/retina.jpg": "38a07f36f27f095e818aea7b96d34202c05176d30253c66733f2e00379e9e0e6",
    "skimage/data/rocket.jpg": "c2dd0de7c538df8d111e479619b129464d0269d0ae5fd18ca91d33a7fdfea95c",
    "sklearn/datasets/images/china.jpg": "8378025ad2519d649d02e32bd98990db4ab572357d9f09841c2fbfbb4fefad29",
    "sklearn/datasets/images/flower.jpg": "a77f6ec41e353afdf8bdff2ea981b2955535d8d83294f8cfa49cf4e423dd5638",
}
DEFAULT_SOURCES = "/tmp/kiln-jpeg-sources"
MAX_SIDE = 800  # larger sources are scaled down once when loaded (rotating them per image is slow)


def source_path(root, inner):
    return os.path.join(root, "photos", inner.replace("/", "__"))


def fetch_sources(root):
    """Makes sure every source photo is in ROOT/photos, downloading the pinned wheels if needed."""
    missing = [(req, inner) for req, inner in SOURCES if not os.path.isfile(source_path(root, inner))]
    if not missing:
        return
    wheels = os.path.join(root, "wheels")
    os.makedirs(wheels, exist_ok=True)
    os.makedirs(os.path.join(root, "photos"), exist_ok=True)
    for req in sorted({req for req, _ in missing}):
        name = req.split("==")[0].replace("-", "_")
        have = [w for w in os.listdir(wheels) if w.startswith(name + "-" + req.split("==")[1] + "-")]
        if not have:
            print(f"make_jpeg_set: downloading the {req} wheel (not installed, only its sample photos are read) into {wheels}",
                  file=sys.stderr)
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                            req, "-d", wheels], check=True)
            have = [w for w in os.listdir(wheels) if w.startswith(name + "-" + req.split("==")[1] + "-")]
        with zipfile.ZipFile(os.path.join(wheels, sorted(have)[0])) as whl:
            for r, inner in missing:
                if r == req:
                    with open(source_path(root, inner), "wb") as out:
                        out.write(whl.read(inner))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


_photos = None


def init_worker(root):
    global _photos
    _photos = []
    for _, inner in SOURCES:
        with Image.open(source_path(root, inner)) as im:
            im = im.convert("RGB")
            if max(im.size) > MAX_SIDE:  # retina (1411x1411) and hubble_deep_field (1000x872)
                f = MAX_SIDE / max(im.size)
                im = im.resize((round(im.width * f), round(im.height * f)), resample=Image.LANCZOS)
            _photos.append(im)


def largest_rotated_rect(w, h, angle):
    """Width and height of the largest-area axis-aligned rectangle inside a w x h rectangle
    rotated by ANGLE (radians), centred on it; crops are taken inside it, so none has blank corners."""
    if w <= 0 or h <= 0:
        return 0, 0
    long_side, short_side = (w, h) if w >= h else (h, w)
    s, c = abs(math.sin(angle)), abs(math.cos(angle))
    if short_side <= 2.0 * s * c * long_side or abs(s - c) < 1e-10:
        x = 0.5 * short_side
        wr, hr = (x / s, x / c) if w >= h else (x / c, x / s)
    else:
        cos_2a = c * c - s * s
        wr, hr = (w * c - h * s) / cos_2a, (h * c - w * s) / cos_2a
    return wr, hr


def make_one(args):
    seed, n, classes, out_dir = args
    rng = random.Random(f"kiln-jpeg:{seed}:{n}")
    idx = rng.randrange(len(_photos))
    src = _photos[idx]
    W, H = rng.randint(360, 440), rng.randint(270, 330)
    angle = rng.uniform(-8.0, 8.0)
    img = src.rotate(angle, resample=Image.BICUBIC, expand=True) if abs(angle) > 0.05 else src
    # the rotated source's valid region is the largest upright rectangle inside the rotated frame
    vw, vh = largest_rotated_rect(src.width, src.height, math.radians(angle))
    vw, vh = int(vw) - 2, int(vh) - 2
    vx, vy = (img.width - vw) / 2.0, (img.height - vh) / 2.0
    aspect = (W / H) * math.exp(rng.uniform(-0.1, 0.1))
    cw_max = min(vw, vh * aspect)
    scale = math.sqrt(rng.uniform(0.35, 1.0))  # area fraction 0.35..1 of the largest crop
    cw = cw_max * scale
    ch = cw / aspect
    x0 = vx + rng.uniform(0, vw - cw)
    y0 = vy + rng.uniform(0, vh - ch)
    img = img.resize((W, H), resample=Image.BICUBIC, box=(x0, y0, x0 + cw, y0 + ch))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    img = ImageEnhance.Brightness(img).enhance(rng.uniform(0.75, 1.25))
    img = ImageEnhance.Contrast(img).enhance(rng.uniform(0.75, 1.25))
    img = ImageEnhance.Color(img).enhance(rng.uniform(0.75, 1.25))
    gains = [rng.uniform(0.92, 1.08) for _ in range(3)]
    bands = [b.point([min(255, int(round(v * g))) for v in range(256)]) for b, g in zip(img.split(), gains)]
    img = Image.merge("RGB", bands)
    path = os.path.join(out_dir, f"c{n % classes:02d}", f"{n:06d}.jpg")
    img.save(path, format="JPEG", quality=90, subsampling="4:2:0")
    return idx, W, H, os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sources", default=DEFAULT_SOURCES,
                    help=f"folder for the source photos (photos/) and their wheels (wheels/); default {DEFAULT_SOURCES}")
    ap.add_argument("--processes", type=int, default=2)
    a = ap.parse_args()
    if a.classes < 1 or a.classes > 100 or a.count < 1:
        ap.error("--classes must be 1..100 and --count at least 1")

    fetch_sources(a.sources)
    sums = {inner: sha256(source_path(a.sources, inner)) for _, inner in SOURCES}
    bad = [inner for inner, s in sums.items() if SHA256.get(inner) != s]
    if bad:
        sys.exit(f"make_jpeg_set: source photos differ from the pinned ones: {bad}")

    train = os.path.join(a.out_dir, "train")
    for c in range(a.classes):
        os.makedirs(os.path.join(train, f"c{c:02d}"), exist_ok=True)
    t0 = time.perf_counter()
    jobs = [(a.seed, n, a.classes, train) for n in range(a.count)]
    if a.processes > 1:
        with multiprocessing.Pool(a.processes, initializer=init_worker, initargs=(a.sources,)) as pool:
            results = pool.map(make_one, jobs, chunksize=64)
    else:
        init_worker(a.sources)
        results = [make_one(j) for j in jobs]
    secs = time.perf_counter() - t0

    total = sum(r[3] for r in results)
    per_source = {}
    for idx, _, _, size in results:
        k = SOURCES[idx][1].rsplit("/", 1)[1]
        cnt, tot = per_source.get(k, (0, 0))
        per_source[k] = (cnt + 1, tot + size)
    summary = {
        "count": a.count, "classes": a.classes, "seed": a.seed, "pillow": PIL_VERSION,
        "quality": 90, "subsampling": "4:2:0",
        "mean_width": sum(r[1] for r in results) / a.count, "mean_height": sum(r[2] for r in results) / a.count,
        "total_bytes": total, "mean_bytes": total / a.count,
        "min_bytes": min(r[3] for r in results), "max_bytes": max(r[3] for r in results),
        "per_source": {k: {"images": c, "mean_bytes": round(t / c)} for k, (c, t) in sorted(per_source.items())},
        "sources": {f"{req}:{inner}": sums[inner] for req, inner in SOURCES},
    }
    with open(os.path.join(a.out_dir, "make_jpeg_set.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"make_jpeg_set images={a.count} classes={a.classes} seed={a.seed} seconds={secs:.1f} "
          f"mean_size={summary['mean_width']:.1f}x{summary['mean_height']:.1f} "
          f"mean_bytes={summary['mean_bytes']:.0f} total_mb={total / 1e6:.1f}")


if __name__ == "__main__":
    main()
