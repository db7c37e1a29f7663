#!/usr/bin/env python3
"""The float64 ε-argmax oracle on the GPU (or the CPU): every step of every sequence of a
`sequences` output JSON, batched over sequences with torch (numpy if torch is missing).

usage: seq_oracle.py TABLE.npy SEQS.json [--center] [--precision fp32|fp16] [--eps 1e-5]
       [--device cuda|cpu] [--batch B] [--bound D]

Along each sequence's own prefix: c = Σ e (float64), d(x) = 1 − c·e_x / (|c| |e_x|) over the
unchosen x (d = 1 for a zero c or row), and the pick's excess = max d − d(pick). The table is
centred in float64 (--center) and rounded to fp16 (--precision fp16) as the engine stores it.
Prints the worst excess, at which sequence and step, the violations of ε, and the number of
steps checked; exits 1 on any violation.

--bound D (the gram engine's default arithmetic, D the table's dimension): also the rigorous
bound on each step's excess from the keys' error — a key after t steps sums t entries of G, each
within (2.01u + (Du)²)·|G[p][x]| of exact (compensated G), with a compensated sum adding
(tu)²·Σ|G[p][x]| (u = 2⁻²⁴), so a wrong pick is at most (B(pick) + B(best)) / |c| off — and
checks that every measured excess stays under it (exit 1 if not: the bound would be wrong). A zero excess everywhere is reported as such (the
checked count says the check ran).
"""
import json
import sys

import numpy as np


def main():
    a = sys.argv[1:]
    if len(a) < 2:
        sys.exit(__doc__)
    opt = lambda k, d: a[a.index(k) + 1] if k in a else d
    center, prec = "--center" in a, opt("--precision", "fp32")
    eps, batch = float(opt("--eps", "1e-5")), int(opt("--batch", "64"))
    bound_d = int(opt("--bound", "0"))
    u = 2.0 ** -24
    e = np.load(a[0]).astype(np.float64)
    if center:
        e = e - e.mean(axis=0)
    e = e.astype(np.float32).astype(np.float16 if prec == "fp16" else np.float32).astype(np.float64)
    seqs = json.load(open(a[1]))["sequences"]
    starts = sorted(seqs, key=lambda s: int(s) if s.isdigit() else s)
    rows = [[int(x) for x in seqs[s]] for s in starts]
    try:
        import torch
        dev = opt("--device", "cuda" if torch.cuda.is_available() else "cpu")
        E = torch.tensor(e, dtype=torch.float64, device=dev)
        lib = "torch"
    except ImportError:
        torch, E, lib, dev = None, e, "numpy", "cpu"
    n = e.shape[0]
    norms = (E * E).sum(1).sqrt() if torch else np.sqrt((e * e).sum(1))
    worst, where, bad, checked = 0.0, None, 0, 0
    worst_bound, bound_bad = 0.0, 0
    for b0 in range(0, len(rows), batch):
        grp = rows[b0:b0 + batch]
        L = min(len(r) for r in grp)
        idx = np.array([r[:L] for r in grp])
        B = len(grp)
        if torch:
            I = torch.tensor(idx, device=dev)
            c = E[I[:, 0]].clone()
            chosen = torch.zeros(B, n, dtype=torch.bool, device=dev)
            chosen[torch.arange(B, device=dev), I[:, 0]] = True
            S = (E[I[:, 0]] @ E.T).abs() / torch.where(norms > 0, norms, 1)[None, :]
        else:
            c = e[idx[:, 0]].copy()
            chosen = np.zeros((B, n), dtype=bool)
            chosen[np.arange(B), idx[:, 0]] = True
            S = np.abs(e[idx[:, 0]] @ e.T) / np.where(norms > 0, norms, 1)[None, :]
        for t in range(1, L):
            dots = c @ E.T
            cn = (c * c).sum(1).sqrt() if torch else np.sqrt((c * c).sum(1))
            den = cn[:, None] * norms[None, :]
            if torch:
                d = torch.where(den > 0, 1 - dots / torch.where(den > 0, den, 1), 1.0)
                d = d.masked_fill(chosen, -1.0)
                best = d.max(1).values
                p = I[:, t]
                got = d[torch.arange(B, device=dev), p]
                ex = (best - got).cpu().numpy()
                if bound_d:
                    # Key error bounds of the pick and of the best (t rows of G summed so far).
                    g = (2.01 * u + (bound_d * u) ** 2 + (t * u) ** 2) * S
                    arg = d.argmax(1)
                    ar = torch.arange(B, device=dev)
                    beta = ((g[ar, p] + g[ar, arg]) / cn.clamp_min(1e-300)).cpu().numpy()
                    worst_bound = max(worst_bound, float(beta.max()))
                    bound_bad += int((ex > beta + 1e-12).sum())
                chosen[torch.arange(B, device=dev), p] = True
                c += E[p]
                if bound_d:
                    S += (E[p] @ E.T).abs() / torch.where(norms > 0, norms, 1)[None, :]
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    d = np.where(den > 0, 1 - dots / np.where(den > 0, den, 1), 1.0)
                d[chosen] = -1.0
                best = d.max(1)
                p = idx[:, t]
                ex = best - d[np.arange(B), p]
                if bound_d:
                    g = (2.01 * u + (bound_d * u) ** 2 + (t * u) ** 2) * S
                    arg = d.argmax(1)
                    ar = np.arange(B)
                    beta = (g[ar, p] + g[ar, arg]) / np.maximum(cn, 1e-300)
                    worst_bound = max(worst_bound, float(beta.max()))
                    bound_bad += int((ex > beta + 1e-12).sum())
                chosen[np.arange(B), p] = True
                c += e[p]
                if bound_d:
                    S += np.abs(e[p] @ e.T) / np.where(norms > 0, norms, 1)[None, :]
            checked += B
            if np.isnan(ex).any():
                sys.exit(f"NaN excess at step {t}")
            bad += int((ex > eps).sum())
            m = int(ex.argmax())
            if ex[m] > worst:
                worst, where = float(ex[m]), (starts[b0 + m], t)
    print(f"{a[1]}: {len(rows)} sequences, {checked} steps checked ({lib} on {dev}), worst excess "
          f"{worst:.3g}" + (f" (start {where[0]}, step {where[1]})" if where else "")
          + f", {bad} above eps {eps:g}"
          + (f"; rigorous bound of the default gram arithmetic: largest {worst_bound:.3g}, "
             f"{bound_bad} steps over it" if bound_d else ""))
    sys.exit(1 if bad or bound_bad else 0)


if __name__ == "__main__":
    main()
