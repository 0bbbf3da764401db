#!/usr/bin/env bash
# Curator interop: Apache Curator's InterProcessMutex / InterProcessReadWriteLock /
# InterProcessSemaphoreV2 (with a SharedCount size) / LeaderLatch / LeaderSelector (Java, from
# interop/curator) and lockkit's ZooKeeper mutex / RW lock / semaphore / election (in the latch
# and the selector layout) contend for the same paths. Passes when neither side ever
# sees the other inside (marker files), both finish, the lock changes hands between the two sides
# often (each wakes when the other releases), and in an election each side's own API named the
# other side's leader while it led (a reader on each side; see interop_peer.rs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

if [ -z "${LOCKKIT_TEST_ZK_URL:-}" ]; then
    echo "curator-interop: LOCKKIT_TEST_ZK_URL not set; skipping" >&2
    exit 0
fi
for tool in java mvn; do
    command -v "$tool" >/dev/null || { echo "curator-interop: $tool not installed" >&2; exit 1; }
done

ITER=${LOCKKIT_INTEROP_ITERATIONS:-60}
HOSTS=${LOCKKIT_TEST_ZK_URL#zk://}
HOSTS=${HOSTS%%[/?]*}
PREFIX="interop-$$-$RANDOM"
URL="zk://$HOSTS?prefix=$PREFIX"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

(cd interop/curator && mvn -q -B -Dstyle.color=never package dependency:copy-dependencies -DincludeScope=runtime >"$WORK/mvn.log" 2>&1) ||
    { cat "$WORK/mvn.log" >&2; exit 1; }
CP="interop/curator/target/classes:interop/curator/target/dependency/*"
cargo build -q -p lockkit-zk --example interop_peer
PEER=target/debug/examples/interop_peer

run_mode() { # mode name path
    local mode=$1 name=$2 path=$3 dir="$WORK/$1" rc=0 t0 t1
    mkdir -p "$dir/readers"
    t0=$(date +%s)
    timeout 120 java -cp "$CP" lockkit.interop.Main "$mode" "$HOSTS" "$path" "$ITER" "$dir" >"$dir/java.out" 2>&1 &
    local jpid=$!
    timeout 120 "$PEER" "$mode" "$URL" "$name" "$ITER" "$dir" >"$dir/rust.out" 2>&1 || rc=$?
    wait "$jpid" || rc=$?
    t1=$(date +%s)
    if [ "$rc" -ne 0 ]; then
        echo "curator-interop[$mode]: FAILED (rc=$rc)" >&2
        cat "$dir/java.out" "$dir/rust.out" >&2
        return 1
    fi
    local total handoffs
    total=$(wc -l <"$dir/order")
    handoffs=$(awk 'NR > 1 && $0 != prev { n++ } { prev = $0 } END { print n + 0 }' "$dir/order")
    echo "curator-interop[$mode]: $total exclusive holds, $handoffs hand-offs between Curator and lockkit, no overlap, $((t1 - t0)) s"
    grep -h "named" "$dir/java.out" "$dir/rust.out" | sed "s/^/curator-interop[$mode]: /" || true
    if [ "$total" -ne $((2 * ITER)) ] || [ "$handoffs" -lt $((ITER / 2)) ]; then
        echo "curator-interop[$mode]: too few hand-offs: the sides did not wake each other" >&2
        return 1
    fi
}

NAME="shared-$RANDOM"
mapfile -t PATHS < <("$PEER" path "$URL" "$NAME")
run_mode mutex "$NAME" "${PATHS[0]}"
run_mode rw "$NAME" "${PATHS[1]}"
run_mode semaphore "$NAME" "${PATHS[3]}"
run_mode latch "$NAME" "${PATHS[2]}"
# LeaderSelector's nodes are its InterProcessMutex's: lockkit campaigns in that layout when asked.
URL="$URL&election_layout=selector" run_mode selector "$NAME" "${PATHS[2]}"
