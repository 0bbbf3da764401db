#!/usr/bin/env bash
# Redisson interop: a Java program using real Redisson (from Maven Central, interop/redisson) and
# lockkit in `redisson_compat` mode (examples/interop_peer.rs) contend for the same names:
#   mutex  RFencedLock (RLock's layout + token counter) vs the lockkit mutex,
#   fair   RFairLock vs the lockkit mutex in fair mode (one queue for both sides),
#   rw     RReadWriteLock vs the lockkit read-write lock, readers and writers on both sides,
#   sem    RSemaphore vs the lockkit semaphore (PERMITS permits).
# Passes when no hold ever overlaps a conflicting one (a shared counter in Redis: no writer with
# anyone else, never more than PERMITS permit holders), every hold completes, mutex tokens strictly
# increase across both sides, and each side wakes quickly when the other releases (pub/sub, not
# the 30 s lease or the 1 s waiter heartbeat): per direction, hand-off p50 and p90 <= 100 ms and
# max <= 1000 ms. And fairorder: while Redisson holds a fair lock, a lockkit, a Redisson and a
# lockkit waiter queue in turn, and must get the lock in that order.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

if [ -z "${LOCKKIT_TEST_REDIS_URL:-}" ]; then
    echo "redisson-interop: LOCKKIT_TEST_REDIS_URL not set; skipping" >&2
    exit 0
fi
if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
    # Debian's packages; Redisson itself comes from Maven Central below.
    command -v apt-get >/dev/null || { echo "redisson-interop: java/mvn missing and no apt-get" >&2; exit 1; }
    SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)
    $SUDO apt-get update -q >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jdk-headless maven >&2
fi

ITER=${LOCKKIT_INTEROP_ITERATIONS:-60}
URL=${LOCKKIT_TEST_REDIS_URL%%\?*}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The pom's Redisson version, or LOCKKIT_REDISSON_VERSION to check another one by hand.
VERSION=${LOCKKIT_REDISSON_VERSION:-$(sed -n 's:.*<redisson.version>\(.*\)</redisson.version>.*:\1:p' interop/redisson/pom.xml)}
# A fresh dependency directory: jars of another Redisson must not stay on the classpath.
rm -rf interop/redisson/target/dependency
(cd interop/redisson && mvn -q -B -Dstyle.color=never -Dredisson.version="$VERSION" package dependency:copy-dependencies -DincludeScope=runtime >"$WORK/mvn.log" 2>&1) ||
    { cat "$WORK/mvn.log" >&2; exit 1; }
CP="interop/redisson/target/classes:interop/redisson/target/dependency/*"
# Other crates have an example of the same name, and cargo puts them all at one path: copy ours
# right after building it.
cargo build -q -p lockkit-redis --all-features --example interop_peer
PEER="$WORK/lockkit-redis-interop-peer"
cp target/debug/examples/interop_peer "$PEER"

