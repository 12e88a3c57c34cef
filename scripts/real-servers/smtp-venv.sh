#!/usr/bin/env bash
# The Python that runs tests/it/support/smtp_sink.py: a venv with aiosmtpd from PyPI, at
# scripts/real-servers/.work/smtp-venv, where tests/it/support/smtp.rs looks for it. The
# tests start and stop the server themselves.
#
# Environment: WORK (scripts/real-servers/.work), AIOSMTPD_VERSION (1.4.6), PYTHON (python3).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-$HERE/.work}"
VERSION="${AIOSMTPD_VERSION:-1.4.6}"
VENV="$WORK/smtp-venv"

if "$VENV/bin/python" -c "import aiosmtpd" 2>/dev/null; then
    echo "[smtp] installed: $VENV" >&2
    exit 0
fi
mkdir -p "$WORK"
"${PYTHON:-python3}" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "aiosmtpd==$VERSION"
"$VENV/bin/python" -c "import aiosmtpd; print('[smtp] aiosmtpd', aiosmtpd.__version__)"
