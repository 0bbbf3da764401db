#!/usr/bin/env bash
# No two source files of one crate refer to each other (see ARCHITECTURE.md and
# scripts/file-cycles.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
command -v python3 >/dev/null 2>&1 || { echo "01-no-file-cycles: python3 is needed" >&2; exit 1; }
python3 scripts/file-cycles.py . -v
