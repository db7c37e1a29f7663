#!/usr/bin/env python3
"""Checks a rankings cache (examples/rankings --out) against a float64 brute force.

usage: knn_oracle.py TABLE.npy RANKINGS.json [--metric cosine|ip] [--tol 1e-5]

For every row, the float64 similarities to all other rows (self excluded) are computed in
blocks with numpy; a row "misses a true neighbour" when one of its returned k neighbours is
less similar than the true k-th best by more than the tolerance (ties within it may go either
way). Prints rows checked, rows missing a neighbour and the worst similarity shortfall, and
exits 1 when any row misses one. The table is read as the device stores it when the .npy is
float16 (widened exactly); a float32 .npy is checked in float32 values widened to float64.
"""
import json
import sys

import numpy as np


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    metric, tol = "cosine", 1e-5
    if "--metric" in args:
        metric = args[args.index("--metric") + 1]
    if "--tol" in args:
        tol = float(args[args.index("--tol") + 1])
    table = np.load(args[0]).astype(np.float64)
    doc = json.load(open(args[1]))
    rankings = doc["rankings"]
    n = table.shape[0]
    if metric == "cosine":
        norms = np.linalg.norm(table, axis=1)
        norms[norms == 0] = 1.0
        table = table / norms[:, None]
    keys = sorted(rankings, key=lambda s: int(s.split("-")[-1]) if not s.isdigit() else int(s))
    rows = {int(k.split("-")[-1]) if not k.isdigit() else int(k): v for k, v in rankings.items()}
    bad, worst, checked = 0, 0.0, 0
    block = 1024
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        sims = table[b0:b1] @ table.T
        for i in range(b0, b1):
            got = rows.get(i)
            if got is None:
                continue
            s = sims[i - b0].copy()
            s[i] = -np.inf
            k = len(got)
            if k == 0:
                continue
            kth = np.partition(s, n - k)[n - k]
            ids = np.array([int(str(g).split("-")[-1]) for g in got])
            short = kth - s[ids]
            checked += 1
            if (short > tol).any() or len(set(ids.tolist())) != k or i in ids:
                bad += 1
            worst = max(worst, float(short.max()))
    print(f"{args[1]}: {checked} rows × top {k} checked, {bad} miss a true neighbour, "
          f"worst shortfall {worst:.3g} (tolerance {tol:g})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
