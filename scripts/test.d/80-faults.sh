#!/usr/bin/env bash
# The fault suite (lockkit-faults, see scripts/faults.sh): etcd cluster and ZooKeeper ensemble
# must show 0 stale writes accepted, 0 unsignalled overlaps and every paused holder told within
# 1 s of resuming; Redis with Sentinel (with and without WAIT) reports its double grants and must
# still show 0 stale writes accepted. Own servers on their own ports; bounded (~5 minutes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec scripts/faults.sh suite
