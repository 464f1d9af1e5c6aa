#!/usr/bin/env bash
# Runs every native Go fuzz target in the module, one at a time, and prints a summary.
#
#   FUZZTIME=60s bash fuzz/run.sh          # what `make fuzz` does
#   bash fuzz/run.sh --list                 # only show the targets that would run
#
# Environment:
#   FUZZTIME       per-target budget passed to -fuzztime (default 60s; "1000x" counts execs)
#   FUZZ_MATCH     extended regex; only targets whose "pkg.Name" matches run (default: all)
#   FUZZ_PARALLEL  fuzz workers per target (-parallel); default: Go's (GOMAXPROCS)
#   FUZZ_LOGDIR    where per-target logs go (default: a fresh temp dir, printed at the end)
#   GO             go command (default: go)
#
# Targets are found by grepping for `func FuzzXxx(` in *_test.go files, so new targets are
# picked up without editing this script. A target whose file is excluded by build
# constraints on this GOOS/GOARCH (e.g. a darwin-only test on Linux) is reported as SKIP.
# Exit status: 0 when every target that ran passed, 1 when any failed or none were found.
set -euo pipefail

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-60s}
FUZZ_MATCH=${FUZZ_MATCH:-}
FUZZ_PARALLEL=${FUZZ_PARALLEL:-}
list_only=0
case "${1:-}" in
--list) list_only=1 ;;
"") ;;
*)
	echo "usage: [FUZZTIME=60s] [FUZZ_MATCH=re] [FUZZ_PARALLEL=n] $0 [--list]" >&2
	exit 2
	;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
command -v "$GO" >/dev/null || {
	echo "fuzz/run.sh: $GO not found" >&2
	exit 1
}

# "dir<TAB>file<TAB>Name", sorted, skipping testdata and vendor trees.
mapfile -t targets < <(
	grep -rnE --include='*_test.go' --exclude-dir=testdata --exclude-dir=vendor --exclude-dir=.git \
		'^func Fuzz[A-Za-z0-9_]*\(' . |
		sed -E 's#^\./##; s#^(([^:]*/)?)([^/:]+_test\.go):[0-9]+:func (Fuzz[A-Za-z0-9_]*)\(.*#\1\t\3\t\4#' |
		awk -F'\t' '{ d = $1; sub(/\/$/, "", d); if (d == "") d = "."; print d "\t" $2 "\t" $3 }' |
		sort -u
)
if [ "${#targets[@]}" -eq 0 ]; then
	echo "fuzz/run.sh: no fuzz targets found under $root" >&2
	exit 1
fi

logdir=${FUZZ_LOGDIR:-$(mktemp -d "${TMPDIR:-/tmp}/fledge-fuzz.XXXXXX")}
mkdir -p "$logdir"

declare -A testfiles # package dir -> test files that build on this platform
pkg_testfiles() {
	local dir=$1
	if [ -z "${testfiles[$dir]+x}" ]; then
		local files
		# If go list itself fails, run the target anyway so the failure shows instead of a SKIP.
		files=$("$GO" list -f '{{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' "./$dir" 2>/dev/null) || files=ALL
		testfiles[$dir]=" $(printf '%s' "$files" | tr '\n' ' ') "
	fi
	printf '%s' "${testfiles[$dir]}"
}

summary=()
failed=0 ran=0
for t in "${targets[@]}"; do
	IFS=$'\t' read -r dir file name <<<"$t"
	pkg="./$dir"
	[ "$dir" = "." ] && pkg="."
	label="$dir.$name"
	if [ -n "$FUZZ_MATCH" ] && ! [[ $label =~ $FUZZ_MATCH ]]; then
		continue
	fi
	files=$(pkg_testfiles "$dir")
	if [[ $files != " ALL " && $files != *" $file "* ]]; then
		summary+=("$(printf '%-44s %-6s %s' "$label" SKIP "($file not built on $($GO env GOOS)/$($GO env GOARCH))")")
		continue
	fi
	if [ "$list_only" -eq 1 ]; then
		echo "$label"
		continue
	fi
	log="$logdir/${dir//\//_}.$name.log"
	args=(test -run='^$' "-fuzz=^${name}\$" "-fuzztime=$FUZZTIME")
	[ -n "$FUZZ_PARALLEL" ] && args+=("-parallel=$FUZZ_PARALLEL")
	echo "==> $label ($FUZZTIME) log: $log" >&2
	ran=$((ran + 1))
	if "$GO" "${args[@]}" "$pkg" >"$log" 2>&1; then
		result=PASS
	else
		result=FAIL
		failed=$((failed + 1))
	fi
	# Last progress line: "fuzz: elapsed: 60s, execs: 12345 (205/sec), new interesting: 3 (total: 40)"
	# Go's final line reports 0/sec, so the rate shown is execs over elapsed time.
	stats=$(grep -E '^fuzz: elapsed: .*execs: ' "$log" | tail -n 1 | awk '
		{
			el = $3; sub(/,$/, "", el); secs = 0; n = ""
			for (i = 1; i <= length(el); i++) {
				c = substr(el, i, 1)
				if (c ~ /[0-9.]/) { n = n c; continue }
				if (c == "h") secs += n * 3600; else if (c == "m") secs += n * 60; else if (c == "s") secs += n
				n = ""
			}
			execs = $5; rest = $0; sub(/^.*new interesting: /, "", rest)
			printf "elapsed %s, execs %s (%d/sec), new interesting %s\n", el, execs, (secs > 0 ? execs / secs : 0), rest
		}' || true)
	[ -n "$stats" ] || stats="(no fuzzing stats; see log)"
	summary+=("$(printf '%-44s %-6s %s' "$label" "$result" "$stats")")
	if [ "$result" = FAIL ]; then
		# Go writes the crasher under the package's testdata/fuzz/<Target>/ and prints how to rerun it.
		details=$(grep -E 'Failing input written to|To re-run:|^\s+go test -run=|panic:' "$log" | head -n 6 || true)
		if [ -n "$details" ]; then
			details+=$'\n'"(crasher is in $dir/testdata/fuzz/$name/: keep it, it is now a regression test)"
		else
			details=$(tail -n 5 "$log") # build error or the like
		fi
		while IFS= read -r line; do
			summary+=("    ${line#"${line%%[![:space:]]*}"}")
		done <<<"$details"
	fi
done

if [ "$list_only" -eq 1 ]; then
	printf '%s\n' "${summary[@]}" | grep SKIP || true
	exit 0
fi

echo
printf '%-44s %-6s %s\n' TARGET RESULT STATS
printf '%s\n' "${summary[@]}"
echo
echo "$ran target(s) run, $failed failed; logs in $logdir"
if [ "$ran" -eq 0 ]; then
	echo "fuzz/run.sh: nothing ran (FUZZ_MATCH=$FUZZ_MATCH)" >&2
	exit 1
fi
[ "$failed" -eq 0 ]
