#!/usr/bin/env python3
"""The Faiss peer of examples/bench_ivf.rs: faiss-cpu's k-means and IndexIVFFlat on the same
table, the same queries and the same exact ground truth (both written by bench_ivf with
--dump-queries / --dump-gt), with the same nlist, nprobe, k, iterations, seed and subsample cap.

  python3 bench/ivf_peer.py --make-clustered N,D,C,Q --out-table T.f32 --out-queries Q.f32 [--seed S]
  python3 bench/ivf_peer.py --table FILE.f32|FILE.npy --dim D [--n N] --queries Q.f32 --gt GT.i32
      --k 10 --nlist L --nprobe 1,4,16 [--metric l2|ip|cosine] [--iters 20] [--seed 1234]
      [--train-max 256] [--threads T] [--json OUT.json] [--label NAME] [--pq M [--refine F]]
      [--normalize] [--latency NPROBE [--calls C]] [--no-kmeans] [--no-full]

cosine: rows and queries normalised, inner-product index (what bench_ivf's cosine index
computes). Prints the k-means time and its final centroids' objective over all N rows (sum of
squared L2 distances to the nearest centroid, the number bench_ivf prints as "final over all
rows"), then per nprobe: search wall time, queries/s, 1-recall@1, 1-recall@k, k-recall@k
against the ground truth. One RESULT json line at the end. --no-kmeans skips the k-means run
alone (its time and objective then read 0), --no-full the nprobe = nlist row.

--pq M: IndexIVFPQ instead (M sub-quantizers x 8 bits on the residuals, the same coarse
quantizer and k-means parameters for the coarse and the sub-quantizer k-means), and with
--refine F (F > 1) also IndexRefineFlat over it with k_factor = F (exact re-rank of F x k).
--normalize scales rows and queries to unit length whatever the metric: `--metric l2
--normalize` is bench_ivf's cosine index as Faiss builds it with L2 (Faiss's inner-product IVF
normalises its coarse centroids, spherical k-means; bench_ivf's cosine index keeps the means, as
an L2 index of unit rows does, and IVF-PQ codes the residuals from those).

--latency NPROBE: also one search call's wall time for 1 and for 16 queries (the first) at
nprobe NPROBE (and re-ranked with --refine): median and 90th percentile over C calls (--calls,
200) after 20 of warm-up, as bench_ivf --latency measures; `latency` in the json.

--make-clustered writes a synthetic clustered table (N rows) and queries (Q rows) of dimension D:
C centres uniform in [-1, 1)^D, every row a centre (chosen uniformly) plus N(0, 0.25^2) noise
per coordinate, float32, seeded (default 1234).
"""
import argparse, json, time
import numpy as np
import faiss


def load(path, dim, n):
    if path.endswith(".npy"):
        x = np.load(path).astype(np.float32)
    else:
        x = np.fromfile(path, dtype="<f4").reshape(-1, dim)
    if n:
        x = x[:n]
    return np.ascontiguousarray(x)


def recall(got, gt):
    nq, k = gt.shape
    r1 = float(np.mean(got[:, 0] == gt[:, 0]))
    rk = float(np.mean([gt[i, 0] in got[i] for i in range(nq)]))
    kk = float(np.mean([len(set(got[i][got[i] >= 0]) & set(gt[i])) for i in range(nq)])) / k
    return r1, rk, kk


