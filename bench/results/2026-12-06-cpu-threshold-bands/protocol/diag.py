# diagnostic: per-step key spacing near the min vs. step-to-step key movement
import numpy as np, sim, sys
E = {'synth': sim.load_synth, 'fort_c': lambda: sim.load_fortunes(True), 'fort_raw': lambda: sim.load_fortunes(False)}[sys.argv[1]]()
N=E.shape[0]; nr=np.linalg.norm(E,axis=1); En=E/nr[:,None]
s=N//3; ch=np.zeros(N,bool); ch[s]=True; c=E[s].copy()
prev=None
for t in range(1,301):
    K=En@c; K[ch]=np.inf; o=np.argsort(K); x=o[0]
    g8=K[o[7]]-K[o[0]]; g32=K[o[31]]-K[o[0]]
    if prev is not None:
        # T from previous top-33 minus pick
        T=K[prev].min(); n0=np.count_nonzero(K<=T)
    else: T=np.nan; n0=0
    if t%10==0 or n0>30: print(t, f'|c|={np.linalg.norm(c):.2f} Kmin={K[x]:.4f} gap8={g8:.4f} gap32={g32:.4f} short={T-K[x]:.4f} n0={n0}')
    prev=o[1:34]; ch[x]=True; c+=E[x]
