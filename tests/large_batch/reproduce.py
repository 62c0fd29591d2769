#!/usr/bin/python3
"""Reproduces, through psync, what the articles psync grew from say about
large-batch training, and draws it (docs/large_batch.md).

(a) 4 devices x batch 32, 1 device x batch 32 x 4 accumulation steps and
    1 device x batch 128 train the same model: the largest weight
    difference over (1 + |w|) is printed for each pair.
(b) On Fashion-MNIST with the MLP, a global batch 8 times larger at the
    same learning rate loses accuracy over the same epochs; scaling the
    learning rate linearly with the batch, with a warmup, recovers it.
    Final test accuracies as a Markdown table, and a PNG of test accuracy
    and training loss against epochs.

Usage (from the repository root, after bazel build //deploy/local:psync_launch):
    /usr/bin/python3 tests/large_batch/reproduce.py --out /tmp/large_batch \
        [--png tests/large_batch/claims.png] [--epochs 5]
Needs Debian's python3-numpy and python3-matplotlib. Bounded: each run has
psync_launch's --timeout_s.
"""

import argparse
import csv
import json
import os
import struct
import subprocess
import sys

LAUNCH = "bazel-bin/deploy/local/psync_launch"


def launch(out, name, flags, timeout_s=600):
    """Runs psync_launch; returns the summary dict. Exits on failure."""
    summary = os.path.join(out, name + ".json")
    argv = [LAUNCH, f"--summary={summary}", f"--export_path={os.path.join(out, name)}.safetensors",
            f"--timeout_s={timeout_s}"] + flags
    print(f"== {name}: {' '.join(flags)}", flush=True)
    run = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=timeout_s + 60)
    for line in run.stdout.splitlines():
        if line.startswith("[worker 0] epoch"):
            print("   ", line[len("[worker 0] "):], flush=True)
    if run.returncode != 0:
        sys.exit(f"{name}: psync_launch exited {run.returncode}:\n{run.stdout[-3000:]}")
    with open(summary) as f:
        return json.load(f)


def weights(path):
    """The float32 values of a safetensors file, by tensor name."""
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype="<f4")
            for k, v in header.items() if k != "__metadata__"}


def largest_difference(a, b):
    import numpy as np
    wa, wb = weights(a), weights(b)
    return max(float(np.max(np.abs(wa[k] - wb[k]) / (1 + np.abs(wa[k])))) for k in wa)


def epochs_of(path):
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f) if row["kind"] == "epoch"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for runs, curves and the table")
    parser.add_argument("--png", help="where to write the plot (default: OUT/claims.png)")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if not os.access(LAUNCH, os.X_OK):
        sys.exit(f"{LAUNCH} missing: run bazel build //deploy/local:psync_launch first")

    # (a) the same model three ways, after 30 and after 100 steps.
    for steps in (30, 100):
        common = ["--num_servers=1", "--num_workers=1", f"--steps={steps}", "--deterministic",
                  "--seed=3", "--lr=0.05", "--momentum=0.9"]
        names = {k: f"{k}_{steps}" for k in ("devices4", "accum4", "batch128")}
        launch(args.out, names["devices4"], common + ["--devices=4", "--batch_per_device=32"])
        launch(args.out, names["accum4"], common + ["--devices=1", "--batch_per_device=32",
                                                    "--accumulation_steps=4"])
        launch(args.out, names["batch128"], common + ["--devices=1", "--batch_per_device=128"])
        w = lambda key: os.path.join(args.out, names[key] + ".safetensors")
        a1 = largest_difference(w("batch128"), w("devices4"))
        a2 = largest_difference(w("batch128"), w("accum4"))
        print(f"(a) {steps} steps, global batch 128: max |w - w'| / (1 + |w|) = {a1:.2e} "
              f"(4 devices x 32 vs 1 x 128), {a2:.2e} (1 x 32 x 4 micro-batches vs 1 x 128)")

    # (b) batch x8 at a fixed learning rate, then scaled with warmup.
    base_lr, base_batch = 0.02, 32
    job = ["--num_servers=1", "--num_workers=2", "--devices=1", f"--epochs={args.epochs}",
           "--seed=1", "--momentum=0.9", f"--lr={base_lr}", "--metrics_csv_every=1000"]
    steps_per_epoch = -(-60000 // 256)
    runs = [
        ("batch 32, lr 0.02", "small", ["--batch_per_device=16"]),
        ("batch 256, lr 0.02", "large", ["--batch_per_device=128"]),
        ("batch 256, lr 0.16 (linear)", "linear",
         ["--batch_per_device=128", "--lr_scaling=linear", f"--base_batch={base_batch}"]),
        ("batch 256, lr 0.16 (linear), warmup 1 epoch", "warmup",
         ["--batch_per_device=128", "--lr_scaling=linear", f"--base_batch={base_batch}",
          f"--warmup_steps={steps_per_epoch}"]),
    ]
    results = []
    for label, name, flags in runs:
        csv_path = os.path.join(args.out, name + ".csv")
        if os.path.exists(csv_path):
            os.remove(csv_path)  # a restarted worker 0 appends
        summary = launch(args.out, name, job + flags + [f"--metrics_csv={csv_path}"])
        results.append((label, name, summary, csv_path))

    table = ["| run | global batch | learning rate | steps | final test accuracy |",
             "|---|---|---|---|---|"]
    for label, name, s, _ in results:
        table.append(f"| {label} | {s['global_batch']} | {s['learning_rate_last']:g} | "
                     f"{s['steps']} | {s['test_accuracy']:.4f} |")
    text = "\n".join(table)
    print(text)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (acc, loss) = plt.subplots(1, 2, figsize=(11, 4))
    for label, _, _, csv_path in results:
        rows = epochs_of(csv_path)
        epochs = [int(float(r["epoch"])) for r in rows]
        acc.plot(epochs, [float(r["test_accuracy"]) for r in rows], marker="o", label=label)
        loss.plot(epochs, [float(r["loss"]) for r in rows], marker="o", label=label)
    acc.set(xlabel="epoch", ylabel="test accuracy", title="Fashion-MNIST, MLP: test accuracy")
    loss.set(xlabel="epoch", ylabel="training loss (worker 0, epoch mean)",
             title="training loss")
    for ax in (acc, loss):
        ax.grid(alpha=0.3)
    acc.legend(fontsize=8)
    fig.tight_layout()
    png = args.png or os.path.join(args.out, "claims.png")
    fig.savefig(png, dpi=90)
    print(f"plot: {png}")


if __name__ == "__main__":
    main()
