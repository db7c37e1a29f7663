#!/usr/bin/env python3
"""Fewer overflow shifts by subtracting a common offset: a simulation of gram_fixed.comp's
certificate (issue 32), beside today's rule.

Keys are exact integer sums of rows of today's int32 Ĝ (b = 0 of ../2026-12-06-cpu-gram-coarse-g),
with the engine's shifts: key[x] += (Ĝ[prev][x] + half) >> sh, A += g·2^-sh + (1/2 if sh > 0);
a step is uncertain when second − best ≤ 2A (it settles in float64). Today a shift happens when
the bound on |c| (through the pick's exact key) says the next step's keys could reach 2^30.
'offset': when that rule trips, first subtract the least live key from every live key (an exact
integer subtraction: the argmin, the gaps and A do not change) and shift only if the keys'
actual largest magnitude plus one more step's growth (MAX_NORM) could still reach 2^30; after
an offset the trip test uses the actual largest live |key| (tracked exactly here; an engine
would keep an upper bound raised by MAX_NORM a step and recompute it when it trips).
Every variant follows the exact float64 sequence, so all see the same steps.
"""
import sys, time, math
import numpy as np
from multiprocessing import Pool

GROW = 1.0 + 2.0 ** -40
LIMIT = 2.0 ** 30
BIG = np.int64(1) << 60
E64 = W = G = None; S = 0; MN = 0.0; N = 0


def fixed_scale(E32):
    nrm = np.sqrt((E32.astype(np.float64) ** 2).sum(1))
    inv = np.where(nrm > 0, 1.0 / np.where(nrm > 0, nrm, 1.0), 0.0).astype(np.float32)
    m = (1.0 / inv[inv > 0].astype(np.float64)).max() * (1.0 + 2.0 ** -20)
    mf = np.float32(m)
    if float(mf) < m:
        mf = np.nextafter(mf, np.float32(np.inf))
    return 29 - int(math.floor(math.log2(float(mf)))), float(mf)


def for_shift(sh):
    unit = 2.0 ** (sh - S)
    inc = (0.51 * 2.0 ** -sh + (0.5 if sh > 0 else 0.0)) * GROW
    half = (1 << (sh - 1)) if sh > 0 else 0
    return unit, inc, half


def run_seq(args):
    start, steps = args
    kf = np.zeros(N)
    live = np.ones(N, bool)
    c = np.zeros(E64.shape[1])
    st = {}
    for mode in ('today', 'offset'):
        unit, inc, half = for_shift(0)
        st[mode] = dict(key=np.zeros(N, np.int64), sh=0, au=0.0, unit=unit, inc=inc, half=half,
                        unc=np.zeros(steps, bool), shifts=0, offsets=0, bad=0, offset_on=False)
    prev = start
    for t in range(1, steps + 1):
        live[prev] = False
        kf += W[prev]
        kf[prev] = np.inf
        c += E64[prev]
        pick = int(np.argmin(kf))
        kb = kf[pick]
        c2 = float(c @ c)
        for mode, s_ in st.items():
            key = s_['key']
            row = G[prev]
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
            if float(second - best) <= 2.0 * au:
                s_['unc'][t - 1] = True
                if key[pick] > best + int(math.floor(2.0 * au)):
                    s_['bad'] += 1
            elif i != pick:
                s_['bad'] += 1
            room = LIMIT - 2.0 - (au + s_['inc'])
            step_units = MN / s_['unit'] * GROW  # one more row's growth, in units
            if mode == 'today' or not s_['offset_on']:
                cn2 = (c2 + MN * MN + 2.0 * MN * max(kb, 0.0)) * GROW
                trip = room <= 0 or cn2 >= (room * s_['unit']) ** 2
            else:
                lv = key[live]
                trip = float(np.abs(lv).max()) + step_units >= room
            if not trip:
                continue
            if mode == 'offset':
                lv = key[live]
                key[live] = lv - lv.min()
                s_['offsets'] += 1
                s_['offset_on'] = True
                m = float(key[live].max())
                if m + step_units < room:
                    continue
                k = 1
                while s_['sh'] + k < 30 and math.ldexp(m + au + s_['inc'] + step_units, -k) + 8.0 >= LIMIT:
                    k += 1
            else:
                cu = math.ldexp(math.sqrt(cn2) * GROW, S - s_['sh'])
                k = 1
                while s_['sh'] + k < 30 and math.ldexp(cu + au + s_['inc'], -k) + 8.0 >= LIMIT:
                    k += 1
            key >>= k
            key[~live] = BIG
            s_['sh'] += k
            s_['shifts'] += 1
            s_['au'] = (math.ldexp(au, -k) + 1.0) * GROW
            s_['unit'], s_['inc'], s_['half'] = for_shift(s_['sh'])
        prev = pick
    return {m: dict(unc=s_['unc'], sh=s_['sh'], shifts=s_['shifts'], offsets=s_['offsets'], bad=s_['bad'])
            for m, s_ in st.items()}


def load(name):
    if name == 'synth':
        rng = np.random.default_rng(0)
        N_, D = 8359, 768
        topics = rng.standard_normal((256, D))
        w = rng.standard_normal((N_, 256)) ** 3
        E = w @ topics / 16 + 0.35 * rng.standard_normal((N_, D)) + 0.8 * rng.standard_normal((1, D))
        return E.astype(np.float32)
    E = np.fromfile('/work/shared/data/fortunes-minilm/embeddings.f32', dtype='<f4').reshape(14943, 384)
    if name == 'fortunes-centred':
        E = (E.astype(np.float64) - E.astype(np.float64).mean(0)).astype(np.float32)
    return E


def main():
    global E64, W, G, S, MN, N
    steps_arg = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    for name in sys.argv[1].split(','):
        E = load(name)
        N = E.shape[0]
        S, MN = fixed_scale(E)
        E64 = E.astype(np.float64)
        nrm = np.sqrt((E64 ** 2).sum(1))
        W = E64 @ E64.T
        W *= np.where(nrm > 0, 1.0 / np.where(nrm > 0, nrm, 1.0), 0.0)[None, :]
        G = np.empty((N, N), np.int32)
        for r0 in range(0, N, 1024):
            G[r0:r0 + 1024] = np.rint(np.ldexp(W[r0:r0 + 1024], S))
        steps = steps_arg if steps_arg > 0 else N - 1
        starts = [i * (N - 1) // 7 for i in range(8)]
        t1 = time.time()
        with Pool(2) as pool:
            res = pool.map(run_seq, [(s0, steps) for s0 in starts], chunksize=1)
        print(f"== {name}: N={N} D={E.shape[1]}, 8 sequences x {steps} steps ({time.time() - t1:.0f} s)")
        for mode in ('today', 'offset'):
            unc = np.concatenate([r[mode]['unc'] for r in res])
            idx = np.arange(unc.size) % steps
            parts = ", ".join(f"steps {lo + 1}-{min(hi, steps)} {unc[(idx >= lo) & (idx < hi)].mean() * 100:.2f}%"
                              for lo, hi in [(0, 300), (300, 3000), (3000, steps)] if lo < steps)
            print(f"   {mode:6}: uncertain {unc.mean() * 100:.3f}% ({parts}); final sh {[r[mode]['sh'] for r in res]}; "
                  f"shifts {sum(r[mode]['shifts'] for r in res)}, offsets {sum(r[mode]['offsets'] for r in res)}, "
                  f"bound failures {sum(r[mode]['bad'] for r in res)}", flush=True)
        W = G = E64 = None


if __name__ == '__main__':
    main()
