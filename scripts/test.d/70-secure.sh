#!/usr/bin/env bash
# The secure profile: start TLS + auth servers (scripts/services.sh up --secure), run every
# backend's conformance suite, the ACL isolation and bad-credential tests and the redaction test
# against them (required: a missing URL fails), then stop the profile again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# The same workspace-wide feature set as scripts/test.sh, so its build is reused.
tests=(--workspace --all-features --test conformance_secure --test acl_isolation
    --test bad_credentials --test redaction --test tls_connect)
cargo test -j "${LOCKKIT_CARGO_JOBS:-2}" -q --no-run "${tests[@]}"

trap 'scripts/services.sh down --secure' EXIT
eval "$(scripts/services.sh up --secure)"
LOCKKIT_TEST_REQUIRE=redis_secure,zk_secure,etcd_secure \
    cargo test -j "${LOCKKIT_CARGO_JOBS:-2}" "${tests[@]}" -- --test-threads=2
