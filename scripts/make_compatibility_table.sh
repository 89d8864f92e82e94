#!/usr/bin/env bash
# Regenerate reports/compatibility.md: every bundled model (templates_cache/) and every model in the shared
# Hub cache (../shared/hf-hub), offline. tests/formats/test_compatibility_table.py fails when the committed file differs.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_CACHE="${HF_HUB_CACHE:-$(cd .. && pwd)/shared/hf-hub}"  # ../shared beside the clone unless set
export HF_HUB_OFFLINE=1
exec python -m tito_audit table --bundled --cached --offline --output reports/compatibility.md "$@"
