#!/usr/bin/env bash
# Rebuilds third_party/wazero from the wazero release on the Go module proxy plus fledge.patch,
# so that the copy in the repository is known to be exactly that and nothing more.
#
#   regen.sh --check   compare the generated tree with the one in the repository (CI)
#   regen.sh --test    also run upstream's tests of the patched packages on the patched release
#                      (with fledge-tests.patch: their calls adapted to the patched signatures)
#   regen.sh --write   replace the tree in the repository with the generated one
#
# The release is checked against the go.sum hash below (the checksum database may not be
# reachable). The copy lives inside fledge's module under its own import path so that
# `go install github.com/fledgehq/fledge/cmd/fledge@VERSION` works (go install refuses a
# module with replace directives).
set -euo pipefail

version=v1.12.0
sum='h1:DuWcpNu/FzgEXgGBDp8J1Spc+CWOvvtvVyjKlaZopYU='
upstream=github.com/tetratelabs/wazero
ours=github.com/fledgehq/fledge/third_party/wazero

mode=check
run_tests=0
for arg in "$@"; do
  case "$arg" in
    --check) mode=check ;;
    --write) mode=write ;;
    --test) run_tests=1 ;;
    *) echo "usage: $0 [--check|--write] [--test]" >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/fledge-wazero.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

export GOMODCACHE="$work/mod" GOFLAGS=-mod=mod GOSUMDB=off GOTOOLCHAIN=local GOWORK=off
info="$(cd "$work" && go mod download -json "$upstream@$version")"
got="$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p')"
dir="$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ "$got" != "$sum" ]; then
  echo "regen: $upstream@$version has hash $got, want $sum" >&2
  exit 1
fi

rel="$work/rel"
cp -r "$dir" "$rel"
chmod -R u+w "$rel"
(cd "$rel" && patch -p1 -s --no-backup-if-mismatch < "$here/fledge.patch" \
  && patch -p1 -s --no-backup-if-mismatch < "$here/fledge-tests.patch")

if [ "$run_tests" = 1 ]; then
  echo "== upstream tests of the patched packages"
  (cd "$rel" && go test -count=1 . ./experimental/ ./internal/wasm/... ./internal/engine/wazevo/ \
    ./internal/platform/ ./internal/expctxkeys/ ./internal/wasmdebug/)
fi

# What fledge keeps: the non-test Go and assembly sources of the library, LICENSE and NOTICE;
# no tests, examples, cmd/, testdata or upstream's test helpers.
gen="$work/gen"
mkdir -p "$gen"
(cd "$rel" && find . -type f \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' \
  | grep -v -E '^\./(cmd|examples|internal/integration_test|internal/testing|site|packaging)/|/example/|/testdata/' \
  | LC_ALL=C sort) | while IFS= read -r f; do
  mkdir -p "$gen/$(dirname "$f")"
  # Import paths, and the symbols the assembly entry points are linked by.
  sed -e "s#\"$upstream#\"$ours#g" -e "s#^\(//go:linkname [^ ]* \)$upstream/#\1$ours/#" "$rel/$f" > "$gen/$f"
done
cp "$rel/LICENSE" "$rel/NOTICE" "$gen/"
for f in PATCHES.md fledge.patch fledge-tests.patch regen.sh; do cp "$here/$f" "$gen/$f"; done

case "$mode" in
  check)
    if ! diff -r "$gen" "$here" >"$work/diff" 2>&1; then
      echo "regen: third_party/wazero is not $upstream@$version plus fledge.patch:" >&2
      head -n 60 "$work/diff" >&2
      exit 1
    fi
    echo "third_party/wazero is $upstream@$version plus fledge.patch"
    ;;
  write)
    find "$here" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
    cp -r "$gen/." "$here/"
    echo "wrote $here"
    ;;
esac
