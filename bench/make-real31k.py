#!/usr/bin/env python3
"""A 31,102 × 384 table of real embeddings for the gram engine at scale: the 14,943 fortunes
(all-MiniLM-L6-v2, unit rows) followed by a perturbed copy of every row and a second perturbed
copy of the first 1,216, each perturbation Gaussian with 5% of the row's length (seed 0), the
whole rounded to fp16 and saved as a '<f2' .npy.

usage: make-real31k.py FORTUNES.npy|FORTUNES.f32 OUT.npy
"""
import sys

import numpy as np


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    if src.endswith(".npy"):
        f = np.load(src).astype(np.float64)
    else:
        f = np.fromfile(src, dtype="<f4").reshape(-1, 384).astype(np.float64)
    n, d = f.shape
    rng = np.random.default_rng(0)
    parts = [f]
    for rows in (n, 31102 - 2 * n):
        base = f[:rows]
        noise = rng.standard_normal(base.shape)
        noise *= 0.05 * np.linalg.norm(base, axis=1, keepdims=True) / np.linalg.norm(
            noise, axis=1, keepdims=True
        )
        parts.append(base + noise)
    t = np.concatenate(parts).astype(np.float16)
    assert t.shape == (31102, d) and np.isfinite(t).all()
    np.save(out, t)
    print(f"{out}: {t.shape[0]} x {t.shape[1]} fp16")


if __name__ == "__main__":
    main()
