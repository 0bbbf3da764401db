#!/usr/bin/env bash
# The redlock profile: start five independent Redis masters (scripts/services.sh up --redlock),
# run the conformance suite and the Redlock fault tests against them (required: a missing URL
# fails), then stop the profile again. The fault tests stop, restart and freeze masters, so they
# run one at a time, after the conformance suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# The same workspace-wide feature set as scripts/test.sh, so its build is reused.
conformance=(--workspace --all-features --test redlock_conformance)
faults=(--workspace --all-features --test redlock)
cargo test -j "${LOCKKIT_CARGO_JOBS:-2}" -q --no-run "${conformance[@]}" --test redlock

trap 'scripts/services.sh down --redlock' EXIT
env_lines=$(scripts/services.sh up --redlock)
eval "$env_lines"
echo "$env_lines"
export LOCKKIT_TEST_REQUIRE=redlock
cargo test -j "${LOCKKIT_CARGO_JOBS:-2}" "${conformance[@]}" -- --test-threads=2
cargo test -j "${LOCKKIT_CARGO_JOBS:-2}" "${faults[@]}" -- --test-threads=1
