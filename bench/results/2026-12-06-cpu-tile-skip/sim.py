#!/usr/bin/env python3
"""Tile-skipping simulation for the tensor-core scan (issue 31 feasibility).

Key K_t(x) = c_t . e_x/|e_x| (minimised; c_t the running sum of the picks so far).
Per (sequence, tile of TILE items) keep m = the tile's least key over unchosen items when it was
last computed (step t0). Since K_t(x) - K_t0(x) = (c_t - c_t0) . n_x >= -|c_t - c_t0|, the tile
can be skipped at step t while m - bound(t0, t) > min_x K_t(x) (+ band). Bounds:
  tri   : |c_t - c_t0| <= sum of |e_pick| over the picks since t0
  exact : |c_t - c_t0| itself
A block of SB sequences computes a tile (and refreshes every one of its sequences' m for that
tile) if any of its sequences cannot skip it. Reports the fraction of (block, tile) products
computed, per step window. Optimistic in one way: the threshold is the true minimum of the step
(a real filter would use an upper bound of it, e.g. re-scored probes).
"""
import sys, time
import numpy as np

def load_synth(N=8359, D=768, seed=0):
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((256, D))
    w = rng.standard_normal((N, 256)) ** 3
    E = w @ topics / 16 + 0.35 * rng.standard_normal((N, D)) + 0.8 * rng.standard_normal((1, D))
    return E.astype(np.float32)

def load_fortunes(center):
    E = np.fromfile('/work/shared/data/fortunes-minilm/embeddings.f32', dtype=np.float32).reshape(-1, 384)
    if center:
        E = (E.astype(np.float64) - E.astype(np.float64).mean(axis=0)).astype(np.float32)
    return E

def run(E, B, steps, TILE, SBS, bounds, seed=1):
    N, D = E.shape
    T = (N + TILE - 1) // TILE
    norms = np.linalg.norm(E, axis=1)
    EnT = np.ascontiguousarray((E / norms[:, None]).T)
    rng = np.random.default_rng(seed)
    starts = rng.choice(N, B, replace=False)
    chosen = np.zeros((B, N), bool); chosen[np.arange(B), starts] = True
    C = E[starts].astype(np.float64).copy()
    H = np.zeros((steps + 1, B, D), np.float32); H[0] = C
    P = np.zeros((steps + 1, B))  # prefix sums of pick norms
    pad = T * TILE - N
    st = {}
    for bd in bounds:
        for sb in SBS:
            st[(bd, sb)] = dict(m=np.full((B, T), -np.inf), t0=np.zeros((B, T), int), comp=np.zeros(steps + 1))
    for t in range(1, steps + 1):
        K = (C.astype(np.float32) @ EnT).astype(np.float64)
        K[chosen] = np.inf
        kmin = K.min(axis=1)
        Kt = np.concatenate([K, np.full((B, pad), np.inf)], axis=1).reshape(B, T, TILE).min(axis=2)
        # |c_t - c_u| for every u < t: (B, t)
        Hc = H[:t].astype(np.float64)  # (t, B, D)
        dist = np.sqrt(np.maximum(((C[None] - Hc) ** 2).sum(axis=2), 0)).T  # (B, t)
        for (bd, sb), s in st.items():
            if bd == 'tri':
                bound = P[t - 1][:, None] - np.take_along_axis(P[:t].T, s['t0'], axis=1)
            else:
                bound = np.take_along_axis(dist, s['t0'], axis=1)
            need = ~(s['m'] - bound > kmin[:, None])
            nb = B // sb
            bneed = need.reshape(nb, sb, T).any(axis=1)  # (nb, T)
            s['comp'][t] = bneed.mean()
            full = np.repeat(bneed, sb, axis=0)
            s['m'] = np.where(full, Kt, s['m'])
            s['t0'] = np.where(full, t - 1, s['t0'])
        pick = np.argmin(K, axis=1)
        chosen[np.arange(B), pick] = True
        C += E[pick]
        H[t] = C
        P[t] = P[t - 1] + norms[pick]
    return st

if __name__ == '__main__':
    which = sys.argv[1]
    B = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    E = {'synth': lambda: load_synth(), 'fort': lambda: load_fortunes(False), 'fortc': lambda: load_fortunes(True)}[which]()
    t0 = time.time()
    st = run(E, B, steps, 128, [1, 16, 64], ['tri', 'exact'])
    print(f'# {which}: N {E.shape[0]} D {E.shape[1]} B {B} steps {steps} tile 128 ({time.time()-t0:.0f} s)')
    wins = [(1, 10), (11, 50), (51, 100), (101, 250), (251, 500)]
    wins = [(a, min(b, steps)) for a, b in wins if a <= steps]
    print('bound  SB  ' + '  '.join(f'{a:>3}-{b:<3}' for a, b in wins) + '   all')
    for (bd, sb), s in st.items():
        row = [s['comp'][a:b + 1].mean() for a, b in wins]
        print(f'{bd:5} {sb:3}  ' + '  '.join(f'{r:7.3f}' for r in row) + f'  {s["comp"][1:].mean():6.3f}')
