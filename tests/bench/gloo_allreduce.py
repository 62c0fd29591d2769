#!/usr/bin/env python3
"""One rank of torch.distributed.all_reduce on gloo, as DDP does each step.

Every rank runs this with the same --world, --master and --mb; rank 0 prints
one JSON line: the median and p90 of the timed all-reduces, in ms. The
tensor is float32, --mb MiB, all-reduced whole (DDP cuts it into 25 MiB
buckets; whole, gloo's ring has the fewest rounds).

  gloo_allreduce.py --rank=0 --world=2 --master=10.77.1.1:29500 --mb=16
"""
import argparse
import json
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--master", required=True, help="ADDRESS:PORT of rank 0")
    parser.add_argument("--mb", type=float, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout_s", type=int, default=120)
    a = parser.parse_args()
    if a.world < 2 or not 0 <= a.rank < a.world or a.mb <= 0 or a.steps < 1 or a.warmup < 0:
        print(f"gloo_allreduce: bad flags {vars(a)}: expected --world >= 2, 0 <= --rank < "
              f"--world, --mb > 0, --steps >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    import datetime
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=a.timeout_s))
    x = torch.ones(int(a.mb * (1 << 20) / 4), dtype=torch.float32)
    times = []
    cpu = 0.0
    for step in range(a.warmup + a.steps):
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        dist.all_reduce(x)
        if step >= a.warmup:
            times.append((time.perf_counter() - start) * 1e3)
            cpu += (time.process_time() - cpu_start) * 1e3
    # Every rank's time is the slowest one's: the step waits for it. The
    # CPU is every rank's (this process's threads, user and system).
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    c = torch.tensor([cpu / a.steps], dtype=torch.float64)
    dist.all_reduce(c)
    if a.rank == 0:
        ms = sorted(t.tolist())
        print(json.dumps({"world": a.world, "mb": a.mb, "median_ms": round(statistics.median(ms), 3),
                          "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3),
                          "cpu_ms": round(c.item(), 3)}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
