"""How busy each host's link of an emulated cluster (tests/cluster/cluster.sh)
is while a command runs: reads the byte counters of the switch's ports every
millisecond or so, and prints, per time bin, each host's uplink / downlink
use as a percentage of the link's rate (headers included, so a saturated
TCP link reads about 95-100). The switch's port pI is host I's link.

    bash tests/cluster/cluster.sh up --name=lu --hosts=4 --rate=1gbit
    python3 tests/bench/link_use.py --cluster=lu --rate_mbit=1000 -- \\
        bazel-bin/tests/bench/psync_bench --hosts=lu-h0=...,... --num_servers=4 ...
    bash tests/cluster/cluster.sh down --name=lu

Needs root (it enters the switch's namespace). docs/performance.md ("Across
hosts") shows what it found.
"""

import argparse
import subprocess
import sys
import time


def counters(path):
    """Port name -> (bytes from its host, bytes to its host), from a
    /proc/PID/net/dev of a process in the switch's namespace."""
    out = {}
    for line in open(path).read().splitlines()[2:]:
        name, rest = line.split(":", 1)
        fields = rest.split()
        out[name.strip()] = (int(fields[0]), int(fields[8]))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", required=True, help="the cluster.sh --name")
    p.add_argument("--rate_mbit", type=float, required=True, help="each link's rate, Mbit/s")
    p.add_argument("--bin_ms", type=float, default=20)
    p.add_argument("--timeout", type=float, default=300, help="seconds, for the command")
    p.add_argument("command", nargs="+")
    args = p.parse_args()
    # A process in the switch's namespace: its /proc/PID/net/dev lists the
    # ports' counters, read without a fork per sample.
    anchor = subprocess.Popen(["ip", "netns", "exec", f"{args.cluster}-sw", "sleep",
                               str(int(args.timeout) + 10)])
    try:
        time.sleep(0.3)
        path = f"/proc/{anchor.pid}/net/dev"
        ports = sorted(k for k in counters(path) if k not in ("lo",) and not k.startswith("br"))
        if not ports:
            sys.exit(f"link_use: no ports in {args.cluster}-sw: is the cluster up?")
        samples = []
        run = subprocess.Popen(args.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
        deadline = time.monotonic() + args.timeout
        while run.poll() is None and time.monotonic() < deadline:
            samples.append((time.monotonic(), counters(path)))
            time.sleep(0.001)
        if run.poll() is None:
            run.kill()
        output = run.communicate()[0]
    finally:
        anchor.kill()
    print(output[-3000:], end="")
    bins = {}
    t0 = samples[0][0]
    for (_, a), (t, b) in zip(samples, samples[1:]):
        use = bins.setdefault(int((t - t0) * 1000 / args.bin_ms), {q: [0, 0] for q in ports})
        for q in ports:
            use[q][0] += b[q][0] - a[q][0]
            use[q][1] += b[q][1] - a[q][1]
    capacity = args.rate_mbit * 1e6 / 8 * args.bin_ms / 1000
    print(f"each port's host: up/down use, % of {args.rate_mbit:g} Mbit/s, per {args.bin_ms:g} ms")
    print("     ms " + " ".join(f"{q[:9]:>9}" for q in ports))
    for k in sorted(bins):
        use = bins[k]
        if sum(u + d for u, d in use.values()) < 0.05 * capacity:
            continue  # nothing moving: before and after the run
        print(f"{k * args.bin_ms:7.0f} " +
              " ".join(f"{100 * u / capacity:4.0f}/{100 * d / capacity:<4.0f}"
                       for u, d in (use[q] for q in ports)))
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
