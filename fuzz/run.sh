#!/usr/bin/env bash
# Runs one cargo-fuzz target (or all three, one after the other) for a while.
#
#   fuzz/run.sh [TARGET|all] [SECONDS]      (default: all, 60 seconds each)
#
# Seeds under fuzz/seeds/<target>/ (committed) are copied into fuzz/corpus/<target>/ (ignored by
# git), which libFuzzer then grows. Build output goes under the ignored /target/fuzz. Crashes land
# in fuzz/artifacts/<target>/. Needs the nightly toolchain and `cargo install cargo-fuzz --locked`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/../target/fuzz}"
targets=(policy_parse canonicalize fork_allowlist)
which="${1:-all}"
seconds="${2:-60}"
if [[ "$which" != all ]]; then targets=("$which"); fi
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    cp -n "seeds/$t"/* "corpus/$t/"
    cargo +nightly fuzz run "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
done
