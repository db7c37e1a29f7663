# steady-state summary (steps 51..500) from the saved per-step arrays
import numpy as np, sys
for tab in ['fort_c', 'fort_raw', 'synth']:
    d = np.load(f'/work/simthr2/res_{tab}_64x500.npz')
    names = sorted({k[:-2] for k in d.files if k.endswith(' n')}, key=lambda s: [k for k in d.files].index(s + ' n'))
    print(f'\n### {tab}: steady state, steps 51..500 (band stats over threshold steps; fallback = empty / overflow)')
    print('| k | rule | mean B | p99 | max | fb% cap=inf (empty) | fb% cap=128 (empty+ovf) | fb% cap=64 (empty+ovf) |')
    print('|---|---|---|---|---|---|---|---|')
    seen = []
    for nm in names:
        base = nm.rsplit(' cap=', 1)[0]
        if base in seen: continue
        seen.append(base)
        n = d[base + ' cap=inf n'][51:].ravel(); n = n[~np.isnan(n)]
        fb = []
        for cap in ['inf', '128', '64']:
            kd = d[f'{base} cap={cap} kind'][51:]
            fb.append(f'{100*np.mean(kd==2)+100*np.mean(kd==3):.2f} ({100*np.mean(kd==2):.2f}+{100*np.mean(kd==3):.2f})')
        k, r = base.split(' ')
        print(f'| {k[2:]} | {r} | {n.mean():.1f} | {np.percentile(n,99):.0f} | {n.max():.0f} | ' + ' | '.join(fb) + ' |')
