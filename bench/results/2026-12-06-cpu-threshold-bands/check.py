# scalar reference check of the greedy picks for 2 starts, 30 steps
import numpy as np, sim
for E in (sim.load_fortunes(True), sim.load_synth()):
    N=E.shape[0]; nr=np.linalg.norm(E,axis=1)
    for s in (0, N//3):
        S=[s]; c=E[s].copy()
        for t in range(30):
            K=(E@c)/nr; K[S]=np.inf; x=int(np.argmin(K)); S.append(x); c+=E[x]
        # vectorised via sim internals
        En=E/nr[:,None]; C=E[[s]].copy(); ch=np.zeros(N,bool); ch[s]=True; S2=[s]
        for t in range(30):
            K=C@En.T; K[0,ch]=np.inf; x=int(np.argmin(K[0])); S2.append(x); ch[x]=True; C+=E[x]
        print(s, S==S2, S[:8])
