#!/usr/bin/env python3
"""Prints criterion's estimates as a Markdown table: median, 95% CI of the median, median
absolute deviation (MAD) and mean, for every benchmark of the last `cargo bench` run.

Usage: python3 scripts/summarize.py [CRITERION_DIR]
(default: $CARGO_TARGET_DIR/criterion, else target/criterion)."""

import json
import os
import sys


def fmt(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


def main():
    default = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "criterion")
    root = sys.argv[1] if len(sys.argv) > 1 else default
    rows = []
    for dirpath, _, files in os.walk(root):
        if os.path.basename(dirpath) == "new" and "estimates.json" in files:
            with open(os.path.join(dirpath, "benchmark.json")) as f:
                bench_id = json.load(f)["full_id"]
            with open(os.path.join(dirpath, "estimates.json")) as f:
                e = json.load(f)
            rows.append((bench_id, e))
    print("| benchmark | median | 95% CI of median | MAD | mean |")
    print("|---|---:|---:|---:|---:|")
    for bench_id, e in sorted(rows):
        m = e["median"]
        ci = m["confidence_interval"]
        print(
            f"| `{bench_id}` | {fmt(m['point_estimate'])} | "
            f"{fmt(ci['lower_bound'])} – {fmt(ci['upper_bound'])} | "
            f"{fmt(e['median_abs_dev']['point_estimate'])} | {fmt(e['mean']['point_estimate'])} |"
        )


if __name__ == "__main__":
    main()
