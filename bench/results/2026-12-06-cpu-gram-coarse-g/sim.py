#!/usr/bin/env python3
"""Would a coarser fixed-point Gram matrix pay?  Simulation of gram_fixed.comp's certificate.

For a table E (N x D float32, as stored), W[p][x] = (e_p . e_x) / |e_x| in float64.
Variant b stores G_b[p][x] = roundEven(2^(s-b) * W[p][x]) (one rounding of the float64 value at
the coarse scale; b = 0 is today's int32 Gram matrix), with s = the engine's fixed_scale().
Keys are exact integer sums of rows of G_b, with the engine's overflow shifts modelled:
  key[x] += (G_b[prev][x] + half) >> sh ;  A += inc,  inc = g_b * 2^-sh + (1/2 if sh > 0)
  a step is uncertain when second - best <= 2A; the band is the live keys <= best + floor(2A).
The per-entry bound g_b (coarse units): 0.51 for b = 0 (the engine's G_ERR), 0.5 + 0.01 * 2^-b for
b > 0 (0.5 for the one rounding, plus the float64 dot product/norm error, <= (D+8) 2^-23 fine
units <= 0.01 fine units for D <= 65,536, which is 0.01 * 2^-b coarse units).

The sequence followed is the exact float64 one: at each step the argmin over unchosen x of
sum_p W[p][x] (lowest index on ties), so every variant is judged on the same steps.
"""
import sys, time, os, math
import numpy as np
from multiprocessing import Pool

GROW = 1.0 + 2.0 ** -40
LIMIT = 2.0 ** 30
BIG = np.int64(1) << 60
BS = [0, 1, 2, 4, 8, 12, 14, 15, 16]

# globals shared with forked workers
E64 = None; W = None; GB = {}; S = 0; MN = 0.0; N = 0; NORM = None


def fixed_scale(E32):
    """src/gram/matrix.rs fixed_scale(), from the table's inverse norms as float32."""
    nrm = np.sqrt((E32.astype(np.float64) ** 2).sum(1))
    inv = np.where(nrm > 0, 1.0 / np.where(nrm > 0, nrm, 1.0), 0.0).astype(np.float32)
    m = (1.0 / inv[inv > 0].astype(np.float64)).max() * (1.0 + 2.0 ** -20)
    mf = np.float32(m)
    if float(mf) < m:
        mf = np.nextafter(mf, np.float32(np.inf))
    return 29 - int(math.floor(math.log2(float(mf)))), float(mf)


def g_err(b):
    return 0.51 if b == 0 else 0.5 + 0.01 * 2.0 ** -b


def for_shift(sh, scale, g):
    unit = 2.0 ** (sh - scale)
    inc = (g * 2.0 ** -sh + (0.5 if sh > 0 else 0.0)) * GROW
    half = (1 << (sh - 1)) if sh > 0 else 0
    return unit, inc, half


def run_seq(args):
    start, steps = args
    n = N
    kf = np.zeros(n)
    live = np.ones(n, bool)
    c = np.zeros(E64.shape[1])
    st = {}
    for b in BS:
        scale = S - b
        unit, inc, half = for_shift(0, scale, g_err(b))
        st[b] = dict(key=np.zeros(n, np.int64), sh=0, au=0.0, unit=unit, inc=inc, half=half,
                     scale=scale, g=g_err(b), unc=np.zeros(steps, bool), band=np.zeros(steps, np.int32),
                     shifts=0, bad=0)
    ratio0 = np.empty(steps)
    prev = start
    for t in range(1, steps + 1):
        live[prev] = False
        kf += W[prev]
        kf[prev] = np.inf
        c += E64[prev]
        pick = int(np.argmin(kf))  # exact float64 pick, lowest index on ties
        kb = kf[pick]              # its exact key (real units), c . e_pick / |e_pick|
        c2 = float(c @ c)
        for b in BS:
            s_ = st[b]
            key = s_['key']
            row = GB[b][prev]
            if s_['sh'] == 0:
                key += row
            else:
                key += (row.astype(np.int64) + s_['half']) >> s_['sh']
            key[prev] = BIG
            s_['au'] += s_['inc']
            au = s_['au']
            i = int(np.argmin(key))
            best = key[i]
            key[i] = BIG
            second = key.min()
            key[i] = best
            gap = float(second - best)
            if b == 0:
                ratio0[t - 1] = gap / (2.0 * au)
            if gap <= 2.0 * au:
                s_['unc'][t - 1] = True
                tau = best + int(math.floor(2.0 * au))
                s_['band'][t - 1] = np.count_nonzero(key <= tau)
                if key[pick] > tau:
                    s_['bad'] += 1  # the exact pick outside the band: the bound failed
            elif i != pick:
                s_['bad'] += 1      # certain step picking something else: the bound failed
            # overflow shifts (gram_fixed.comp, end of step), with exact |c| and exact key
            cn2 = (c2 + MN * MN + 2.0 * MN * max(kb, 0.0)) * GROW
            room = LIMIT - 2.0 - (au + s_['inc'])
            if room <= 0 or cn2 >= (room * s_['unit']) ** 2:
                cu = math.ldexp(math.sqrt(cn2) * GROW, s_['scale'] - s_['sh'])
                k = 1
                while s_['sh'] + k < 30 and math.ldexp(cu + au + s_['inc'], -k) + 8.0 >= LIMIT:
                    k += 1
                key >>= k
                key[~live] = BIG
                s_['sh'] += k
                s_['shifts'] += 1
                s_['au'] = (math.ldexp(au, -k) + 1.0) * GROW
                s_['unit'], s_['inc'], s_['half'] = for_shift(s_['sh'], s_['scale'], s_['g'])
        prev = pick
    out = {b: dict(unc=st[b]['unc'], band=st[b]['band'], sh=st[b]['sh'], shifts=st[b]['shifts'],
                   bad=st[b]['bad']) for b in BS}
    return start, out, ratio0


