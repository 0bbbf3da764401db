#!/usr/bin/env bash
# The fault suite (lockkit-faults, see scripts/faults.sh): etcd cluster and ZooKeeper ensemble
# must show 0 stale writes accepted, 0 unsignalled overlaps, every paused holder told within
# 1 s of resuming, 0 blocked hand-offs and 0 leftovers; Redis with Sentinel (with and without
# WAIT) reports its double grants and must still show 0 stale writes accepted; in the
# cluster-timeouts rows (server pauses longer than the command timeout; with a 2 s lease, and with
# a 6 s lease that outlasts the pause) all three backends must show 0 blocked hand-offs and 0
# leftovers on live sessions, and some acquire must time out during a pause; the election rows
# (workers campaign and resign; a leadership's term is its token) hold etcd and ZooKeeper to the
# same strict targets and Redis to 0 stale writes accepted; the RW lock, semaphore and multi-lock
# rows and the network rows (partitions, slow and half-open links, resets, members cut off from
# their group) likewise. Every run's history goes through the fast history checker and Porcupine
# (the Go checker's own tests run first). Own servers on their own ports; bounded (~16 minutes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec scripts/faults.sh suite
