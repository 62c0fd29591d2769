#!/usr/bin/env python3
"""psync across the hosts of an emulated cluster, against the link's bound
and gloo's all-reduce of the same bytes (what DDP does each step).

For each host count and model size, on one cluster from
tests/cluster/cluster.sh (a network namespace per host, every host's link
shaped to --rate each way and --delay):

- psync, co-located: a server and a worker on every host (as BytePS
  places them); each host's link carries 2 (N-1)/N of the model each way
  per step (its worker's pushes to the other servers and its server's
  answers to the other workers; its own share stays on the host);
- psync, separate: servers on half the hosts, workers on the other half;
  each link carries the whole model each way;
- gloo: torch.distributed.all_reduce on all N hosts, one rank each; a ring
  sends 2 (N-1)/N of the model each way per rank.

The bound of a placement is those bytes over --rate, plus one round trip
between two hosts (a push's gradients go out, the pull's weights come
back): 4 x --delay, since cluster.sh delays both ends of each link.
Each row also gives the CPU its processes spent per step over the step's
time, as cores busy: near the machine's core count the cores, not the
links, bound the run, and the row says so.

At the end, the ratios side by side: psync co-located against gloo on the
same hosts, and psync with servers on hosts of their own against gloo on
the workers' hosts alone (the same workers: BytePS' comparison, where
CPU-only machines are added to carry the servers).

Run through tests/bench/cluster_bench.sh, which builds and checks for root.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

import torch_bench  # beside this file; imports torch only in its workers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_rate(text):
    """A tc rate such as 2.5gbit or 800mbit, in bits per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", text)
    if not m:
        raise SystemExit(f"cluster_bench: --rate is '{text}', expected a tc rate such as 1gbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def parse_delay(text):
    """A tc delay such as 50us or 1ms, in seconds."""
    if text == "0":
        return 0.0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)", text)
    if not m:
        raise SystemExit(f"cluster_bench: --delay is '{text}', expected 0 or e.g. 50us, 1ms")
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


