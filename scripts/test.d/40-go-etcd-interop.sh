#!/usr/bin/env bash
# Go interop: Go's client/v3/concurrency.Mutex (interop/go-etcd) and lockkit's etcd mutex
# (lockkit-etcd/examples/interop_peer.rs) contend for the same prefix. Both append enter/exit
# records to one file while they hold the lock; this checks that no two holders were ever inside
# at once and that the lock was handed over in both directions (each side wakes when the other
# releases). Needs `go` (modules come through the Go module proxy) and LOCKKIT_TEST_ETCD_URL.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

URL=${LOCKKIT_TEST_ETCD_URL:?LOCKKIT_TEST_ETCD_URL is not set (eval "\$(scripts/services.sh up)")}
ENDPOINTS=${URL#*://}
ENDPOINTS=${ENDPOINTS#*@}
ENDPOINTS=${ENDPOINTS%%\?*}
ENDPOINTS=${ENDPOINTS%%/*}
ITERS=${LOCKKIT_INTEROP_ITERS:-25}
HOLD_MS=${LOCKKIT_INTEROP_HOLD_MS:-20}

command -v go >/dev/null 2>&1 || {
    echo "go-etcd-interop: the go toolchain is required (https://go.dev/dl/)" >&2
    exit 1
}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd interop/go-etcd && go build -o "$WORK/go-etcd-peer" .)
cargo build -q -p lockkit-etcd --example interop_peer

NAME=interop-$$-$RANDOM
LOG=$WORK/holders.log
: >"$LOG"
"$WORK/go-etcd-peer" interop -endpoints "$ENDPOINTS" -prefix "lockkit/$NAME" -log "$LOG" \
    -iters "$ITERS" -hold "${HOLD_MS}ms" &
GO_PID=$!
cargo run -q -p lockkit-etcd --example interop_peer -- "$URL" "$NAME" "$LOG" "$ITERS" "$HOLD_MS" &
RS_PID=$!
rc=0
wait "$GO_PID" || rc=$?
wait "$RS_PID" || rc=$?
[ "$rc" -eq 0 ] || {
    echo "go-etcd-interop: a peer failed (exit $rc)" >&2
    exit 1
}

awk -v iters="$ITERS" '
    $1 == "enter" {
        if (inside != "") { printf "OVERLAP: %s entered while %s was inside (line %d)\n", $2, inside, NR; bad = 1 }
        if (last_exit_side != "" && last_exit_side != $2) {
            handoff[last_exit_side "->" $2]++
            gap = ($4 - last_exit_ns) / 1e6
            if (gap > maxgap) maxgap = gap
        }
        inside = $2; entries[$2]++
    }
    $1 == "exit" {
        if (inside != $2) { printf "BAD EXIT: %s exited while %s was inside (line %d)\n", $2, inside, NR; bad = 1 }
        inside = ""; last_exit_side = $2; last_exit_ns = $4
    }
    END {
        printf "go-etcd-interop: go entered %d times, rust %d times; hand-offs go->rust %d, rust->go %d; slowest hand-off %.1f ms\n",
            entries["go"], entries["rust"], handoff["go->rust"], handoff["rust->go"], maxgap
        if (entries["go"] != iters || entries["rust"] != iters) { print "go-etcd-interop: missing entries"; bad = 1 }
        if (handoff["go->rust"] < 1 || handoff["rust->go"] < 1) { print "go-etcd-interop: the lock never changed hands both ways"; bad = 1 }
        if (maxgap > 2000) { print "go-etcd-interop: a waiter did not wake on release"; bad = 1 }
        exit bad
    }
' "$LOG"
echo "go-etcd-interop: ok (zero overlaps)"
