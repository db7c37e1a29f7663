#!/usr/bin/env python3
"""fp16-stored-key band simulation for the diversity-sequence filter.

Exact float64 greedy (same as /work/simthr/sim.py): S={s}, c=e_s; step t picks the
unchosen x minimising K(x) = c.e_x/|e_x| (lowest index on exact ties), c += e_x.
Step t uses c = sum of the t rows chosen before it.

Per step, with u = 2^-24, gamma = 1.01*(9D+2)*u*|c|  (sigma=1, rho=0):
  band_today = |{x unchosen : K(x) <= minK + 2 gamma}|
  band_fp16  = |{x unchosen : K(x) <= minK + 2 gamma + 2 h}|,
     h = half an fp16 ulp at |minK| rounded up to the next power of two
       = 2^(e-10) for |minK| in [2^e, 2^(e+1))   (i.e. one ulp at |minK|)
Extra (true worst-case supersets, F anywhere within +-gamma(+-h) of K):
  wc_today = |{K <= minK + 4 gamma}|,  wc_fp16 = |{K <= minK + 4 gamma + 4 h}|
Exact float64 keys stand in for F.  h is computed on the scaled keys K*2^k
(max|c_d|*2^k in [2^13,2^14)) and mapped back; as 2^k is a power of two this equals
h at unscaled |minK| unless the scaled value is subnormal/overflowing (checked).
"""
import sys, time, argparse
import numpy as np
sys.path.insert(0, '/work/simthr')
from sim import load_fortunes, load_synth   # reuse table loading

U = 2.0 ** -24
FP16_MAX = 65504.0
FP16_MIN_NORMAL = 2.0 ** -14


def half_ulp_roundup(a):
    """h = half an fp16 ulp at a rounded up to the next power of two (a > 0, array).
    a in [2^e, 2^(e+1)) -> 2^(e-10); fp16 subnormal floor: half-ulp >= 2^-25."""
    m, ex = np.frexp(a)            # a = m * 2^ex, m in [0.5,1) -> e = ex-1
    e = ex - 1
    return np.maximum(np.ldexp(1.0, e - 10), 2.0 ** -25)


def run(E, starts, steps):
    N, D = E.shape
    B = len(starts)
    norms = np.linalg.norm(E, axis=1)
    EnT = np.ascontiguousarray((E / norms[:, None]).T)
    chosen = np.zeros((B, N), dtype=bool)
    rows = np.arange(B)
    chosen[rows, starts] = True
    C = E[starts].copy()
    names = ['today', 'fp16', 'wc_today', 'wc_fp16', 'h_over_gamma', 'cnorm', 'minK',
             'maxabsK', 'scale_k', 'maxabsK_scaled', 'absminK_scaled', 'minabsK_scaled']
    res = {n: np.full((steps + 1, B), np.nan) for n in names}
    for t in range(1, steps + 1):
        K = C @ EnT
        K[chosen] = np.inf
        kmin = K.min(axis=1)
        pick = np.argmin(K, axis=1)
        cn = np.linalg.norm(C, axis=1)
        gamma = 1.01 * (9 * D + 2) * U * cn
        # per-sequence power-of-two scale as in the real filter
        mx = np.abs(C).max(axis=1)
        k = 13 - (np.frexp(mx)[1] - 1)           # mx*2^k in [2^13, 2^14)
        sc = np.ldexp(1.0, k)
        hs = half_ulp_roundup(np.abs(kmin) * sc)  # on scaled keys
        h = hs / sc
        Kf = np.where(chosen, np.nan, K)
        absK = np.abs(Kf)
        res['today'][t] = (K <= (kmin + 2 * gamma)[:, None]).sum(axis=1)
        res['fp16'][t] = (K <= (kmin + 2 * gamma + 2 * h)[:, None]).sum(axis=1)
        res['wc_today'][t] = (K <= (kmin + 4 * gamma)[:, None]).sum(axis=1)
        res['wc_fp16'][t] = (K <= (kmin + 4 * gamma + 4 * h)[:, None]).sum(axis=1)
        res['h_over_gamma'][t] = h / gamma
        res['cnorm'][t] = cn
        res['minK'][t] = kmin
        res['maxabsK'][t] = np.nanmax(absK, axis=1)
        res['scale_k'][t] = k
        res['maxabsK_scaled'][t] = res['maxabsK'][t] * sc
        res['absminK_scaled'][t] = np.abs(kmin) * sc
        res['minabsK_scaled'][t] = np.nanmin(absK, axis=1) * sc
        chosen[rows, pick] = True
        C += E[pick]
    return res


