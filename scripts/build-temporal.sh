#!/usr/bin/env bash
# Builds Temporal's programs from their Go modules, once, into the leasekeeper cache. No internet is
# needed beyond the Go module proxy; a program is rebuilt only when its cached binary is missing or
# of another version.
#   cli     the Temporal CLI: the dev server with its Web UI (LK_TEMPORAL=dev, the default)
#   server  temporal-server, its SQL schema tool (the schema is built into it) and the Web UI server: the
#           production topology on PostgreSQL (LK_TEMPORAL=server, docker-compose.yml)
# Usage: build-temporal.sh [cli] [server]    (no argument: both)
set -euo pipefail

CLI_VERSION="1.5.1"
SERVER_VERSION="1.29.1" # docker-compose.yml and deploy/temporal/Dockerfile name the same versions
UI_VERSION="2.42.1"
CACHE_DIR="${LK_CACHE_DIR:-$HOME/.cache/leasekeeper}"
BIN_DIR="$CACHE_DIR/bin"

GO="$(command -v go || true)"
[ -z "$GO" ] && [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go

# `go install` stamps no version into the programs' own --version, so read the main module's version
# from the binary's Go build info; without Go, trust the stamp written after the build.
cached_version() { # binary module
  if [ -n "$GO" ]; then
    "$GO" version -m "$1" 2>/dev/null | awk -v module="$2" '$1 == "mod" && $2 == module { sub(/^v/, "", $3); print $3 }'
  else
    cat "$1.version" 2>/dev/null || true
  fi
}

require_go() {
  if [ -z "$GO" ]; then
    echo "error: Go >= 1.25 is needed to build Temporal's programs, and no 'go' is on PATH or at /usr/local/go/bin." >&2
    echo "Install it: download the go1.25+ linux tarball from https://go.dev/dl/ and run" >&2
    echo "  tar -C /usr/local -xzf go1.25.*.linux-amd64.tar.gz && export PATH=\$PATH:/usr/local/go/bin" >&2
    echo "(Debian 12's golang package is too old.) Or set TEMPORAL_ADDRESS to use an existing Temporal server." >&2
    exit 1
  fi
  local go_version minor
  go_version="$("$GO" env GOVERSION)" # e.g. go1.26.8
  minor="$(echo "$go_version" | sed -E 's/^go1\.([0-9]+).*/\1/')"
  if ! [[ "$minor" =~ ^[0-9]+$ ]] || [ "$minor" -lt 25 ]; then
    echo "error: $go_version at $GO is too old: Temporal $SERVER_VERSION and its CLI $CLI_VERSION need Go >= 1.25 (https://go.dev/dl/)." >&2
    exit 1
  fi
}

# build NAME MODULE PACKAGE VERSION: `go install` into a scratch directory (two of the packages are
# both called `server`), then moved into place under NAME.
build() {
  local name="$1" module="$2" package="$3" version="$4" bin="$BIN_DIR/$1"
  if [ -x "$bin" ] && [ "$(cached_version "$bin" "$module")" = "$version" ]; then
    echo "$name $version: cached at $bin"
    return
  fi
  require_go
  mkdir -p "$BIN_DIR"
  local scratch started
  scratch="$(mktemp -d "$BIN_DIR/.build-XXXXXX")"
  echo "building $name $version with $("$GO" env GOVERSION) (first time: a few minutes)..."
  started=$(date +%s)
  GOBIN="$scratch" "$GO" install "$package@v$version"
  mv "$scratch/$(basename "$package")" "$bin"
  rm -rf "$scratch"
  echo "$version" > "$bin.version"
  echo "$name $version built in $(( $(date +%s) - started )) s"
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(cli server)
for target in "${targets[@]}"; do
  case "$target" in
    cli)
      build temporal github.com/temporalio/cli github.com/temporalio/cli/cmd/temporal "$CLI_VERSION"
      ;;
    server)
      build temporal-server go.temporal.io/server go.temporal.io/server/cmd/server "$SERVER_VERSION"
      build temporal-sql-tool go.temporal.io/server go.temporal.io/server/cmd/tools/sql "$SERVER_VERSION"
      build temporal-ui-server github.com/temporalio/ui-server/v2 github.com/temporalio/ui-server/v2/cmd/server "$UI_VERSION"
      ;;
    *)
      echo "usage: $0 [cli] [server]" >&2
      exit 2
      ;;
  esac
done
