#!/usr/bin/env bash
# A `lockkit bench` smoke run with tiny ops on mem://, a fresh file:// directory and every server
# URL in the environment (LOCKKIT_TEST_{REDIS,ZK,ETCD}_URL), in one run: it must print the table,
# write the HTML report, and see no exclusion violation. A server URL whose backend is not built
# yet (connect answers Unsupported) is left out with a message.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

cargo build -p lockkit-cli -j "${LOCKKIT_CARGO_JOBS:-2}"
LOCKKIT=target/debug/lockkit
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

urls=(--url mem:// --url "file://$work/locks")
for var in LOCKKIT_TEST_REDIS_URL LOCKKIT_TEST_ZK_URL LOCKKIT_TEST_ETCD_URL; do
    url=${!var:-}
    [ -n "$url" ] || continue
    # exit 69 = the backend answered Unsupported (not built yet): leave it out.
    set +e
    "$LOCKKIT" --url "$url" inspect lockkit-smoke-probe >/dev/null 2>"$work/probe.err"
    rc=$?
    set -e
    if [ "$rc" -eq 69 ] && grep -q "cannot connect" "$work/probe.err"; then
        echo "skipping $var: $(cat "$work/probe.err")"
        continue
    fi
    urls+=(--url "$url")
done

"$LOCKKIT" bench "${urls[@]}" --ops 60 --clients 3 --report "$work/report.html" | tee "$work/table.txt"
test -s "$work/report.html"
grep -q '<svg' "$work/report.html"
grep -q 'contended' "$work/table.txt"
"$LOCKKIT" bench --url mem:// --url "file://$work/locks" --ops 20 --scenario uncontended --json \
    >"$work/bench.json"
grep -q '"ops_per_sec"' "$work/bench.json"
echo "bench smoke: ok ($(( ${#urls[@]} / 2 )) backends)"
