#!/usr/bin/env bash
# The secure profile: start TLS + auth servers (scripts/services.sh up --secure), run every
# backend's conformance suite, the ACL isolation and bad-credential tests and the redaction test
# against them (required: a missing URL fails), then stop the profile again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
jobs=${LOCKKIT_CARGO_JOBS:-2}

# Build first, while no server of this profile runs.
cargo test -j "$jobs" --no-run -q -p lockkit-redis --features tls \
    --test conformance_secure --test acl_isolation --test bad_credentials
cargo test -j "$jobs" --no-run -q -p lockkit-zk --features tls \
    --test conformance_secure --test acl_isolation --test bad_credentials
cargo test -j "$jobs" --no-run -q -p lockkit-etcd \
    --test conformance_secure --test acl_isolation --test bad_credentials
cargo test -j "$jobs" --no-run -q --features full --test redaction

trap 'scripts/services.sh down --secure' EXIT
eval "$(scripts/services.sh up --secure)"
export LOCKKIT_TEST_REQUIRE=redis_secure,zk_secure,etcd_secure

for crate in lockkit-redis lockkit-zk lockkit-etcd; do
    features=()
    [ "$crate" != lockkit-etcd ] && features=(--features tls)
    for t in conformance_secure acl_isolation bad_credentials; do
        echo "== $crate $t (secure profile)"
        cargo test -j "$jobs" -q -p "$crate" "${features[@]}" --test "$t" -- --test-threads=2
    done
done
echo "== redaction (secure profile)"
cargo test -j "$jobs" -q --features full --test redaction -- --test-threads=3
