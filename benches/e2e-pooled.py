#!/usr/bin/env python3
"""The p50 and p99 of every create of a cell over all rounds together (issue 30, item 1).

    benches/e2e-pooled.py RUN_DIR

benches/e2e-admission.sh takes each cell's p99 round by round, 500 creates each: the fifth
slowest create, which moves by milliseconds from round to round on a shared machine. This reads
the latencies the load generator appended over every round (`latencies-ARM-MODE-IMAGES.txt` of
the separate cells, `paired-MODE-IMAGES.txt` and `paired-MODE-IMAGES.txt.NAMESPACE` of the paired
ones) and prints, per cell, the p50 and p99 of them all (2,500 creates with 5 rounds) and each
arm's difference to the arm with no webhook: `none` for the separate cells, `cost-exempt` (the
same seconds) for the paired ones, whose arms are pinhook warm, the webhook floor (a mutating and
a validating webhook that only answer), the floor's mutating webhook alone and, with E2E_COST_B,
pinhook B (`warm-b`). Nearest rank, as the load generator. Standard library only.
"""
import math
import os
import sys


def read(path):
    try:
        with open(path) as f:
            return sorted(float(line) for line in f if line.strip())
    except FileNotFoundError:
        return []


def pct(values, p):
    if not values:
        return float("nan")
    rank = math.ceil(p / 100 * len(values))
    return values[min(max(rank, 1), len(values)) - 1]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = sys.argv[1]
    cells = [("real", 1), ("real", 10), ("dry", 1), ("dry", 10)]
    print(f"{'cell':<16} {'arm':<18} {'n':>6} {'p50_ms':>8} {'p99_ms':>8} {'+p50_ms':>8} {'+p99_ms':>8}")
    for mode, images in cells:
        none = read(os.path.join(run, f"latencies-none-{mode}-{images}.txt"))
        for arm in ("none", "warm", "cold"):
            row(f"separate {mode} {images}", arm, read(os.path.join(run, f"latencies-{arm}-{mode}-{images}.txt")), none)
        base = os.path.join(run, f"paired-{mode}-{images}.txt")
        exempt = read(base + ".cost-exempt")
        row(f"paired {mode} {images}", "exempt", exempt, exempt)
        row(f"paired {mode} {images}", "warm", read(base), exempt)
        row(f"paired {mode} {images}", "floor", read(base + ".cost-floor"), exempt)
        row(f"paired {mode} {images}", "floor-mutate", read(base + ".cost-floor-mutate"), exempt)
        row(f"paired {mode} {images}", "warm-b", read(base + ".cost-warm-b"), exempt)


def row(cell, arm, values, base):
    if not values:
        return
    print(
        f"{cell:<16} {arm:<18} {len(values):>6} {pct(values, 50):>8.2f} {pct(values, 99):>8.2f} "
        f"{pct(values, 50) - pct(base, 50):>8.2f} {pct(values, 99) - pct(base, 99):>8.2f}"
    )


if __name__ == "__main__":
    main()
