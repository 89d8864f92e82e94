#!/usr/bin/env bash
# Screenshot an HTML report in headless Chromium, to check how it reads (CI does not need this).
#   scripts/screenshot_html.sh REPORT.html OUT.png [WIDTHxHEIGHT]
# Needs `chromium` (Debian: apt-get install -y chromium); network features are off, the report is self-contained.
set -euo pipefail
html="$(realpath "$1")"
out="$(realpath -m "$2")"
size="${3:-1400x2000}"
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$profile" \
  --window-size="${size/x/,}" --screenshot="$out" "file://$html" 2>/dev/null
# Shrink to a 256-colour palette when Pillow is there (a page of flat colours loses nothing visible).
python3 - "$out" <<'PY' 2>/dev/null || true
import sys
from PIL import Image
Image.open(sys.argv[1]).convert("RGB").quantize(colors=256).save(sys.argv[1], optimize=True)
PY
echo "wrote $out ($(du -k "$out" | cut -f1) KB)"
