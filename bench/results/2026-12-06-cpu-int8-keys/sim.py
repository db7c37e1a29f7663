#!/usr/bin/env python3
"""Band sizes of a filter on int8 products (issue 31: would the tensor cores' int8 rate pay?).

Exact key K(x) = c.e_x/|e_x| (float64, minimised, c the running sum along the exact sequence).
int8 filter: c_q = round(c * s), s = 127 / max|c_d| (per sequence and step); e_q = round(e * t_x),
t_x = 127 / max|e_xd| (per row); F = (c_q . e_q) / (s t_x |e_x|) (the integer product is exact).
Rigorous bound, Cauchy-Schwarz with the table's worst rows, as the fp16 filter does:
  |F - K| <= gamma = |c| rho_max + (|dc| / s) sigma_max,
  rho_x = |e_q/t_x - e_x| / |e_x|,  sigma_x = |e_q| / (t_x |e_x|),  dc = c_q - c s.
Band = {x unchosen: F_x <= min F + 2 gamma}. For comparison the fp16 filter's band with its
own rho, sigma (c scaled to [2^13, 2^14), fp16 rounding; products exact here, the library adds
8 D u for the accumulation, negligible beside rho).
"""
import sys
import numpy as np
sys.path.insert(0, __import__('os').path.join(__import__('os').path.dirname(__file__), '..', '2026-12-06-cpu-tile-skip'))
from sim import load_synth, load_fortunes

def bands(E, B, steps, seed=1):
    N, D = E.shape
    E = E.astype(np.float64)
    norms = np.linalg.norm(E, axis=1)
    t = 127.0 / np.abs(E).max(axis=1)
    Eq = np.round(E * t[:, None])
    rho8 = np.linalg.norm(Eq / t[:, None] - E, axis=1) / norms
    sig8 = np.linalg.norm(Eq, axis=1) / (t * norms)
    E16 = E.astype(np.float16).astype(np.float64)
    rho16 = np.linalg.norm(E16 - E, axis=1) / norms
    sig16 = np.linalg.norm(E16, axis=1) / norms
    r8, s8, r16, s16 = rho8.max(), sig8.max(), rho16.max(), sig16.max()
    rng = np.random.default_rng(seed)
    starts = rng.choice(N, B, replace=False)
    chosen = np.zeros((B, N), bool); chosen[np.arange(B), starts] = True
    C = E[starts].copy()
    out8, out16 = [], []
    for step in range(steps):
        K = (C @ E.T) / norms
        K[chosen] = np.inf
        cn = np.linalg.norm(C, axis=1)
        # int8
        s = 127.0 / np.abs(C).max(axis=1)
        Cq = np.round(C * s[:, None])
        dc = np.linalg.norm(Cq - C * s[:, None], axis=1) / s
        F8 = (Cq @ Eq.T) / (s[:, None] * t[None, :] * norms[None, :])
        F8[chosen] = np.inf
        g8 = cn * r8 + dc * s8
        out8.append((F8 <= (F8.min(axis=1) + 2 * g8)[:, None]).sum(axis=1))
        # fp16 (scaled c)
        k = 2.0 ** (14 - np.ceil(np.log2(np.abs(C).max(axis=1) + 1e-300)))
        C16 = (C * k[:, None]).astype(np.float16).astype(np.float64)
        dc16 = np.linalg.norm(C16 - C * k[:, None], axis=1) / k
        F16 = (C16 @ E16.T) / (k[:, None] * norms[None, :])
        F16[chosen] = np.inf
        g16 = cn * r16 + dc16 * s16
        out16.append((F16 <= (F16.min(axis=1) + 2 * g16)[:, None]).sum(axis=1))
        pick = np.argmin(K, axis=1)
        chosen[np.arange(B), pick] = True
        C += E[pick]
    return np.array(out8), np.array(out16), (r8, s8, r16, s16)

if __name__ == '__main__':
    which = sys.argv[1]; B = int(sys.argv[2]); steps = int(sys.argv[3])
    E = {'synth': lambda: load_synth(), 'fort': lambda: load_fortunes(False), 'fortc': lambda: load_fortunes(True)}[which]()
    b8, b16, (r8, s8, r16, s16) = bands(E, B, steps)
    print(f'# {which}: N {E.shape[0]} D {E.shape[1]}, {B} sequences x {steps} steps; rho_max int8 {r8:.2e} fp16 {r16:.2e}, sigma_max {s8:.4f} / {s16:.4f}')
    wins = [(0, 10), (10, 50), (50, 100), (100, 300), (300, 1000)]
    print('window     int8 mean  p99   max | fp16 mean  p99  max')
    for a, b in wins:
        if a >= steps: break
        x8, x16 = b8[a:b].ravel(), b16[a:b].ravel()
        print(f'{a+1:4}-{min(b,steps):<4}  {x8.mean():9.2f} {np.percentile(x8,99):5.0f} {x8.max():5d} | {x16.mean():8.2f} {np.percentile(x16,99):4.0f} {x16.max():4d}')
