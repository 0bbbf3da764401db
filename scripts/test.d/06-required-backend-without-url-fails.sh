#!/usr/bin/env bash
# With LOCKKIT_TEST_REQUIRE naming a backend, a missing server URL must fail the tests, not skip
# them. Run one Redis conformance case with the URL unset and expect a failure that says why.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if out=$(env -u LOCKKIT_TEST_REDIS_URL LOCKKIT_TEST_REQUIRE=redis \
    cargo test -q -p lockkit-redis -j "${LOCKKIT_CARGO_JOBS:-2}" --test conformance -- \
    --exact try_lock_on_free_lock_succeeds 2>&1); then
    echo "$out"
    echo "FAIL: the Redis conformance case passed without a Redis URL although it was required" >&2
    exit 1
fi
if ! grep -q "requires the redis backend" <<<"$out"; then
    echo "$out"
    echo "FAIL: the failure did not name the missing URL" >&2
    exit 1
fi
echo "ok: LOCKKIT_TEST_REQUIRE=redis without LOCKKIT_TEST_REDIS_URL fails with a clear message"