def make_clustered(spec, seed, out_table, out_queries):
    n, d, c, q = (int(v) for v in spec.split(","))
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-1, 1, size=(c, d)).astype(np.float32)
    for path, rows in ((out_table, n), (out_queries, q)):
        with open(path, "wb") as f:
            for b in range(0, rows, 100000):
                m = min(100000, rows - b)
                x = centres[rng.integers(0, c, size=m)] + rng.normal(0, 0.25, size=(m, d))
                f.write(x.astype("<f4").tobytes())
    print(f"clustered: {n} x {d} ({c} centres) -> {out_table}, {q} queries -> {out_queries}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-clustered", default="")
    ap.add_argument("--out-table", default="")
    ap.add_argument("--out-queries", default="")
    ap.add_argument("--table", default="")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--n", type=int, default=0)
    ap.add_argument("--queries", default="")
    ap.add_argument("--gt", default="")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--nlist", type=int, default=0)
    ap.add_argument("--nprobe", default="1,4,16")
    ap.add_argument("--metric", default="l2")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--train-max", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", default="")
    ap.add_argument("--label", default="workload")
    ap.add_argument("--pq", type=int, default=0)
    ap.add_argument("--refine", type=int, default=1)
    ap.add_argument("--normalize", action="store_true")
    ap.add_argument("--latency", type=int, default=0)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--no-kmeans", action="store_true")  # skip the k-means run alone
    ap.add_argument("--no-full", action="store_true")  # skip the nprobe = nlist row
    a = ap.parse_args()
    if a.make_clustered:
        make_clustered(a.make_clustered, a.seed, a.out_table, a.out_queries)
        return
    if not (a.table and a.queries and a.gt and a.nlist):
        ap.error("--table, --queries, --gt and --nlist are required")
    if a.threads:
        faiss.omp_set_num_threads(a.threads)
    x = load(a.table, a.dim, a.n)
    n, d = x.shape
    q = np.ascontiguousarray(np.fromfile(a.queries, dtype="<f4").reshape(-1, d))
    gt = np.fromfile(a.gt, dtype="<i4").reshape(q.shape[0], a.k)
    if a.metric == "cosine" or a.normalize:
        x, q = x.copy(), q.copy()
        faiss.normalize_L2(x)
        faiss.normalize_L2(q)
    ip = a.metric in ("ip", "cosine")
    print(f"{a.label}: {n} x {d}, {q.shape[0]} queries, k = {a.k}, {a.metric}, nlist {a.nlist}, "
          f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads")
    # k-means alone (L2, as bench_ivf's k-means), its final centroids scored over all rows.
    km_s, full_obj = 0.0, 0.0
    if not a.no_kmeans:
        km = faiss.Kmeans(d, a.nlist, niter=a.iters, seed=a.seed,
                          max_points_per_centroid=a.train_max, verbose=False)
        t0 = time.perf_counter()
        km.train(x)
        km_s = time.perf_counter() - t0
        flat = faiss.IndexFlatL2(d)
        flat.add(km.centroids)
        dist, _ = flat.search(x, 1)
        full_obj = float(dist.astype(np.float64).sum())
        print(f"k-means    wall {km_s:.3f} s  {a.iters} iterations  objective {km.obj[0]:.6e} -> "
              f"{km.obj[-1]:.6e}  final over all rows {full_obj:.6e}")
    quant = faiss.IndexFlatIP(d) if ip else faiss.IndexFlatL2(d)
    mt = faiss.METRIC_INNER_PRODUCT if ip else faiss.METRIC_L2
    if a.pq:
        index = faiss.IndexIVFPQ(quant, d, a.nlist, a.pq, 8, mt)
        index.pq.cp.niter = a.iters
        index.pq.cp.seed = a.seed
        index.pq.cp.max_points_per_centroid = a.train_max
    else:
        index = faiss.IndexIVFFlat(quant, d, a.nlist, mt)
    index.cp.niter = a.iters
    index.cp.seed = a.seed
    index.cp.max_points_per_centroid = a.train_max
    top = index
    if a.pq and a.refine > 1:
        top = faiss.IndexRefineFlat(index)
    t0 = time.perf_counter()
    top.train(x)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    top.add(x)
    add_s = time.perf_counter() - t0
    print(f"train      wall {train_s:.3f} s   add wall {add_s:.3f} s")
    rows = []
    factors = [1] + ([a.refine] if a.pq and a.refine > 1 else [])
    for npb in [int(v) for v in a.nprobe.split(",")] + ([] if a.no_full else [a.nlist]):
        index.nprobe = npb
        for f in factors:
            t0 = time.perf_counter()
            if f > 1:
                top.k_factor = f
                _, ids = top.search(q, a.k)
            else:
                _, ids = index.search(q, a.k)
            s = time.perf_counter() - t0
            r1, rk, kk = recall(ids, gt)
            print(f"nprobe {npb:>4} k_factor {f:>2} wall {s:.3f} s  {q.shape[0] / s:>8.0f} q/s  "
                  f"1-R@1 {r1:.4f}  1-R@{a.k} {rk:.4f}  {a.k}-R@{a.k} {kk:.4f}")
            rows.append({"nprobe": npb, "k_factor": f, "wall_s": s, "qps": q.shape[0] / s,
                         "recall1": r1, "recall_at_k": rk, "k_recall": kk})
    lat = []
    if a.latency:
        index.nprobe = a.latency
        for f in factors:
            if f > 1:
                top.k_factor = f
            search = top.search if f > 1 else index.search
            for nq in (1, 16):
                qs = np.ascontiguousarray(q[:nq])
                for _ in range(20):
                    search(qs, a.k)
                walls = []
                for _ in range(a.calls):
                    t0 = time.perf_counter()
                    search(qs, a.k)
                    walls.append(time.perf_counter() - t0)
                walls.sort()
                med, p90 = walls[a.calls // 2], walls[min(a.calls * 9 // 10, a.calls - 1)]
                what = f"faiss {'ivf-pq' if a.pq else 'ivf-flat'} nprobe {a.latency} k_factor {f}"
                print(f"latency {what} {nq:>2} queries  wall median {med * 1e3:.3f} ms  "
                      f"p90 {p90 * 1e3:.3f} ms")
                lat.append({"search": what, "queries": nq, "calls": a.calls,
                            "wall_median_s": med, "wall_p90_s": p90})
    res = {"label": a.label, "peer": "faiss-cpu " + faiss.__version__, "n": n, "dim": d,
           "index": "ivf-pq" if a.pq else "ivf-flat", "m": a.pq,
           "queries": int(q.shape[0]), "k": a.k, "metric": a.metric, "nlist": a.nlist,
           "kmeans_wall_s": km_s, "kmeans_objective_full": full_obj, "train_wall_s": train_s,
           "add_wall_s": add_s, "search": rows, "latency": lat}
    print("RESULT " + json.dumps(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
