#!/usr/bin/env python3
"""Regenerate the bundled test/demo data in data/ from ../shared/data/fortunes-minilm.

Writes (see data/README.md):
  data/fortunes-2k.npy                 first 2,048 rows as float16 .npy, shape (2048, 384)
  data/fortunes-2k.texts.jsonl         their texts (first 2,048 lines of texts.jsonl, unchanged)
  data/fortunes-300.embeddings.json    first 300 rows in the embeddings.json shape, float32 values
                                       printed so that they parse back to the same float32

The source directory is the project's shared folder, which users of the crate do not have; the
outputs are committed. Plain Python 3 (no NumPy), so it runs anywhere:

    python3 tools/make_bundled_data.py [--source DIR] [--out DIR]
"""

import argparse
import json
import math
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SOURCE = os.path.join(ROOT, "..", "shared", "data", "fortunes-minilm")
NPY_ROWS = 2048
JSON_ROWS = 300


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def shortest_f32(x):
    """Shortest decimal string that parses back to the float32 `x`.

    A JSON reader parses to float64 and then rounds to float32 (serde_json does), so the check
    is that double rounding: decimal -> nearest float64 -> nearest float32 must give `x` again.
    """
    want = f32_bits(x)
    for digits in range(1, 18):
        s = "%.*g" % (digits, x)
        if f32_bits(float(s)) == want:
            return s
    raise ValueError("no round-tripping representation for %r" % x)


def write_npy(path, descr, rows, cols, body):
    """NumPy .npy version 1.0, header padded so data starts on a 64-byte boundary (as NumPy)."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (descr, rows, cols)
    unpadded = 6 + 2 + 2 + len(header) + 1
    header += " " * ((64 - unpadded % 64) % 64) + "\n"
    with open(path + ".tmp", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00")
        f.write(struct.pack("<H", len(header)))
        f.write(header.encode("latin1"))
        f.write(body)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default=DEFAULT_SOURCE, help="fortunes-minilm directory")
    ap.add_argument("--out", default=os.path.join(ROOT, "data"), help="output directory")
    args = ap.parse_args()

    with open(os.path.join(args.source, "meta.json")) as f:
        meta = json.load(f)
    dim = meta["dim"]
    if meta.get("dtype") != "float32" or meta["count"] < NPY_ROWS:
        sys.exit("unexpected meta.json: %r" % meta)

    with open(os.path.join(args.source, "embeddings.f32"), "rb") as f:
        raw = f.read(NPY_ROWS * dim * 4)
    if len(raw) != NPY_ROWS * dim * 4:
        sys.exit("embeddings.f32 is shorter than %d rows" % NPY_ROWS)
    values = struct.unpack("<%df" % (NPY_ROWS * dim), raw)
    if not all(math.isfinite(v) for v in values):
        sys.exit("embeddings.f32 has non-finite values")
    os.makedirs(args.out, exist_ok=True)

    # float16, round-to-nearest-even (struct's 'e' rounds like the half crate and the GPU).
    write_npy(
        os.path.join(args.out, "fortunes-2k.npy"),
        "<f2",
        NPY_ROWS,
        dim,
        struct.pack("<%de" % len(values), *values),
    )

    # Texts: the first NPY_ROWS lines, byte for byte.
    lines = []
    with open(os.path.join(args.source, "texts.jsonl"), "rb") as f:
        for i, line in enumerate(f):
            if i == NPY_ROWS:
                break
            if json.loads(line)["index"] != i:
                sys.exit("texts.jsonl line %d has index %r" % (i, json.loads(line)["index"]))
            lines.append(line)
    with open(os.path.join(args.out, "fortunes-2k.texts.jsonl"), "wb") as f:
        f.writelines(lines)

    # embeddings.json: one entry per line so that a diff stays readable.
    metadata = {
        "model": meta["model"],
        "source": "fortunes-minilm",
        "count": JSON_ROWS,
        "dim": dim,
    }
    out = ['{"metadata": %s,\n "embeddings": [\n' % json.dumps(metadata)]
    for i in range(JSON_ROWS):
        row = values[i * dim : (i + 1) * dim]
        out.append(
            '  {"poem_index": %d, "id": "fortune-%d", "embedding": [%s]}%s\n'
            % (i, i, ", ".join(shortest_f32(v) for v in row), "," if i + 1 < JSON_ROWS else "")
        )
    out.append(" ]}\n")
    path = os.path.join(args.out, "fortunes-300.embeddings.json")
    with open(path + ".tmp", "w") as f:
        f.write("".join(out))
    os.replace(path + ".tmp", path)

    # Check: the JSON parses back to exactly the float32 source values.
    with open(path) as f:
        back = json.load(f)
    for i, e in enumerate(back["embeddings"]):
        for a, b in zip(e["embedding"], values[i * dim : (i + 1) * dim]):
            if f32_bits(a) != f32_bits(b):
                sys.exit("row %d does not round-trip: %r vs %r" % (i, a, b))
    print("wrote %s (%d x %d fp16), texts, and %s (%d rows)" % ("fortunes-2k.npy", NPY_ROWS, dim, path, JSON_ROWS))


if __name__ == "__main__":
    main()
