#!/usr/bin/env bash
# Starts the local PostgreSQL the tests use when it is installed but not running.
# On a machine without PostgreSQL this does nothing; the tests then skip (or fail under CI=true).
set -uo pipefail
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
fi
exit 0
