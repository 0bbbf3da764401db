#!/usr/bin/env bash
# The facade built with no backend features: every server URL must fail with BackendDisabled
# naming the feature (tests/facade.rs has cfg(not(feature)) cases that only run here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
cargo test -p lockkit --no-default-features --test facade -j "${LOCKKIT_CARGO_JOBS:-2}"
