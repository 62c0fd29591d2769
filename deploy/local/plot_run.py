#!/usr/bin/python3
"""Draws training curves from psync_worker --metrics_csv files.

  /usr/bin/python3 deploy/local/plot_run.py run1.csv [run2.csv ...] --out curves.png

One PNG, four panels: training loss and accuracy (step rows, thin; epoch
means, dots) and test accuracy (epoch rows) against steps, and training
loss against wall time, one colour per file (labelled by file name, or by
--label, once per file). Needs Debian's python3-matplotlib (deploy/bootstrap.sh installs
it). Exit status 2 with a message for a missing or malformed file.
"""

import argparse
import csv
import os
import sys

COLUMNS = ["kind", "epoch", "step", "wall_s", "loss", "accuracy", "test_loss", "test_accuracy",
           "samples_per_s"]


def read_run(path):
    """Returns (steps, epochs): lists of dicts with numbers (None if empty)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            raise ValueError(f"{path}: header {reader.fieldnames}, expected {COLUMNS}")
        steps, epochs = [], []
        for line, row in enumerate(reader, start=2):
            try:
                values = {k: (float(v) if v != "" else None) for k, v in row.items() if k != "kind"}
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{line}: {e}") from None
            if row["kind"] == "step":
                steps.append(values)
            elif row["kind"] == "epoch":
                epochs.append(values)
            else:
                raise ValueError(f"{path}:{line}: kind '{row['kind']}', expected step or epoch")
    if not steps and not epochs:
        raise ValueError(f"{path}: no rows")
    return steps, epochs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", nargs="+", help="--metrics_csv files")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--label", action="append",
                        help="a file's name in the legend; once per file, in order")
    parser.add_argument("--title", default="psync training")
    args = parser.parse_args()
    labels = args.label or [os.path.basename(p) for p in args.csv]
    if len(labels) != len(args.csv):
        print(f"plot_run: {len(labels)} labels for {len(args.csv)} files", file=sys.stderr)
        return 2
    try:
        runs = [read_run(p) for p in args.csv]
    except (OSError, ValueError) as e:
        print(f"plot_run: {e}", file=sys.stderr)
        return 2

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (loss_ax, acc_ax), (test_ax, time_ax) = axes
    for (steps, epochs), label in zip(runs, labels):
        line = loss_ax.plot([s["step"] for s in steps], [s["loss"] for s in steps], lw=0.6,
                            alpha=0.5, label=f"{label} (steps)")[0]
        colour = line.get_color()
        loss_ax.plot([e["step"] for e in epochs], [e["loss"] for e in epochs], "o-", color=colour,
                     label=f"{label} (epoch mean)")
        acc_ax.plot([s["step"] for s in steps], [s["accuracy"] for s in steps], lw=0.6, alpha=0.5,
                    color=colour)
        acc_ax.plot([e["step"] for e in epochs], [e["accuracy"] for e in epochs], "o-",
                    color=colour, label=label)
        tested = [e for e in epochs if e["test_accuracy"] is not None]
        test_ax.plot([e["step"] for e in tested], [e["test_accuracy"] for e in tested], "o-",
                     color=colour, label=label)
        time_ax.plot([s["wall_s"] for s in steps], [s["loss"] for s in steps], lw=0.6,
                     color=colour, label=label)
    for ax, title, x in ((loss_ax, "training loss", "step"), (acc_ax, "training accuracy", "step"),
                         (test_ax, "test accuracy (end of each epoch)", "step"),
                         (time_ax, "training loss against wall time", "seconds")):
        ax.set_title(title)
        ax.set_xlabel(x)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
