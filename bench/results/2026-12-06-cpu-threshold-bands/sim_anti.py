#!/usr/bin/env python3
"""Extra (not in brief): probe set = Pk(t-1) U AN_L(p), where p is the item picked at
step t-1 and AN_L(p) is a STATIC precomputed list of the L items with smallest
e_p . x/|x| (excluding p), filtered to unchosen items at use time.
Motivation: K_t(x) = K_{t-1}(x) + e_p . x/|x|, so the new minimum is likely either
near the old top of the ranking or strongly anti-aligned with p."""
import sys, time, argparse
import numpy as np
import sim

COMBOS = [(0, 8), (0, 32), (4, 4), (8, 8), (16, 16), (8, 32), (32, 32)]  # (k, L)

def run(E, starts, steps):
    N, D = E.shape; B = len(starts)
    norms = np.linalg.norm(E, axis=1); EnT = np.ascontiguousarray((E / norms[:, None]).T)
    chosen = np.zeros((B, N), bool); rows = np.arange(B); chosen[rows, starts] = True
    C = E[starts].copy()
    names = [f'P{k}(t-1)+AN{L}(pick)' for k, L in COMBOS]
    res = {n: np.full((steps + 1, B), np.nan) for n in names}
    rank_prev = None; an_prev = None
    for t in range(1, steps + 1):
        K = C @ EnT; K[chosen] = np.inf
        pick = np.argmin(K, axis=1)
        if rank_prev is not None:
            for b in range(B):
                r = rank_prev[b]; r = r[~chosen[b, r]]
                for (k, L), n in zip(COMBOS, names):
                    P = np.concatenate([r[:k], an_prev[b][:L][~chosen[b, an_prev[b][:L]]]])
                    T = K[b, P].min() if P.size else np.inf
                    res[n][t, b] = np.count_nonzero(K[b] <= T)
        rank_prev = sim.ranked(K, sim.KEEP)
        # static anti-neighbour list of the pick (over ALL items except the pick itself)
        d = E[pick] @ EnT; d[rows, pick] = np.inf
        an_prev = sim.ranked(d, 32)
        chosen[rows, pick] = True; C += E[pick]
    return res

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--table', required=True, choices=['fort_c', 'fort_raw', 'synth'])
    ap.add_argument('--starts', type=int, default=64); ap.add_argument('--steps', type=int, default=500)
    a = ap.parse_args()
    E = {'fort_c': lambda: sim.load_fortunes(True), 'fort_raw': lambda: sim.load_fortunes(False),
         'synth': sim.load_synth}[a.table]()
    N = E.shape[0]; starts = np.array([i * N // a.starts for i in range(a.starts)])
    t0 = time.time(); res = run(E, starts, a.steps)
    title = f'{a.table} N={N} starts={a.starts} steps={a.steps} [anti-neighbour probes]'
    print(f'# {title} (run {time.time()-t0:.1f}s)')
    for lo, hi in ((2, a.steps), (2, 10), (11, 50), (51, a.steps)):
        sim.report(title, res, lo, hi)

if __name__ == '__main__':
    main()
