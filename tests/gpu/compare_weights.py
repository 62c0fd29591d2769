#!/usr/bin/env python3
"""Largest |a - b| / (1 + |a|) over every tensor of two psync exports.

Usage: compare_weights.py A.safetensors B.safetensors [TOLERANCE]
Prints the figure; exits 1 when it exceeds TOLERANCE (if given), 2 when the
files do not hold the same tensors. Needs numpy only.
"""
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name} is {t['dtype']}, expected F32")
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(body[begin:end], dtype="<f4").reshape(t["shape"])
    return tensors


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    a, b = load(sys.argv[1]), load(sys.argv[2])
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        print(f"different tensors: {sorted(a)} vs {sorted(b)}")
        sys.exit(2)
    per_tensor = {k: float(np.max(np.abs(a[k].astype(np.float64) - b[k]) / (1 + np.abs(a[k]))))
                  for k in a}
    name = max(per_tensor, key=per_tensor.get)
    worst = per_tensor[name]
    print(f"largest |a - b| / (1 + |a|) = {worst:.3g} (in {name}) over "
          f"{sum(t.size for t in a.values())} weights")
    if len(sys.argv) == 4 and worst > float(sys.argv[3]):
        print(f"above the tolerance {sys.argv[3]}")
        sys.exit(1)


if __name__ == "__main__":
    main()