def first_step_over(arr, thr, lo, hi):
    """first step (lo..hi) where any sequence has arr > thr, else None"""
    a = arr[lo:hi + 1]
    m = np.any(a > thr, axis=1)
    return int(lo + np.argmax(m)) if m.any() else None


def report(title, res, lo, hi):
    print(f'\n### {title}  (steps {lo}..{hi})')
    print('| band | n | mean | p50 | p99 | max | frac>8 | frac>16 | frac>64 |')
    print('|---|---|---|---|---|---|---|---|---|')
    for name in ('today', 'fp16', 'wc_today', 'wc_fp16'):
        x = res[name][lo:hi + 1].ravel()
        print(f'| {name} | {x.size} | {x.mean():.2f} | {np.median(x):.0f} | '
              f'{np.percentile(x, 99):.1f} | {x.max():.0f} | {np.mean(x > 8):.4f} | '
              f'{np.mean(x > 16):.4f} | {np.mean(x > 64):.4f} |')
    r = res['h_over_gamma'][lo:hi + 1]
    print(f'h/gamma over window: min {r.min():.3g}  median {np.median(r):.3g}  max {r.max():.3g}')
    steps_show = [s for s in (lo, lo + 9, lo + 99, (lo + hi) // 2, hi) if lo <= s <= hi]
    print('h/gamma at steps (start 0 / median over starts), |c| (start 0), minK (start 0):')
    for s in sorted(set(steps_show)):
        print(f'  t={s}: h/gamma {res["h_over_gamma"][s, 0]:.3g} / '
              f'{np.median(res["h_over_gamma"][s]):.3g}   |c|={res["cnorm"][s, 0]:.4g}  '
              f'minK={res["minK"][s, 0]:.4g}')
    print(f'unscaled: max|c| {np.max(res["cnorm"][lo:hi+1]):.4g}, max|K| {np.max(res["maxabsK"][lo:hi+1]):.4g}, '
          f'min|minK| {np.min(np.abs(res["minK"][lo:hi+1])):.4g}, max|minK| {np.max(np.abs(res["minK"][lo:hi+1])):.4g}')
    print(f'  first step with |c|>65504: {first_step_over(res["cnorm"], FP16_MAX, lo, hi)}; '
          f'first step with max|K|>65504: {first_step_over(res["maxabsK"], FP16_MAX, lo, hi)}')
    ks = res['scale_k'][lo:hi + 1]
    print(f'scaled (2^k, k in [{ks.min():.0f},{ks.max():.0f}]): max|K|*2^k {np.max(res["maxabsK_scaled"][lo:hi+1]):.4g}, '
          f'|minK|*2^k in [{np.min(res["absminK_scaled"][lo:hi+1]):.4g}, {np.max(res["absminK_scaled"][lo:hi+1]):.4g}], '
          f'min over candidates |K|*2^k {np.min(res["minabsK_scaled"][lo:hi+1]):.3g}')
    print(f'  frac steps with max|K|*2^k > 65504: {np.mean(res["maxabsK_scaled"][lo:hi+1] > FP16_MAX):.4f}; '
          f'with |minK|*2^k > 65504: {np.mean(res["absminK_scaled"][lo:hi+1] > FP16_MAX):.4f}; '
          f'with |minK|*2^k < 2^-14 (subnormal): {np.mean(res["absminK_scaled"][lo:hi+1] < FP16_MIN_NORMAL):.4f}')
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--table', required=True, choices=['fort_c', 'fort_raw', 'synth'])
    ap.add_argument('--starts', type=int, default=64)
    ap.add_argument('--steps', type=int, default=500)
    ap.add_argument('--lo', type=int, default=1, help='first reported step')
    a = ap.parse_args()
    E = {'fort_c': lambda: load_fortunes(True), 'fort_raw': lambda: load_fortunes(False),
         'synth': load_synth}[a.table]()
    N, D = E.shape
    starts = np.array([i * N // a.starts for i in range(a.starts)])
    t0 = time.time()
    res = run(E, starts, a.steps)
    title = f'{a.table} N={N} D={D} starts={a.starts} steps={a.steps}'
    print(f'\n# {title}  (run {time.time() - t0:.1f}s)  gamma/|c| = {1.01*(9*D+2)*U:.4g}')
    report(title, res, a.lo, a.steps)
    np.savez_compressed(f'/work/simfp16/res_{a.table}_{a.starts}x{a.steps}.npz', **res)


if __name__ == '__main__':
    main()
