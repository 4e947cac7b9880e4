#!/usr/bin/env python3
"""What the apiserver does between pinhook's two webhook calls of one create (issue 30, item 1).

    benches/webhook-gaps.py PINHOOK_LOG [MIN_CREATES]

Reads pinhook's text log (one `review endpoint=...` line per review, written when the review is
decided) and pairs each mutating review with the validating review of the same create that
follows it (the next `endpoint=validate` line in the same namespace). The time between the two
lines is the apiserver's work after pinhook's mutating answer left it: reading the answer,
decoding and applying its JSON Patch, the rest of admission, and encoding the validating
AdmissionReview; plus pinhook reading and deciding the second review (its own
`admission_review_duration`, 0.05-0.1 ms). Prints, per namespace, dry run and images pinned by
the mutating review, the count and the p50 / p90 / p99 / max of that gap in milliseconds (groups
with fewer than MIN_CREATES pairs, default 100, are left out). One create at a time
(benches/e2e-admission.sh) keeps the pairing exact. Standard library only.
"""
import re
import sys
from datetime import datetime

LINE = re.compile(
    r"^(\S+)\s+INFO .*review endpoint=(\w+) .*namespace=(\S+) .*dry_run=(\w+) .*pinned=(\d+) "
)


def seconds(stamp):
    # RFC 3339 with microseconds and Z, as pinhook's text log writes it
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def percentile(sorted_values, p):
    rank = max(1, min(len(sorted_values), int(-(-p * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    minimum = int(sys.argv[2]) if len(sys.argv) == 3 else 100
    gaps = {}
    pending = None
    with open(sys.argv[1], encoding="utf-8", errors="replace") as log:
        for line in log:
            m = LINE.match(line)
            if not m:
                continue
            stamp, endpoint, namespace, dry_run, pinned = m.groups()
            if endpoint == "mutate":
                pending = (seconds(stamp), namespace, dry_run, int(pinned))
            elif endpoint == "validate" and pending and pending[1] == namespace:
                key = (namespace, dry_run, pending[3])
                gaps.setdefault(key, []).append((seconds(stamp) - pending[0]) * 1000)
                pending = None
    print(f"{'namespace':<12} {'dry_run':<7} {'pinned':>6} {'creates':>7} "
          f"{'p50_ms':>7} {'p90_ms':>7} {'p99_ms':>7} {'max_ms':>7}")
    for (namespace, dry_run, pinned), values in sorted(gaps.items()):
        if len(values) < minimum:
            continue
        values.sort()
        print(f"{namespace:<12} {dry_run:<7} {pinned:>6} {len(values):>7} "
              f"{percentile(values, 50):>7.2f} {percentile(values, 90):>7.2f} "
              f"{percentile(values, 99):>7.2f} {values[-1]:>7.2f}")


if __name__ == "__main__":
    main()