class Cluster:
    """The hosts of one cluster.sh cluster, removed on exit."""

    def __init__(self, script, name, hosts, rate, delay):
        self.script, self.name = script, name
        try:
            out = subprocess.run(["bash", script, "up", f"--name={name}", f"--hosts={hosts}",
                                  f"--rate={rate}", f"--delay={delay}"],
                                 check=True, capture_output=True, text=True, timeout=120).stdout
        except subprocess.SubprocessError:
            self.__exit__()  # what a failed or stopped `up` made
            raise
        self.hosts = [line.split() for line in out.splitlines() if line.startswith(name + "-h")]
        if len(self.hosts) != hosts:
            self.__exit__()
            raise SystemExit(f"cluster_bench: cluster.sh up printed {out!r}, expected {hosts} "
                             f"lines 'NAME-hI ADDRESS'")

    def ifname(self, host):
        """The host's interface holding its address (gloo binds it)."""
        netns, address = self.hosts[host]
        out = subprocess.run(["ip", "-n", netns, "-o", "-4", "addr", "show"], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if parts[3].split("/")[0] == address:
                return parts[1]
        raise SystemExit(f"cluster_bench: no interface of {netns} holds {address}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run(["bash", self.script, "down", f"--name={self.name}"], timeout=120)


def run_psync(args, cluster, servers_on, workers_on, mb):
    hosts = ",".join(f"{ns}={addr}" for ns, addr in cluster.hosts)
    cmd = [args.bench, f"--hosts={hosts}", f"--num_servers={len(servers_on)}",
           f"--num_workers={len(workers_on)}", f"--server_hosts={','.join(map(str, servers_on))}",
           f"--worker_hosts={','.join(map(str, workers_on))}", f"--model_mb={mb}",
           f"--tensors={args.tensors}", "--baselines=false", f"--runs={args.runs}",
           f"--steps={args.steps}", "--warmup=2"] + args.psync_flags.split()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout)
    for line in out.stdout.splitlines():
        if line.startswith("JSON "):
            figures = json.loads(line[5:])
            return figures["comm_median_ms"], figures["comm_cpu_ms"]
    raise RuntimeError(f"psync_bench failed ({out.returncode}):\n{out.stdout[-2000:]}"
                       f"\n{out.stderr[-2000:]}")


def run_ranks(args, cluster, what, script, flags):
    """Runs `script` (beside this file) as rank r of len(hosts) on host r, one
    thread each, gloo on the host's interface; `flags(rank)` are its own.
    Returns rank 0's output; raises naming `what` if a rank fails, and
    kills every rank still running past one shared --run_timeout."""
    procs = []
    try:
        for rank, (netns, _) in enumerate(cluster.hosts):
            env = dict(os.environ, GLOO_SOCKET_IFNAME=cluster.ifname(rank), OMP_NUM_THREADS="1",
                       OPENBLAS_NUM_THREADS="1")
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", netns, "/usr/bin/python3", os.path.join(HERE, script)]
                + flags(rank), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        deadline = time.monotonic() + args.run_timeout
        outs = [p.communicate(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"{what} rank failed ({p.returncode}): {err[-2000:]}")
    return outs[0][0]


def run_gloo(args, cluster, mb, port):
    n = len(cluster.hosts)
    out = run_ranks(args, cluster, "gloo", "gloo_allreduce.py", lambda rank: [
        f"--rank={rank}", f"--world={n}", f"--master={cluster.hosts[0][1]}:{port}",
        f"--mb={mb}", f"--steps={args.steps}", "--warmup=2"])
    figures = json.loads(out.strip().splitlines()[-1])
    return figures["median_ms"], figures["cpu_ms"]


WARMUP = 10  # steps every training row's timing leaves out


def launch(args, cluster, steps, flags):
    """Runs a co-located psync job across the cluster's hosts under
    `psync_launch --hosts` (a server and a worker on each, batch 32 per
    host, SGD with momentum 0.9, as DDP's); returns what it printed."""
    n = len(cluster.hosts)
    every = ",".join(map(str, range(n)))
    cmd = [args.launch, "--hosts=" + ",".join(f"{ns}={addr}" for ns, addr in cluster.hosts),
           "--host_cmd=ip netns exec {host} sh -c", f"--num_servers={n}", f"--num_workers={n}",
           f"--server_hosts={every}", f"--worker_hosts={every}", "--devices=1",
           "--batch_per_device=32", f"--steps={steps}", "--seed=1", "--lr=0.05", "--momentum=0.9",
           "--timeout_s=600"] + flags + args.psync_flags.split()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=660)
    if run.returncode != 0:
        # The launcher says which process failed, and its last line, on stdout.
        raise RuntimeError(f"psync_launch failed ({run.returncode}): {run.stdout[-1500:]}"
                           f"{run.stderr[-2000:]}")
    return run.stdout + run.stderr


def train_psync(args, cluster, model, steps):
    """samples/s of psync_worker training `model` across the cluster's hosts,
    timed as the torch workers are, from worker 0's --metrics_csv rows after
    its WARMUP-th step."""
    n = len(cluster.hosts)
    steps_csv = os.path.join(args.out, f"train_{model}_{n}.csv")
    if os.path.exists(steps_csv):
        os.remove(steps_csv)  # the worker appends
    launch(args, cluster, steps, [f"--model={model}", "--synthetic_samples=12800",
                                  f"--metrics_csv={steps_csv}"])
    return 32 * n * (steps - WARMUP) / torch_bench.csv_seconds(steps_csv, WARMUP, steps)


def train_psync_torch(args, cluster, model, steps):
    """samples/s of PyTorch workers (psync.torch, tests/bench/torch_bench.py's
    psync worker) training `model` through psync across the cluster's hosts,
    under `psync_launch --hosts --worker_cmd`; timed as DDP's is, after its
    WARMUP-th step."""
    n = len(cluster.hosts)
    worker = (f"OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 {args.python} "
              f"{os.path.join(HERE, 'torch_bench.py')} --worker=psync --model={model} "
              f"--steps={steps} --warmup={WARMUP} --global_batch={32 * n} --threads=1 --")
    out = launch(args, cluster, steps, ["--worker_cmd=" + worker])
    for line in out.splitlines():
        if "RESULT " in line:
            result = json.loads(line.split("RESULT ", 1)[1])
            if result["rank"] == 0:
                return samples_per_sec(model, "torch through psync", result, n, steps)
    raise RuntimeError(f"psync_launch --worker_cmd: no RESULT line from worker 0 in {out[-2000:]}")


def train_ddp(args, cluster, model, steps, port):
    """samples/s of torch DDP (gloo) training the same `model` on the same
    hosts, one rank each, the same global batch (tests/bench/torch_bench.py's
    DDP worker), timed after its WARMUP-th step."""
    n = len(cluster.hosts)
    out = run_ranks(args, cluster, "DDP", "torch_bench.py", lambda rank: [
        "--worker=ddp", f"--model={model}", f"--rank={rank}", f"--ranks={n}",
        f"--master={cluster.hosts[0][1]}", f"--port={port}", f"--steps={steps}",
        f"--warmup={WARMUP}", f"--global_batch={32 * n}", "--threads=1"])
    result = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return samples_per_sec(model, "DDP", json.loads(result[7:]), n, steps)


def samples_per_sec(model, what, result, n, steps):
    """Rank 0's samples/s from its torch_bench.py RESULT; prints its step in parts."""
    print(f"{model}, {what}: worker 0's step in parts (medians): forward "
          f"{1e3 * result['forward']:.2f} ms, backward {1e3 * result['backward']:.2f}, "
          f"the optimizer's step() {1e3 * result['step']:.2f}; its CPU "
          f"{1e3 * result['cpu']:.2f} ms a step", flush=True)
    return 32 * n * (steps - WARMUP) / result["seconds"]


def train_rows(args):
    """The demo's MLP and the CNN across --train_hosts hosts: psync (psync_worker, and
    torch workers through psync.torch) against DDP."""
    n = args.train_hosts
    print(f"training on {n} hosts, each link {args.rate} each way, global batch {32 * n}")
    rows = []
    with Cluster(args.cluster_sh, f"pct{os.getpid() % 10000}", n, args.rate, args.delay) as cl:
        for model, steps in (("mlp", 300), ("cnn", 40)):
            psync = train_psync(args, cl, model, steps)
            torch_psync = train_psync_torch(args, cl, model, steps)
            ddp = train_ddp(args, cl, model, steps, 29600)
            rows.append({"model": model, "hosts": n, "psync": psync, "psync_torch": torch_psync,
                         "ddp": ddp})
            print(f"{model}: psync_worker {psync:,.0f} samples/s, torch through psync "
                  f"{torch_psync:,.0f}, DDP (gloo) {ddp:,.0f}: psync_worker / DDP "
                  f"{psync / ddp:.2f}, torch through psync / DDP {torch_psync / ddp:.2f}",
                  flush=True)
    with open(os.path.join(args.out, "cluster_train.json"), "w") as f:
        json.dump({"rate": args.rate, "rows": rows}, f, indent=1)
    return 0


def row(hosts, workers, mb, kind, ms, cpu, bound):
    """One figure, printed as it is measured."""
    r = {"hosts": hosts, "workers": workers, "mb": mb, "kind": kind, "ms": ms, "cores": cpu / ms,
         "bound_ms": bound}
    what = kind if kind == "gloo" else f"psync {kind}"
    cpu_bound = r["cores"] > 0.9 * os.cpu_count()
    print(f"{hosts:>5} {mb:>6g} {what:<22} {ms:>9.1f} {bound:>9.1f} {ms / bound:>8.2f} "
          f"{r['cores']:>10.2f}{'  (cores bound it)' if cpu_bound else ''}", flush=True)
    return r


def bound_ms(bytes_each_way, rate_bps, delay_s):
    return 1e3 * (8 * bytes_each_way / rate_bps + 4 * delay_s)


def placements(n, kinds):
    """(kind, servers' hosts, workers' hosts, bytes each way per link / model bytes)."""
    out = []
    if "colocated" in kinds:
        out.append(("colocated", list(range(n)), list(range(n)), 2 * (n - 1) / n))
    if "separate" in kinds:
        servers = max(1, n // 2)
        # A worker's link carries the model; a server's, its share from
        # each of the workers: more than the model where they outnumber it.
        out.append(("separate", list(range(servers)), list(range(servers, n)),
                    max(1.0, (n - servers) / servers)))
    return out


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = sorted({r["mb"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4), squeeze=False)
    for ax, mb in zip(axes[0], sizes):
        for what, style in (("colocated", "o-"), ("separate", "s-"), ("gloo", "^-")):
            pts = sorted((r["hosts"], r["ms"]) for r in rows if r["mb"] == mb and r["kind"] == what)
            if pts:
                ax.plot(*zip(*pts), style, label=f"{what}" if what == "gloo" else f"psync {what}")
            bpts = sorted((r["hosts"], r["bound_ms"]) for r in rows
                          if r["mb"] == mb and r["kind"] == what)
            if bpts and what != "gloo":
                ax.plot(*zip(*bpts), ":", color=ax.lines[-1].get_color(), label=f"bound {what}")
        ax.set_title(f"{mb:g} MiB")
        ax.set_xlabel("hosts")
        ax.set_ylabel("ms per step")
        ax.set_xticks(sorted({r["hosts"] for r in rows}))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    # Stopped (cluster_bench.sh's timeout, Ctrl-C elsewhere), it still runs
    # the clusters' `down`: SIGTERM's default would skip every finally.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", default="2,4,8", help="host counts, e.g. 2,4,8")
    p.add_argument("--sizes", default="16,64,256", help="model sizes in MiB")
    p.add_argument("--placements", default="colocated,separate")
    p.add_argument("--rate", default="1gbit", help="each host's link, each way (tc rate)")
    p.add_argument("--delay", default="0", help="each host's link (tc delay; needs the kernel's "
                   "netem, which cluster.sh says if it lacks)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--tensors", type=int, default=4)
    p.add_argument("--gloo", type=int, default=1, help="0: no gloo rows")
    p.add_argument("--psync_flags", default="", help="more psync flags, for psync_bench and "
                   "(--train_hosts) psync_launch, e.g. '--chunk_kb=1024'")
    p.add_argument("--run_timeout", type=int, default=600, help="one configuration, seconds")
    p.add_argument("--out", default="cluster_bench_out", help="folder for the PNG and JSON")
    p.add_argument("--bench", default=os.path.join(ROOT, "bazel-bin/tests/bench/psync_bench"))
    p.add_argument("--cluster_sh", default=os.path.join(ROOT, "tests/cluster/cluster.sh"))
    p.add_argument("--launch", default=os.path.join(ROOT, "bazel-bin/deploy/local/psync_launch"))
    p.add_argument("--python", default="/usr/bin/python3",
                   help="the interpreter with torch that psync.torch was built for")
    p.add_argument("--train_hosts", type=int, default=0,
                   help="instead of push-pull steps: train the demo's MLP and the CNN on this "
                        "many hosts with psync_worker, with torch workers through psync and "
                        "with torch DDP, and compare samples/s")
    args = p.parse_args()
    rate, delay = parse_rate(args.rate), parse_delay(args.delay)
    os.makedirs(args.out, exist_ok=True)
    if args.train_hosts:
        if not 2 <= args.train_hosts <= 8:
            raise SystemExit(f"cluster_bench: --train_hosts is {args.train_hosts}, expected 2 to 8")
        return train_rows(args)
    try:
        host_counts = [int(v) for v in args.hosts.split(",")]
        sizes = [float(v) for v in args.sizes.split(",")]
    except ValueError:
        raise SystemExit(f"cluster_bench: --hosts '{args.hosts}' and --sizes '{args.sizes}' "
                         f"must be comma-separated numbers")
    if any(n < 2 or n > 8 for n in host_counts) or any(s <= 0 for s in sizes):
        raise SystemExit("cluster_bench: host counts must be 2 to 8, sizes above 0")
    kinds = set(args.placements.split(","))
    if not kinds <= {"colocated", "separate"}:
        raise SystemExit(f"cluster_bench: --placements is '{args.placements}', expected "
                         f"colocated and/or separate")
    rows = []
    print(f"each host's link: {args.rate} each way, {args.delay} delay; "
          f"{os.cpu_count()} cores in this machine")
    print(f"{'hosts':>5} {'MiB':>6} {'what':<22} {'ms/step':>9} {'bound ms':>9} {'/ bound':>8} "
          f"{'cores busy':>10}")
    for n in host_counts:
        name = f"pcb{os.getpid() % 10000}n{n}"
        with Cluster(args.cluster_sh, name, n, args.rate, args.delay) as cluster:
            for mb in sizes:
                model = mb * (1 << 20)
                for kind, servers_on, workers_on, share in placements(n, kinds):
                    ms, cpu = run_psync(args, cluster, servers_on, workers_on, mb)
                    rows.append(row(n, len(workers_on), mb, kind, ms, cpu,
                                    bound_ms(share * model, rate, delay)))
                if args.gloo:
                    ms, cpu = run_gloo(args, cluster, mb, 29500 + n)
                    rows.append(row(n, n, mb, "gloo", ms, cpu,
                                    bound_ms(2 * (n - 1) / n * model, rate, delay)))
    with open(os.path.join(args.out, "cluster_bench.json"), "w") as f:
        json.dump({"rate": args.rate, "delay": args.delay, "rows": rows}, f, indent=1)
    plot(rows, os.path.join(args.out, "cluster_bench.png"))
    print(f"wrote {args.out}/cluster_bench.json and cluster_bench.png")
    # Side by side, the ratios the targets name.
    for n in host_counts:
        for mb in sizes:
            by = {r["kind"]: r for r in rows if r["hosts"] == n and r["mb"] == mb}
            if "gloo" in by and "colocated" in by:
                print(f"{n} hosts, {mb:g} MiB: psync co-located / gloo "
                      f"{by['colocated']['ms'] / by['gloo']['ms']:.2f}"
                      + (f", separate / gloo {by['separate']['ms'] / by['gloo']['ms']:.2f}"
                         if "separate" in by else ""))
    # The same workers (BytePS' comparison): servers on hosts of their own
    # beside them, against gloo on the workers' hosts alone.
    ring = {(r["hosts"], r["mb"]): r for r in rows if r["kind"] == "gloo"}
    for sep in (r for r in rows if r["kind"] == "separate"):
        gloo = ring.get((sep["workers"], sep["mb"]))
        if gloo is not None:
            w = sep["workers"]
            print(f"{w} workers, {sep['mb']:g} MiB: psync with {sep['hosts'] - w} server host(s) "
                  f"beside them / gloo on their {w} hosts {sep['ms'] / gloo['ms']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
