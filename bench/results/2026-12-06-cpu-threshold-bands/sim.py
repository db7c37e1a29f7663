#!/usr/bin/env python3
"""Probe-threshold simulation for the diversity-sequence filter.

Diversity sequence: S={s}, c=e_s; each step pick unchosen x minimising
K(x) = c.e_x/|e_x| (float64, lowest index on exact ties), c += e_x.

Step numbering: step t (t>=1) is the t-th pick after the start; K_t uses
c_t = sum of the t items chosen before step t.  Probe sets for step t are
built from the ranking at step t-1 (or t-2); measured quantity
C_t = |{x unchosen at t : K_t(x) <= T_t}|, T_t = min_{x in P_t} K_t(x).
Measured for t >= 2 (t >= 3 for the t-2 probe sets).
"""
import sys, time, argparse
import numpy as np

KS = [1, 2, 4, 8, 16, 32]
KEEP = 40  # ranked candidates kept per step (need >= 32 + 2 removed picks)


def load_fortunes(center):
    E = np.fromfile('/work/shared/data/fortunes-minilm/embeddings.f32',
                    dtype=np.float32).reshape(-1, 384)
    E = E.astype(np.float64)
    if center:
        E = E - E.mean(axis=0, dtype=np.float64)
    return E


def load_synth():
    N, D = 8359, 768
    rng = np.random.default_rng(0)
    topics = rng.standard_normal((256, D))
    w = rng.standard_normal((N, 256)) ** 3
    E = w @ topics / 16 + 0.35 * rng.standard_normal((N, D)) + 0.8 * rng.standard_normal((1, D))
    return E.astype(np.float32).astype(np.float64)


def ranked(K, m):
    """Per row: indices of the m smallest keys, sorted by (key, index)."""
    B = K.shape[0]
    part = np.argpartition(K, m, axis=1)[:, :m]
    vals = np.take_along_axis(K, part, axis=1)
    out = np.empty_like(part)
    for b in range(B):
        o = np.lexsort((part[b], vals[b]))
        out[b] = part[b][o]
    return out


def run(E, starts, steps):
    """Returns dict name -> array (steps+1, B) of C_t (nan where undefined),
    plus 'band' reference counts."""
    N, D = E.shape
    B = len(starts)
    norms = np.linalg.norm(E, axis=1)
    En = E / norms[:, None]            # K = c . En_x
    EnT = np.ascontiguousarray(En.T)
    chosen = np.zeros((B, N), dtype=bool)
    rows = np.arange(B)
    chosen[rows, starts] = True
    C = E[starts].copy()
    names = [f'P{k}(t-1)' for k in KS] + [f'P{k}(t-2)' for k in KS] + ['band(1e-4 range)', 'band(1e-6 range)']
    res = {n: np.full((steps + 1, B), np.nan) for n in names}
    rank_prev = None   # ranking at step t-1 (indices, incl. the pick at rank 0)
    rank_prev2 = None  # ranking at step t-2
    pick_hist = []     # picks per step
    for t in range(1, steps + 1):
        K = C @ EnT                         # (B, N)
        K[chosen] = np.inf
        kmin = K.min(axis=1)
        pick = np.argmin(K, axis=1)         # lowest index on exact tie
        # reference band
        kmax = np.where(chosen, -np.inf, K).max(axis=1)
        for name, f in (('band(1e-4 range)', 1e-4), ('band(1e-6 range)', 1e-6)):
            g = f * (kmax - kmin)
            res[name][t] = (K <= (kmin + 2 * g)[:, None]).sum(axis=1)
        # probe sets
        for src, tag in ((rank_prev, 't-1'), (rank_prev2, 't-2')):
            if src is None:
                continue
            # remove items chosen since that ranking (they have K=inf now anyway)
            for b in range(B):
                r = src[b]
                r = r[~chosen[b, r]]
                for k in KS:
                    P = r[:k]
                    T = K[b, P].min()
                    res[f'P{k}({tag})'][t, b] = np.count_nonzero(K[b] <= T)
        rk = ranked(K, KEEP)
        assert np.all(rk[:, 0] == pick)
        rank_prev2, rank_prev = rank_prev, rk
        chosen[rows, pick] = True
        C += E[pick]
    return res


def stats(x):
    x = x[~np.isnan(x)]
    return dict(n=x.size, mean=x.mean(), med=np.median(x), p90=np.percentile(x, 90),
                p99=np.percentile(x, 99), max=x.max(),
                le8=np.mean(x <= 8), le32=np.mean(x <= 32))


def report(title, res, lo, hi):
    print(f'\n### {title}  (steps {lo}..{hi})')
    print(f'| probe set | n | mean | median | p90 | p99 | max | frac<=8 | frac<=32 |')
    print('|---|---|---|---|---|---|---|---|---|')
    for name, arr in res.items():
        s = stats(arr[lo:hi + 1].ravel())
        if s['n'] == 0:
            continue
        print(f"| {name} | {s['n']} | {s['mean']:.2f} | {s['med']:.1f} | {s['p90']:.1f} | "
              f"{s['p99']:.1f} | {s['max']:.0f} | {s['le8']:.4f} | {s['le32']:.4f} |")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--table', required=True, choices=['fort_c', 'fort_raw', 'synth'])
    ap.add_argument('--starts', type=int, default=64)
    ap.add_argument('--steps', type=int, default=500)
    ap.add_argument('--windows', type=int, default=500, help='report window length')
    a = ap.parse_args()
    E = {'fort_c': lambda: load_fortunes(True), 'fort_raw': lambda: load_fortunes(False),
         'synth': load_synth}[a.table]()
    N = E.shape[0]
    starts = np.array([i * N // a.starts for i in range(a.starts)])
    t0 = time.time()
    res = run(E, starts, a.steps)
    title = f'{a.table} N={N} D={E.shape[1]} starts={a.starts} steps={a.steps}'
    print(f'# {title}  (run {time.time() - t0:.1f}s)')
    for lo in range(1, a.steps + 1, a.windows):
        report(title, res, max(lo, 2), min(lo + a.windows - 1, a.steps))
    np.savez_compressed(f'/work/simthr/res_{a.table}_{a.starts}x{a.steps}.npz', **res)


if __name__ == '__main__':
    main()
