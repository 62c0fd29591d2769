#!/usr/bin/python3
"""Checks a psync_worker --trace file: it parses as Chrome trace-event JSON,
holds exactly the expected number of steps, and the events of each step
nest in and order within it:

  * every event of step N lies within the span "step N" (lane "step");
  * each device's "forward + backward" ends before "wait for the servers"
    ends, and "broadcast weights" starts after it ends;
  * every step starts at least one push-pull, with a reduce before it when
    there are several (CPU) devices and none with one, whose gradients go
    out as computed; and has a push-pull on each server lane, each within
    the step;
  * steps do not overlap, and come in order.

  check_trace.py TRACE.json STEPS SERVERS DEVICES   (exit 0, or 1 with the reason)
"""
import collections
import json
import sys


def fail(message):
    print(f"check_trace: {message}")
    sys.exit(1)


def main():
    path, steps, servers, devices = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with open(path) as f:
        trace = json.load(f)
    lanes = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    by_step = collections.defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_step[e["args"]["step"]].append(dict(e, lane=lanes[e["tid"]]))
    if len(by_step) != steps:
        fail(f"{len(by_step)} steps traced, expected {steps}")
    previous_end = None
    for step in sorted(by_step):
        events = by_step[step]
        spans = [e for e in events if e["name"] == f"step {step}" and e["lane"] == "step"]
        if len(spans) != 1:
            fail(f"step {step}: {len(spans)} 'step {step}' spans, expected 1")
        begin, end = spans[0]["ts"], spans[0]["ts"] + spans[0]["dur"]
        if previous_end is not None and begin < previous_end:
            fail(f"step {step} begins at {begin} us, before the previous step ended ({previous_end})")
        previous_end = end
        for e in events:
            # A server's push-pull is launched within the step; it completes
            # before the step's wait does.
            if e["ts"] < begin or e["ts"] + e["dur"] > end:
                fail(f"step {step}: '{e['name']}' on {e['lane']} [{e['ts']}, "
                     f"{e['ts'] + e['dur']}] is outside the step [{begin}, {end}]")
        def one(name, lane="step"):
            found = [e for e in events if e["name"] == name and e["lane"] == lane]
            if len(found) != 1:
                fail(f"step {step}: {len(found)} '{name}' on {lane}, expected 1")
            return found[0]
        wait, broadcast = one("wait for the servers"), one("broadcast weights")
        wait_end = wait["ts"] + wait["dur"]
        for d in range(devices):
            compute = one("forward + backward", f"device {d}")
            if compute["ts"] + compute["dur"] > wait_end:
                fail(f"step {step}: device {d}'s forward + backward ends after the wait")
        if broadcast["ts"] < wait_end:
            fail(f"step {step}: the broadcast starts before the wait ends")
        def on_reduce_lane(prefix):
            return any(e["lane"] == "reduce" and e["name"].startswith(prefix) for e in events)
        if not on_reduce_lane("start push-pull "):
            fail(f"step {step}: no push-pull started")
        if on_reduce_lane("reduce ") != (devices > 1):
            fail(f"step {step}: {'a' if devices == 1 else 'no'} reduce with {devices} device(s)")
        for s in range(servers):
            pushes = [e for e in events if e["lane"] == f"server {s}"]
            if not pushes:
                fail(f"step {step}: no push-pull on server {s}")
            for p in pushes:
                if p["ts"] + p["dur"] > wait_end:
                    fail(f"step {step}: a push-pull on server {s} ends after the wait")
    print(f"check_trace: {steps} steps, {servers} servers, {devices} devices: ok")


if __name__ == "__main__":
    main()
