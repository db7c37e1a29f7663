#!/usr/bin/env python3
"""Agreement of two whole caches: ours (little-endian u32, N rows of N, from bench_gram --seqs)
and the PyTorch peer's (np.save of an N x N int array, from torch_diversity.py --out).
Prints identical rows and the common-prefix lengths (SPEC §Exactness 3: reported, not promised)."""
import sys
import numpy as np

ours_path, peer_path, label = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
peer = np.load(peer_path).astype(np.int64)
n = peer.shape[0]
ours = np.fromfile(ours_path, dtype="<u4").astype(np.int64).reshape(-1, peer.shape[1])[:n]
diff = ours != peer
same_rows = int((~diff.any(axis=1)).sum())
first = np.where(diff.any(axis=1), diff.argmax(axis=1), peer.shape[1])
print(f"{label}: {same_rows} of {n} sequences identical to the torch gram peer; "
      f"common prefix min {first.min()}, median {int(np.median(first))}, mean {first.mean():.0f} "
      f"of {peer.shape[1]}")
