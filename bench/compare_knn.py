#!/usr/bin/env python3
"""Agreement of two k-NN results: ours (little-endian i32, Q rows of K, from bench_knn --ids) and
the PyTorch peer's (np.save of a Q x k int array, from torch_knn.py --out). With --self, ours
holds k + 1 neighbours per row (the item itself among them), removed before comparing.
Prints identical rows and mean recall (|ours ∩ peer| / k)."""
import sys
import numpy as np

ours_path, peer_path = sys.argv[1], sys.argv[2]
self_q = "--self" in sys.argv
peer = np.load(peer_path).astype(np.int64)
q, k = peer.shape
ours = np.fromfile(ours_path, dtype="<i4").astype(np.int64)
kk = ours.size // q
ours = ours.reshape(q, kk)
if self_q:
    rows = [r[r != i][:k] for i, r in enumerate(ours)]
    ours = np.stack(rows)
else:
    ours = ours[:, :k]
same = int((ours == peer).all(axis=1).sum())
recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(ours, peer)])
print(f"{same} of {q} rows identical to the torch peer, mean recall {recall:.6f} (k = {k})")