# run MODE WORKERS ITER PERMITS: both sides with WORKERS workers of ITER holds each.
run() {
    local mode=$1 workers=$2 iter=$3 permits=$4
    local name="lockkit-interop-$mode-$$-$RANDOM" dir="$WORK/$mode" rc=0
    mkdir -p "$dir"
    local t0 t1 jpid
    t0=$(date +%s)
    timeout 120 java -cp "$CP" lockkit.interop.Main "$mode" "$URL" "$name" "$workers" "$iter" "$permits" "$dir" \
        >"$dir/java.out" 2>&1 &
    jpid=$!
    timeout 120 "$PEER" "$mode" "$URL" "$name" "$workers" "$iter" "$permits" "$dir" >"$dir/rust.out" 2>&1 || rc=$?
    wait "$jpid" || rc=$?
    t1=$(date +%s)
    if [ "$rc" -ne 0 ]; then
        echo "redisson-interop[$mode]: FAILED (rc=$rc)" >&2
        cat "$dir/java.out" "$dir/rust.out" >&2
        return 1
    fi
    # Lines: side kind acquired released token.
    cat "$dir/java.order" "$dir/rust.order" | sort -n -k3 >"$dir/holds"
    local total
    total=$(wc -l <"$dir/holds")
    if [ "$total" -ne $((2 * workers * iter)) ]; then
        echo "redisson-interop[$mode]: expected $((2 * workers * iter)) holds, got $total" >&2
        return 1
    fi
    if [ "$mode" = mutex ] &&
        ! awk 'NR > 1 && $5 <= tok { print "token " $5 " after " tok; bad = 1 } { tok = $5 } END { exit bad }' "$dir/holds" >&2; then
        echo "redisson-interop[mutex]: fencing tokens do not strictly increase across the sides" >&2
        return 1
    fi
    # Hand-offs: an acquire (by a writer, mutex or permit holder, or a reader right after a
    # writer) whose most recent preceding release came from the other side; the gap is how long
    # the waiting side took to notice.
    awk '{ print $4, 0, $1, $2; print $3, 1, $1, $2 }' "$dir/holds" | sort -n -k1,1 -k2,2 |
        awk '$2 == 0 { rel = $1; rside = $3; rkind = $4; next }
             rside != "" && rside != $3 && ($4 != "r" || rkind == "w") { print rside "->" $3, $1 - rel }' \
            >"$dir/gaps"
    local ok=0 summary=""
    for dirn in java-\>rust rust-\>java; do
        awk -v d="$dirn" '$1 == d { print $2 }' "$dir/gaps" | sort -n >"$dir/g"
        local n p50 p90 max
        n=$(wc -l <"$dir/g")
        p50=$(awk -v n="$n" 'NR == int((n + 1) / 2) { print; exit }' "$dir/g")
        p90=$(awk -v n="$n" 'NR == int((9 * n + 9) / 10) { print; exit }' "$dir/g")
        max=$(tail -n 1 "$dir/g")
        summary="$summary, $dirn: $n hand-offs, p50 ${p50:--} ms, p90 ${p90:--} ms, max ${max:--} ms"
        # Enough hand-offs to measure (their number depends on scheduling; slowness is what the
        # latency bounds catch).
        if [ "$n" -lt 8 ]; then
            echo "redisson-interop[$mode]: only $n hand-offs $dirn: too few to measure" >&2
            ok=1
        elif [ "$p50" -gt 100 ] || [ "$p90" -gt 100 ] || [ "$max" -gt 1000 ]; then
            echo "redisson-interop[$mode]: hand-offs $dirn too slow: not woken by pub/sub" >&2
            ok=1
        fi
    done
    echo "redisson-interop[$mode]: Redisson $VERSION vs lockkit, $total holds, no overlap$summary, $((t1 - t0)) s"
    return "$ok"
}

# fair_order: both sides step through one FIFO scenario (see examples/interop_peer.rs).
fair_order() {
    local name="lockkit-interop-fairorder-$$-$RANDOM" dir="$WORK/fairorder" rc=0 jpid
    mkdir -p "$dir"
    timeout 120 java -cp "$CP" lockkit.interop.Main fairorder "$URL" "$name" 1 1 0 "$dir" \
        >"$dir/java.out" 2>&1 &
    jpid=$!
    timeout 120 "$PEER" fairorder "$URL" "$name" 1 1 0 "$dir" >"$dir/rust.out" 2>&1 || rc=$?
    wait "$jpid" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "redisson-interop[fairorder]: FAILED (rc=$rc)" >&2
        cat "$dir/java.out" "$dir/rust.out" >&2
        return 1
    fi
    echo "redisson-interop[fairorder]: Redisson $VERSION vs lockkit, $(cat "$dir/rust.out")"
}

run mutex 1 "$ITER" 0
run fair 2 "$ITER" 0
fair_order
run rw 2 "$ITER" 0
run sem 2 "$ITER" 2
