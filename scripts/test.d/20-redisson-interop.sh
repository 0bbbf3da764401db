#!/usr/bin/env bash
# Redisson interop: Redisson's RLock (Java, real Redisson from Maven Central, interop/redisson)
# and lockkit's Redis mutex in `redisson_compat` mode contend for the same lock name. Passes when
# neither side ever sees the other inside (a shared counter in Redis), both finish, the lock
# changes hands between the two sides often, and a hand-off wakes the waiting side quickly (pub/sub,
# not the 30 s lease).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

if [ -z "${LOCKKIT_TEST_REDIS_URL:-}" ]; then
    echo "redisson-interop: LOCKKIT_TEST_REDIS_URL not set; skipping" >&2
    exit 0
fi
for tool in java mvn; do
    command -v "$tool" >/dev/null || { echo "redisson-interop: $tool not installed" >&2; exit 1; }
done

ITER=${LOCKKIT_INTEROP_ITERATIONS:-100}
URL=${LOCKKIT_TEST_REDIS_URL%%\?*}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

(cd interop/redisson && mvn -q -B -Dstyle.color=never package dependency:copy-dependencies -DincludeScope=runtime >"$WORK/mvn.log" 2>&1) ||
    { cat "$WORK/mvn.log" >&2; exit 1; }
CP="interop/redisson/target/classes:interop/redisson/target/dependency/*"
cargo build -q -p lockkit-redis --example interop_peer
PEER=target/debug/examples/interop_peer

NAME="lockkit-interop-$$-$RANDOM"
dir="$WORK/mutex"
mkdir -p "$dir"
rc=0
t0=$(date +%s)
timeout 120 java -cp "$CP" lockkit.interop.Main mutex "$URL" "$NAME" "$ITER" "$dir" >"$dir/java.out" 2>&1 &
jpid=$!
timeout 120 "$PEER" mutex "$URL" "$NAME" "$ITER" "$dir" >"$dir/rust.out" 2>&1 || rc=$?
wait "$jpid" || rc=$?
t1=$(date +%s)
if [ "$rc" -ne 0 ]; then
    echo "redisson-interop[mutex]: FAILED (rc=$rc)" >&2
    cat "$dir/java.out" "$dir/rust.out" >&2
    exit 1
fi
# Hand-offs between the sides, and how long the waiting side took to get the lock after the
# other released it (acquired - previous released, over hand-offs only).
sort -n -k2 "$dir/order" >"$dir/sorted"
awk 'NR > 1 && $1 != side { print $2 - rel } { side = $1; rel = $3 }' "$dir/sorted" | sort -n >"$dir/gaps"
total=$(wc -l <"$dir/sorted")
handoffs=$(wc -l <"$dir/gaps")
p50=$(awk -v n="$handoffs" 'NR == int((n + 1) / 2) { print; exit }' "$dir/gaps")
max=$(tail -n 1 "$dir/gaps")
p50=${p50:--1}
max=${max:--1}
echo "redisson-interop[mutex]: $total exclusive holds, $handoffs hand-offs between Redisson $(sed -n 's:.*<redisson.version>\(.*\)</redisson.version>.*:\1:p' interop/redisson/pom.xml) and lockkit, no overlap, hand-off wake-up p50 ${p50} ms, max ${max} ms, $((t1 - t0)) s"
if [ "$total" -ne $((2 * ITER)) ]; then
    echo "redisson-interop[mutex]: expected $((2 * ITER)) holds" >&2
    exit 1
fi
if [ "$handoffs" -lt $((ITER / 2)) ]; then
    echo "redisson-interop[mutex]: too few hand-offs: the sides did not wake each other" >&2
    exit 1
fi
if [ "$p50" -gt 100 ] || [ "$max" -gt 1000 ]; then
    echo "redisson-interop[mutex]: hand-offs too slow (p50 ${p50} ms, max ${max} ms): not woken by pub/sub" >&2
    exit 1
fi