def load(name):
    E = np.fromfile('/work/shared/data/fortunes-minilm/embeddings.f32', dtype='<f4').reshape(14943, 384)
    if name == 'fortunes-centred':
        # src/table.rs Table::centered(): float64 column mean, (v - m) rounded to float32, no normalising
        mean = E.astype(np.float64).mean(0)
        E = (E.astype(np.float64) - mean).astype(np.float32)
    elif name == 'seed':
        E = np.fromfile('/work/sim16/seed.f32', dtype='<f4').reshape(8359, 768)
    return E


def main():
    global E64, W, GB, S, MN, N, NORM
    names = sys.argv[1].split(',')
    steps_arg = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    for name in names:
        t0 = time.time()
        E = load(name)
        N = E.shape[0]
        S, MN = fixed_scale(E)
        E64 = E.astype(np.float64)
        NORM = np.sqrt((E64 ** 2).sum(1))
        inv = np.where(NORM > 0, 1.0 / np.where(NORM > 0, NORM, 1.0), 0.0)
        W = E64 @ E64.T
        W *= inv[None, :]
        GB = {}
        int16_over = {}
        for b in BS:
            g = np.empty((N, N), np.int32)
            for r0 in range(0, N, 1024):
                g[r0:r0 + 1024] = np.rint(np.ldexp(W[r0:r0 + 1024], S - b))
            GB[b] = g
            if b >= 8:
                off = np.abs(g.astype(np.int64)) > 32767 if N * N < 3e8 else None
                if off is not None:
                    np.fill_diagonal(off, False)
                    int16_over[b] = int(off.sum())
                    del off
        mean_norm = float(np.linalg.norm(E64.mean(0)))
        print(f"== {name}: N={N} D={E.shape[1]} s={S} MAX_NORM={MN:.6f} |e| min/mean/max="
              f"{NORM.min():.4f}/{NORM.mean():.4f}/{NORM.max():.4f} |mean row|={mean_norm:.4f} "
              f"setup {time.time() - t0:.1f}s", flush=True)
        print(f"   off-diagonal entries outside int16 at b: {int16_over}", flush=True)
        steps = steps_arg if steps_arg > 0 else N - 1
        starts = [i * (N - 1) // 7 for i in range(8)]
        t1 = time.time()
        with Pool(2) as pool:
            res = pool.map(run_seq, [(s0, steps) for s0 in starts], chunksize=1)
        print(f"   {len(starts)} sequences x {steps} steps, {time.time() - t1:.1f}s", flush=True)
        report(name, res, steps)
        del W, GB, E64
        W = None; GB = {}; E64 = None


def report(name, res, steps):
    tot = len(res) * steps
    rows = {}
    for b in BS:
        unc = np.concatenate([r[1][b]['unc'] for r in res])
        band = np.concatenate([r[1][b]['band'] for r in res])[unc]
        rows[b] = (unc.mean(), band.mean() if band.size else 0.0, int(band.max()) if band.size else 0,
                   band.sum() / tot, sum(r[1][b]['bad'] for r in res),
                   [r[1][b]['sh'] for r in res], [r[1][b]['shifts'] for r in res],
                   unc[np.arange(tot) % steps < min(3000, steps)].mean())
    u0, m0, _, c0 = rows[0][0], rows[0][1], rows[0][2], rows[0][3]
    print(f"   {'b':>3} {'uncertain':>10} {'x b=0':>8} {'unc<=3000':>10} {'band mean':>10} {'x b=0':>7} "
          f"{'band max':>9} {'rescored/step':>14} {'x b=0':>8} {'bound fails':>11}  final sh per seq")
    for b in BS:
        u, m, mx, cs, bad, sh, nsh, u3 = rows[b]
        print(f"   {b:>3} {u:>10.5f} {u / u0 if u0 else float('nan'):>8.2f} {u3:>10.5f} {m:>10.2f} "
              f"{m / m0 if m0 else float('nan'):>7.2f} {mx:>9d} {cs:>14.4f} "
              f"{cs / c0 if c0 else float('nan'):>8.2f} {bad:>11d}  {sh}", flush=True)
    r0 = np.concatenate([r[2] for r in res])
    q = [1, 5, 10, 25, 50, 75, 90]
    print("   gap/(2*A_0) at b=0, percentiles " + ", ".join(f"p{p}={np.percentile(r0, p):.3g}" for p in q),
          flush=True)
    # the same by phase of the sequence
    idx = np.arange(r0.size) % steps
    for lo, hi in [(0, 100), (100, 1000), (1000, 3000), (3000, 8000), (8000, steps)]:
        if lo >= steps:
            break
        sel = r0[(idx >= lo) & (idx < hi)]
        print(f"     steps [{lo + 1},{min(hi, steps)}]: median {np.median(sel):.3g}, p10 {np.percentile(sel, 10):.3g},"
              f" frac<=1 {np.mean(sel <= 1):.4f}, frac<=2^8 {np.mean(sel <= 256):.4f}, "
              f"frac<=2^12 {np.mean(sel <= 4096):.4f}, frac<=2^16 {np.mean(sel <= 65536):.4f}", flush=True)


if __name__ == '__main__':
    main()
