#!/usr/bin/env python3
"""Tile skipping with a rank-r directional bound (issue 31 feasibility, continues sim.py).

n_x = e_x/|e_x|; Q = the top r right-singular vectors of the (uncentred) n rows. For a tile last
computed at t0 (its keys K_t0(x) kept per item),
  K_t(x) = K_t0(x) + (Q^T D).(Q^T n_x) + D_perp . n_x_perp >= K_t0(x) + (Q^T D).(Q^T n_x) - |D_perp| |n_x_perp|
with D = c_t - c_t0. A tile is skipped while the least such bound over its unchosen items exceeds
the step's true minimum (optimistic threshold, as in sim.py). |D_perp| exact ('exact') or by the
triangle inequality over the picks' perpendicular parts ('tri').
"""
import sys, time
import numpy as np
from sim import load_synth, load_fortunes

def run(E, B, steps, TILE, SBS, R, seed=1):
    N, D = E.shape
    T = (N + TILE - 1) // TILE
    pad = T * TILE - N
    norms = np.linalg.norm(E, axis=1)
    En = (E / norms[:, None]).astype(np.float64)
    _, _, Vt = np.linalg.svd(En[np.random.default_rng(5).choice(N, min(N, 4000), replace=False)], full_matrices=False)
    EnT = np.ascontiguousarray(En.T.astype(np.float32))
    rng = np.random.default_rng(seed)
    starts = rng.choice(N, B, replace=False)
    chosen = np.zeros((B, N), bool); chosen[np.arange(B), starts] = True
    C = E[starts].astype(np.float64).copy()
    H = np.zeros((steps + 1, B, D)); H[0] = C
    res = {}
    st = {}
    for r in R:
        Q = Vt[:r].T  # D x r
        proj = En @ Q  # N x r
        perp = np.sqrt(np.maximum(1 - (proj ** 2).sum(axis=1), 0))  # |n_x perp|
        ep = np.sqrt(np.maximum(norms ** 2 - ((E.astype(np.float64) @ Q) ** 2).sum(axis=1), 0))  # |e perp|
        for bd in ('exact', 'tri'):
            for sb in SBS:
                st[(r, bd, sb)] = dict(Q=Q, proj=proj, perp=perp, ep=ep, K0=np.full((B, N), -np.inf),
                                       t0=np.zeros((B, T), int), P=np.zeros((steps + 1, B)), comp=np.zeros(steps + 1))
    for t in range(1, steps + 1):
        K = (C.astype(np.float32) @ EnT).astype(np.float64)
        K[chosen] = np.inf
        kmin = K.min(axis=1)
        for (r, bd, sb), s in st.items():
            t0i = np.repeat(s['t0'], TILE, axis=1)[:, :N]  # (B, N) step of each item's tile
            c0 = H[t0i.T, np.arange(B)[None, :]].transpose(1, 0, 2) if False else None
            # D per (b, tile): c_t - H[t0]
            Dt = C[:, None, :] - H[s['t0'], np.arange(B)[:, None]]  # (B, T, D)
            QD = Dt @ s['Q']  # (B, T, r)
            if bd == 'exact':
                dperp = np.sqrt(np.maximum((Dt ** 2).sum(axis=2) - (QD ** 2).sum(axis=2), 0))
            else:
                dperp = s['P'][t - 1][:, None] - np.take_along_axis(s['P'][:t].T, s['t0'], axis=1)
            projp = np.concatenate([s['proj'], np.zeros((pad, r))]).reshape(T, TILE, r)
            lin = np.einsum('btr,tir->bti', QD, projp).reshape(B, T * TILE)[:, :N]
            perpp = np.concatenate([s['perp'], np.zeros(pad)]).reshape(T, TILE)
            lb = s['K0'] + lin - (dperp[:, :, None] * perpp[None]).reshape(B, T * TILE)[:, :N]
            lb = np.where(chosen, np.inf, lb)
            lbt = np.concatenate([lb, np.full((B, pad), np.inf)], axis=1).reshape(B, T, TILE).min(axis=2)
            need = ~(lbt > kmin[:, None])
            nb = B // sb
            bneed = need.reshape(nb, sb, T).any(axis=1)
            s['comp'][t] = bneed.mean()
            full = np.repeat(bneed, sb, axis=0)
            fi = np.repeat(full, TILE, axis=1)[:, :N]
            s['K0'] = np.where(fi, K, s['K0'])
            s['t0'] = np.where(full, t - 1, s['t0'])
        pick = np.argmin(K, axis=1)
        chosen[np.arange(B), pick] = True
        C += E[pick]
        H[t] = C
        for s in st.values():
            s['P'][t] = s['P'][t - 1] + s['ep'][pick]
    return st

if __name__ == '__main__':
    which = sys.argv[1]; B = int(sys.argv[2]); steps = int(sys.argv[3])
    E = {'synth': lambda: load_synth(), 'fort': lambda: load_fortunes(False), 'fortc': lambda: load_fortunes(True)}[which]()
    t0 = time.time()
    st = run(E, B, steps, 128, [1, 16, 64], [1, 8, 32])
    print(f'# {which}: N {E.shape[0]} D {E.shape[1]} B {B} steps {steps} tile 128, rank-r bound ({time.time()-t0:.0f} s)')
    wins = [(1, 10), (11, 50), (51, 100), (101, 250), (251, 500)]
    wins = [(a, min(b, steps)) for a, b in wins if a <= steps]
    print(' r bound  SB  ' + '  '.join(f'{a:>3}-{b:<3}' for a, b in wins) + '   all')
    for (r, bd, sb), s in st.items():
        row = [s['comp'][a:b + 1].mean() for a, b in wins]
        print(f'{r:2} {bd:5} {sb:3}  ' + '  '.join(f'{x:7.3f}' for x in row) + f'  {s["comp"][1:].mean():6.3f}')
