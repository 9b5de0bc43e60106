#!/usr/bin/env bash
# Builds the Temporal CLI (dev server + Web UI) from its Go module, once, into the leasekeeper cache.
# No internet is needed beyond the Go module proxy. Rebuilds only when the cached binary is missing
# or of another version.
set -euo pipefail

VERSION="1.5.1"
CACHE_DIR="${LK_CACHE_DIR:-$HOME/.cache/leasekeeper}"
BIN_DIR="$CACHE_DIR/bin"
BIN="$BIN_DIR/temporal"

GO="$(command -v go || true)"
[ -z "$GO" ] && [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go

# `go install` stamps no version into `temporal --version` (it says 0.0.0-DEV), so read the module
# version from the binary's Go build info instead; without Go, trust the stamp written after the build.
cached_version() {
  if [ -n "$GO" ]; then
    "$GO" version -m "$BIN" 2>/dev/null | awk '$1 == "mod" && $2 == "github.com/temporalio/cli" { sub(/^v/, "", $3); print $3 }'
  else
    cat "$BIN.version" 2>/dev/null || true
  fi
}
if [ -x "$BIN" ] && [ "$(cached_version)" = "$VERSION" ]; then
  echo "temporal CLI $VERSION: cached at $BIN"
  exit 0
fi
if [ -z "$GO" ]; then
  echo "error: Go >= 1.25 is needed to build the Temporal CLI, and no 'go' is on PATH or at /usr/local/go/bin." >&2
  echo "Install it: download the go1.25+ linux tarball from https://go.dev/dl/ and run" >&2
  echo "  tar -C /usr/local -xzf go1.25.*.linux-amd64.tar.gz && export PATH=\$PATH:/usr/local/go/bin" >&2
  echo "(Debian 12's golang package is too old.) Or set TEMPORAL_ADDRESS to use an existing Temporal server." >&2
  exit 1
fi
go_version="$("$GO" env GOVERSION)"   # e.g. go1.26.8
minor="$(echo "$go_version" | sed -E 's/^go1\.([0-9]+).*/\1/')"
if ! [[ "$minor" =~ ^[0-9]+$ ]] || [ "$minor" -lt 25 ]; then
  echo "error: $go_version at $GO is too old: the Temporal CLI $VERSION needs Go >= 1.25 (https://go.dev/dl/)." >&2
  exit 1
fi

mkdir -p "$BIN_DIR"
echo "building temporal CLI $VERSION with $go_version (first time: a few minutes)..."
started=$(date +%s)
GOBIN="$BIN_DIR" "$GO" install "github.com/temporalio/cli/cmd/temporal@v$VERSION"
echo "$VERSION" > "$BIN.version"
echo "temporal CLI built in $(( $(date +%s) - started )) s: $("$BIN" --version)"
