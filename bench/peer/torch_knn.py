#!/usr/bin/env python3
"""The PyTorch peer for the similarity stage (issue 6): what a user would write instead of
diversity's k-NN, timed on the same data. torch.topk over a matmul, in query blocks.

  python3 torch_knn.py --table FILE --dim D [--n N] --k K|all [--metric cosine|ip|l2]
      [--queries self|FILE] [--block B] [--out IDS.npy]
  python3 torch_knn.py --random N,Q,D --k 100 [--seed 7] [--dump-table T.f32 --dump-queries Q.f32]

Prints one RESULT json line: seconds (wall, cuda.synchronize), shape, k. With --queries self
the item itself is excluded (the rankings workload). Ties: torch.topk's order (not specified).
"""
import argparse, json, time
import numpy as np
import torch


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", default="")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--n", type=int, default=0)
    ap.add_argument("--k", default="10")
    ap.add_argument("--metric", default="cosine")
    ap.add_argument("--queries", default="self")
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--random", default="")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dump-table", default="")
    ap.add_argument("--dump-queries", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if a.random:
        n, q, d = (int(x) for x in a.random.split(","))
        g = torch.Generator().manual_seed(a.seed)
        E = torch.rand(n, d, generator=g)
        Q = torch.rand(q, d, generator=g)
        if a.dump_table:
            E.numpy().astype("<f4").tofile(a.dump_table)
            Q.numpy().astype("<f4").tofile(a.dump_queries)
            print(f"wrote {n} x {d} and {q} x {d} float32")
            return
        self_q = False
    else:
        raw = np.fromfile(a.table, dtype="<f4").reshape(-1, a.dim)
        if a.n:
            raw = raw[: a.n]
        E = torch.from_numpy(raw.copy())
        if a.queries == "self":
            Q, self_q = E, True
        else:
            Q, self_q = torch.from_numpy(np.fromfile(a.queries, dtype="<f4").reshape(-1, a.dim).copy()), False
    E, Q = E.to(dev), Q.to(dev)
    n = E.shape[0]
    k = n - 1 if a.k == "all" else int(a.k)
    kk = min(n, k + 1) if self_q else min(n, k)
    largest = a.metric != "l2"
    if a.metric == "cosine":
        En = E / E.norm(dim=1, keepdim=True).clamp_min(1e-30)
        Qn = Q / Q.norm(dim=1, keepdim=True).clamp_min(1e-30)
    else:
        En, Qn = E, Q
    e2 = (E * E).sum(dim=1)

    def run():
        ids = []
        for s in range(0, Q.shape[0], a.block):
            q = Qn[s : s + a.block]
            sim = q @ En.t()
            if a.metric == "l2":
                sim = (q * q).sum(dim=1, keepdim=True) - 2 * sim + e2[None, :]
            if self_q:
                r = torch.arange(s, s + q.shape[0], device=dev)
                sim[torch.arange(q.shape[0], device=dev), r] = -float("inf") if largest else float("inf")
            if kk == n:
                idx = torch.argsort(sim, dim=1, descending=largest, stable=True)
            else:
                idx = torch.topk(sim, kk, dim=1, largest=largest).indices
            ids.append(idx[:, :k].int())
        return torch.cat(ids)

    run(); sync()  # warm-up
    t0 = time.perf_counter()
    ids = run()
    sync()
    t = time.perf_counter() - t0
    res = {"n": n, "d": E.shape[1], "queries": Q.shape[0], "k": k, "metric": a.metric,
           "seconds": t, "gpu": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
           "torch": torch.__version__}
    if a.out:
        np.save(a.out, ids.cpu().numpy())
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
