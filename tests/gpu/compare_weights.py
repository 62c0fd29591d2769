#!/usr/bin/env python3
"""Largest |a - b| / (1 + |a|) over every tensor of two psync exports.

Usage: compare_weights.py A.safetensors B.safetensors [TOLERANCE]
Prints the figure and the tensor it is in; exits 1 when it exceeds
TOLERANCE (if given), 2 when the files do not hold the same tensors. Needs
numpy only (the reader is tests/large_batch/reproduce.py's).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "large_batch"))
from reproduce import weights  # noqa: E402


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    a, b = weights(sys.argv[1]), weights(sys.argv[2])
    if a.keys() != b.keys() or any(a[k].size != b[k].size for k in a):
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
