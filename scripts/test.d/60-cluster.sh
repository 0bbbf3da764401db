#!/usr/bin/env bash
# The HA topologies: start the cluster profile of scripts/services.sh (3-member etcd, ZooKeeper
# ensemble, Redis primary + 2 replicas + 3 Sentinels, Redis Cluster), then run every backend's
# conformance suite and leader/primary failover test against it, with LOCKKIT_TEST_REQUIRE naming
# every cluster URL so nothing skips. Stops the cluster profile again at the end, unless it was
# already running before (then it is left as it was) or LOCKKIT_KEEP_SERVICES=1.
#
# Environment: LOCKKIT_CARGO_JOBS (default 2), LOCKKIT_TEST_THREADS (default 2), and the cluster
# profile's port variables (see scripts/services.d/cluster.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

JOBS=${LOCKKIT_CARGO_JOBS:-2}
THREADS=${LOCKKIT_TEST_THREADS:-2}

# PACKAGE/TEST: the test binaries run here (tests/TEST.rs of PACKAGE). Every one must exist.
TESTS=(
    lockkit-zk/conformance_ensemble
    lockkit-zk/ensemble_failover
    lockkit-etcd/conformance_cluster
    lockkit-etcd/cluster_failover
    lockkit-redis/conformance_sentinel
    lockkit-redis/conformance_cluster
    lockkit-redis/replica_cluster
    lockkit-redis/sentinel_failover
)

missing=()
test_args=()
for t in "${TESTS[@]}"; do
    [ -f "${t%%/*}/tests/${t#*/}.rs" ] || missing+=("${t%%/*}/tests/${t#*/}.rs")
    # One --test NAME runs NAME in every package that has it (conformance_cluster: etcd and redis).
    [[ " ${test_args[*]} " == *" ${t#*/} "* ]] || test_args+=(--test "${t#*/}")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "cluster: listed test binaries are missing: ${missing[*]}" >&2
    exit 1
fi

# Build first (same features as scripts/test.sh, so its build is reused), so the servers do not
# sit idle during a compile.
cargo test --workspace --all-features -j "$JOBS" "${test_args[@]}" --no-run

was_up=0
scripts/services.sh status --cluster >/dev/null 2>&1 && was_up=1
stop_cluster() {
    local rc=$?
    if [ "$was_up" = 1 ] || [ "${LOCKKIT_KEEP_SERVICES:-0}" = 1 ]; then
        echo "cluster: leaving the cluster profile running (stop it with: scripts/services.sh down --cluster)"
    else
        scripts/services.sh down --cluster || true
    fi
    exit "$rc"
}
trap stop_cluster EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Not `eval "$(...)"`: that would hide a failing `up` (eval of "" succeeds).
env_lines=$(scripts/services.sh up --cluster)
eval "$env_lines"
echo "$env_lines"

# redis: sentinel_failover starts its own Sentinel group and must not skip for want of redis-server.
export LOCKKIT_TEST_REQUIRE=zk_ensemble,etcd_cluster,redis_sentinel,redis_cluster,redis
cargo test --workspace --all-features -j "$JOBS" "${test_args[@]}" -- --test-threads="$THREADS"
