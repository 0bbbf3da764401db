#!/usr/bin/env bash
# A short, bounded cargo-fuzz run of every target in fuzz/ (URL, config and lock-name parsing),
# starting from the committed seed corpus. Needs the nightly toolchain (installed with rustup's
# minimal profile if missing; stable with RUSTC_BOOTSTRAP=1 when that fails) and cargo-fuzz (installed with `cargo install --locked` if missing).
# New corpus entries go to a temporary directory; the committed corpus is only read.
#
#   LOCKKIT_FUZZ_SECONDS   seconds per target (default 20)
#   LOCKKIT_FUZZ_RUNS      maximum executions per target (default 2000000)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
seconds=${LOCKKIT_FUZZ_SECONDS:-20}
runs=${LOCKKIT_FUZZ_RUNS:-2000000}
jobs=${LOCKKIT_CARGO_JOBS:-2}

# cargo-fuzz passes -Z flags to rustc, which wants nightly. Without nightly (and no way to
# download it: rustup's own server is not a package registry), the stable compiler accepts them
# under RUSTC_BOOTSTRAP=1; the fuzzing itself is the same libFuzzer.
toolchain=+nightly
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: installing the nightly toolchain" >&2
    if ! rustup toolchain install nightly --profile minimal >&2; then
        echo "fuzz: no nightly toolchain; using stable with RUSTC_BOOTSTRAP=1" >&2
        toolchain=+stable
        export RUSTC_BOOTSTRAP=1
    fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked -j "$jobs" >&2 ||
        { echo "FAIL: could not install cargo-fuzz" >&2; exit 1; }
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/lockkit-fuzz.XXXXXX")
trap 'rm -rf -- "$scratch"' EXIT
targets=$(cargo "$toolchain" fuzz list --fuzz-dir fuzz)
[ -n "$targets" ] || { echo "FAIL: no fuzz targets in fuzz/" >&2; exit 1; }
# Build first, so that a target that no longer compiles (fuzz/ is outside the workspace: clippy
# does not see it) is reported as that, not as a crash.
cargo "$toolchain" fuzz build --fuzz-dir fuzz >"$scratch/build.log" 2>&1 || {
    tail -n 40 "$scratch/build.log" >&2
    echo "FAIL: the fuzz targets do not build" >&2
    exit 1
}
for t in $targets; do
    mkdir -p "$scratch/$t"
    echo "== fuzz $t: up to ${seconds}s / $runs runs" >&2
    # Seeds first (read-only), new inputs into the scratch corpus.
    cargo "$toolchain" fuzz run --fuzz-dir fuzz "$t" "$scratch/$t" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -runs="$runs" -max_len=512 -print_final_stats=1 \
        2>"$scratch/$t.log" || {
        tail -n 60 "$scratch/$t.log" >&2
        echo "FAIL: fuzz target $t found a crash (artifact under fuzz/artifacts/$t)" >&2
        exit 1
    }
    grep -E '^stat::number_of_executed_units' "$scratch/$t.log" >&2 || true
done
echo "ok: fuzz smoke run of: $(echo "$targets" | paste -sd " ")"
