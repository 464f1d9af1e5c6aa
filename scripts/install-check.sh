#!/usr/bin/env bash
# Proves a user can install the CLI with the go command alone, from empty caches:
#   1. `go install ./cmd/fledge` in this checkout;
#   2. `go install github.com/fledgehq/fledge/cmd/fledge@VERSION` of this commit served as a
#      module version from a local file:// proxy in front of the real one (go install refuses a
#      module whose go.mod has replace directives, so this fails if one comes back).
set -euo pipefail
cd "$(dirname "$0")/.."

version=v0.0.0-installcheck
mod=github.com/fledgehq/fledge
work="$(mktemp -d "${TMPDIR:-/tmp}/fledge-install.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
upstream_proxy="$(go env GOPROXY)"
export GOMODCACHE="$work/mod" GOCACHE="$work/cache" GOFLAGS=-buildvcs=false GOWORK=off

echo "== go install ./cmd/fledge (empty module and build caches)"
GOBIN="$work/bin1" go install ./cmd/fledge
"$work/bin1/fledge" --version

echo "== go install $mod/cmd/fledge@$version (this commit as a module version)"
proxy="$work/proxy/$mod/@v"
mkdir -p "$proxy"
# A module zip holds the module's files under module@version/, without nested modules.
nested=$(git ls-files '*/go.mod' | xargs -r -n1 dirname | sed 's#$#/#')
git ls-files -z | { if [ -n "$nested" ]; then grep -z -v -F "$nested"; else cat; fi; } \
  | tar --null -T - -cf - | (mkdir -p "$work/zip/$mod@$version" && tar -xf - -C "$work/zip/$mod@$version")
(cd "$work/zip" && find "$mod@$version" -type f | LC_ALL=C sort | zip -q -X "$proxy/$version.zip" -@)
cp go.mod "$proxy/$version.mod"
printf '{"Version":"%s","Time":"2026-01-01T00:00:00Z"}\n' "$version" > "$proxy/$version.info"
printf '%s\n' "$version" > "$proxy/list"
rm -rf "$GOMODCACHE" "$GOCACHE"
(cd "$work" && GOPROXY="file://$work/proxy,$upstream_proxy" GONOSUMDB="$mod" GONOSUMCHECK=1 \
  GOBIN="$work/bin2" go install "$mod/cmd/fledge@$version")
"$work/bin2/fledge" --version
echo "install-check: both installs work"
