# Early-step breakdown of the saved C_t arrays (from sim.py npz files)
import numpy as np, glob, sim
for f in sorted(glob.glob('/work/simthr/res_*_64x500.npz')):
    r = dict(np.load(f))
    for lo, hi in ((2, 10), (11, 50), (51, 500)):
        sub = {k: v for k, v in r.items() if not k.startswith('band')}
        sim.report(f.split('/')[-1], sub, lo, hi)
    # where do the catastrophic steps (C > 1000) occur?
    for k in ('P8(t-1)', 'P16(t-1)', 'P32(t-1)'):
        a = r[k]; t, b = np.nonzero(a > 1000)
        print(f'{k}: steps with C>1000: {len(t)}; step indices: {sorted(t.tolist())[:40]}')
        t, b = np.nonzero(a > 100)
        print(f'{k}: steps with C>100: {len(t)}; step histogram (<=10, 11-50, 51-500): '
              f'{(t<=10).sum()}, {((t>10)&(t<=50)).sum()}, {(t>50).sum()}')
