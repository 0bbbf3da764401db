#!/usr/bin/env bash
# Run lockkit's whole test suite: fmt, clippy, then the tests against real Redis, ZooKeeper and
# etcd servers (started by scripts/services.sh and stopped again on exit), then scripts/test.d/*.sh.
#
#   scripts/test.sh                  everything (what CI runs, via .ci/run)
#   scripts/test.sh --quick          skip fmt and clippy (local iteration)
#   scripts/test.sh [--quick] -- ARGS   extra ARGS for the test binaries (e.g. a test name filter)
#
# Environment:
#   LOCKKIT_TEST_THREADS    --test-threads for the test binaries (default 2)
#   LOCKKIT_CARGO_JOBS      cargo -j (default 2)
#   LOCKKIT_KEEP_SERVICES=1 leave the servers running at the end (stop them with scripts/services.sh down)
#   plus everything scripts/services.sh reads (ports, state dir).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

QUICK=0
TEST_ARGS=()
while [ $# -gt 0 ]; do
    case $1 in
        --quick) QUICK=1 ;;
        --)
            shift
            TEST_ARGS=("$@")
            break
            ;;
        -h | --help)
            sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "test.sh: unknown argument '$1' (see --help)" >&2
            exit 2
            ;;
    esac
    shift
done

TEST_THREADS=${LOCKKIT_TEST_THREADS:-2}
JOBS=${LOCKKIT_CARGO_JOBS:-2}

# ---------------------------------------------------------------------------------------------
# sections with timing

now_us() {
    if [ -n "${EPOCHREALTIME:-}" ]; then
        echo "${EPOCHREALTIME//[!0-9]/}" # bash >= 5; strip the (locale dependent) decimal point
    else
        date +%s%6N
    fi
}

fmt_us() { # microseconds -> "12.3s" / "2m05.1s"
    local ds=$(($1 / 100000)) # tenths of a second
    if [ "$ds" -ge 600 ]; then
        printf '%dm%02d.%ds' $((ds / 600)) $((ds % 600 / 10)) $((ds % 10))
    else
        printf '%d.%ds' $((ds / 10)) $((ds % 10))
    fi
}

T_START=$(now_us)
SUMMARY=()

print_summary() {
    local line
    echo
    echo "==> summary"
    for line in "${SUMMARY[@]}"; do echo "    $line"; done
    echo "    total: $(fmt_us $(($(now_us) - T_START)))"
}

# section NAME CMD [ARGS...]: run CMD under a "==> NAME" header; stop the run if it fails.
section() {
    local name=$1 t0 rc=0 dt
    shift
    printf '\n==> %s\n' "$name"
    t0=$(now_us)
    "$@" || rc=$?
    dt=$(fmt_us $(($(now_us) - t0)))
    if [ "$rc" -eq 0 ]; then
        printf '<== %s: ok (%s)\n' "$name" "$dt"
        SUMMARY+=("$(printf '%-28s ok      %s' "$name" "$dt")")
    else
        printf '<== %s: FAILED with exit code %d (%s)\n' "$name" "$rc" "$dt"
        SUMMARY+=("$(printf '%-28s FAILED  %s' "$name" "$dt")")
        print_summary
        exit "$rc"
    fi
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "test.sh: need root (or sudo) to run: $*" >&2
        return 1
    fi
}

APT_UPDATED=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 || {
        echo "test.sh: missing $*, and no apt-get to install it" >&2
        return 1
    }
    if [ "$APT_UPDATED" -eq 0 ]; then
        as_root apt-get update -q || return
        APT_UPDATED=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

# ---------------------------------------------------------------------------------------------
# steps (functions return non-zero on failure; set -e does not apply inside `section`)

ensure_toolchain() {
    if ! command -v cargo >/dev/null 2>&1; then
        if [ -x "$HOME/.cargo/bin/cargo" ]; then
            export PATH="$HOME/.cargo/bin:$PATH"
        else
            echo "no Rust toolchain found; installing one with rustup"
            command -v curl >/dev/null 2>&1 || apt_install ca-certificates curl || return
            curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
                sh -s -- -y --profile minimal --component rustfmt,clippy || return
            export PATH="$HOME/.cargo/bin:$PATH"
        fi
    fi
    # rustc links through the system C compiler; a bare CI image may not have one.
    if ! command -v cc >/dev/null 2>&1; then
        apt_install gcc libc6-dev || return
    fi
    cargo --version || return
    if [ "$QUICK" -eq 0 ]; then
        local missing=()
        cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
        cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
        if [ ${#missing[@]} -gt 0 ]; then
            command -v rustup >/dev/null 2>&1 || {
                echo "missing ${missing[*]} and no rustup to add them" >&2
                return 1
            }
            rustup component add "${missing[@]}" || return
        fi
    fi
}

services_up() {
    local env_lines
    # Not `eval "$(...)"`: that would hide a failing `up` (eval of "" succeeds).
    env_lines=$(scripts/services.sh up) || return
    eval "$env_lines"
    echo "$env_lines"
}

stop_services() {
    local rc=$?
    if [ "${LOCKKIT_KEEP_SERVICES:-0}" = 1 ]; then
        echo "==> services left running (LOCKKIT_KEEP_SERVICES=1); stop them with: scripts/services.sh down"
    else
        echo "==> services down"
        scripts/services.sh down || true
    fi
    exit "$rc"
}

# ---------------------------------------------------------------------------------------------
# the run

section toolchain ensure_toolchain
# protoc (from protobuf-compiler) is needed to build etcd-client, so install before building.
section install scripts/services.sh install

if [ "$QUICK" -eq 0 ]; then
    section fmt cargo fmt --all --check
    section clippy cargo clippy --workspace --all-targets --all-features -j "$JOBS" -- -D warnings
else
    echo
    echo "==> fmt, clippy: skipped (--quick)"
fi

# Trap first, so a half-started set of servers is cleaned up too.
trap stop_services EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
section services services_up

export LOCKKIT_TEST_REQUIRE=redis,zk,etcd,top
section test cargo test --workspace --all-features -j "$JOBS" -- --test-threads="$TEST_THREADS" \
    ${TEST_ARGS[@]+"${TEST_ARGS[@]}"}

# Extra suites dropped in by later work (interop tests, bench smoke runs, ...), in sorted order;
# they inherit the LOCKKIT_TEST_* environment.
if [ -d scripts/test.d ]; then
    mapfile -t EXTRA < <(find scripts/test.d -maxdepth 1 -type f -name '*.sh' | LC_ALL=C sort)
    for f in ${EXTRA[@]+"${EXTRA[@]}"}; do
        if [ -x "$f" ]; then
            section "test.d/${f##*/}" "$f"
        else
            echo
            echo "==> test.d/${f##*/}: skipped (not executable)"
        fi
    done
fi

print_summary
echo "==> all passed"
