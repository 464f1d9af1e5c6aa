#!/usr/bin/env bash
# make bench: fledge's performance figures in one table, each a ratio against a baseline
# measured in the same run (absolute numbers drift on shared machines; ratios much less).
#
#   make bench                          # builds bin/fledge, then runs this
#   FLEDGE_BENCH_INSTALL=1 make bench   # install the peers first (also done when CI=true):
#                                       # bubblewrap, firejail, hyperfine (apt-get) and
#                                       # sandbox-runtime (npm); without them: n/a
#   FLEDGE_BENCH_QUICK=1 make bench     # fewer iterations (a smoke run, noisier figures)
#   FLEDGE_BENCH_KEEP=1 make bench      # keep the throwaway dir (raw outputs, profiles)
#
# Everything runs in a throwaway HOME / config dir / audit log under mktemp -d; your own
# ~/.config and ~/.local are never touched. The host figures (throughput, RSS) come from the
# real bin/fledge running an installed plugin (bench/plugin) with its output to /dev/null.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
fledge=$repo/bin/fledge
if [[ ! -x $fledge ]]; then
	echo "bench: $fledge is missing: run 'make build' first (or 'make bench')" >&2
	exit 1
fi
GO=${GO:-go}

work=$(mktemp -d "${TMPDIR:-/tmp}/fledge-bench.XXXXXX")
cleanup() {
	if [[ ${FLEDGE_BENCH_KEEP:-} == 1 ]]; then
		echo "bench: kept $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
log() { printf 'bench: %s\n' "$*" >&2; }
# The host figures run a copy of bin/fledge. The Go linker writes its output through a
# shared mapping, which leaves the fresh file's pages cached in a shape that a process
# mapping it faults in larger pieces: `bin/fledge --version` peaked at 26.7 MiB of RSS
# straight from `go build`, at 17.6 MiB as a copy of the same bytes (an installed binary is
# such a copy). Measured here on 2026-11-26; the copy is what users run.
cp "$fledge" "$work/fledge"
fledge=$work/fledge

if [[ ${FLEDGE_BENCH_QUICK:-} == 1 ]]; then
	execN=50 count=1 msgs=200000 reps=1 rpcN=100 startN=10 shotN=10 shotWarm=1
else
	execN=200 count=3 msgs=1000000 reps=3 rpcN=500 startN=20 shotN=30 shotWarm=3
fi

# ---- optional peers -----------------------------------------------------------------------
# sandbox-runtime (npm) is pinned, so its row compares across runs; it runs its sandbox with
# bubblewrap and needs socat and ripgrep beside it.
srt_pkg=@anthropic-ai/sandbox-runtime@0.0.78
srt=$(command -v srt || true)
if [[ ${CI:-} == true || ${FLEDGE_BENCH_INSTALL:-} == 1 ]]; then
	pkgs=()
	command -v bwrap >/dev/null || pkgs+=(bubblewrap)
	command -v firejail >/dev/null || pkgs+=(firejail)
	command -v hyperfine >/dev/null || pkgs+=(hyperfine)
	command -v socat >/dev/null || pkgs+=(socat)
	command -v rg >/dev/null || pkgs+=(ripgrep)
	if ((${#pkgs[@]})); then
		log "installing ${pkgs[*]} (apt-get; failures only mean n/a)"
		if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
			timeout 180 apt-get install -y -qq "${pkgs[@]}" >"$work/apt.log" 2>&1 ||
				{ timeout 120 apt-get update -qq >>"$work/apt.log" 2>&1 &&
					timeout 180 apt-get install -y -qq "${pkgs[@]}" >>"$work/apt.log" 2>&1; } ||
				log "could not install them (see $work/apt.log with FLEDGE_BENCH_KEEP=1)"
		else
			log "not root or no apt-get: ${pkgs[*]} stay n/a unless already installed"
		fi
	fi
	if [[ -z $srt ]] && command -v npm >/dev/null; then
		log "installing $srt_pkg (npm, at most a minute; failure only means n/a)"
		# Its own cache too: your ~/.npm is not touched.
		if timeout 60 env npm_config_cache="$work/npm-cache" npm install --no-audit --no-fund \
			--prefix "$work/npm" "$srt_pkg" >"$work/npm.log" 2>&1; then
			srt=$work/npm/node_modules/.bin/srt
		else
			log "could not install $srt_pkg (see $work/npm.log with FLEDGE_BENCH_KEEP=1)"
		fi
	fi
fi

# ---- a throwaway world ----------------------------------------------------------------------
export HOME=$work/home
export FLEDGE_CONFIG_DIR=$HOME/.config/fledge
export FLEDGE_AUDIT_LOG=$HOME/.local/state/fledge/audit.jsonl
unset XDG_CONFIG_HOME XDG_STATE_HOME XDG_DATA_HOME FLEDGE_NON_INTERACTIVE FLEDGE_CPUPROFILE FLEDGE_MEMPROFILE
mkdir -p "$HOME" "$work/src/fledge-bench" "$work/out"

log "building the bench plugin and measure helper"
plugin_src=$work/src/fledge-bench
"$GO" build -o "$plugin_src/fledge-bench" ./bench/plugin
"$GO" build -o "$work/measure" ./bench/measure
"$GO" build -o "$work/firstout" ./bench/firstout
"$GO" build -o "$work/rpcdrive" ./bench/rpcdrive
"$GO" build -o "$work/mcphttp" ./bench/mcphttp
mkdir -p "$work/src/rpc"
"$GO" build -o "$work/src/rpc/bench-rpc" ./bench/rpcplugin
cat >"$plugin_src/plugin.toml" <<'EOF'
[plugin]
name = "fledge-bench"
version = "0.1.0"
description = "the plugin make bench drives (bench/plugin)"
protocol = "fledge-v1"

[[commands]]
name = "fledge-bench"
description = "exec, oneshot, meta, pipeline, gen, flood-nonl, longline, hello"
binary = "fledge-bench"

[capabilities]
exec = true
EOF
"$fledge" plugins install "$plugin_src" --yes >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log" >&2; exit 1; }
export FLEDGE_BENCH_PLUGIN=$plugin_src/fledge-bench
# The JSON-RPC 2.0 tool/hook plugin (jsonrpc-2.0), installed as the bare executable such plugins are distributed as.
"$fledge" --ni plugins install "$work/src/rpc/bench-rpc" --protocol jsonrpc-2.0 --grant '' >"$work/install-rpc.log" 2>&1 ||
	{ cat "$work/install-rpc.log" >&2; exit 1; }

# ---- helpers --------------------------------------------------------------------------------
# median of the numbers on stdin
median() { sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print ""}'; }
# metric FILE BENCH UNIT: the median of UNIT over the -count runs of BENCH
metric() {
	awk -v n="$2" -v u="$3" '$1 ~ "^" n "(-[0-9]+)?$" { for (i = 3; i < NF; i++) if ($(i+1) == u) print $i }' "$1" | median
}
# field KEY: a key=value field of measure's output on stdin
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }
# run_measure NAME [-o FILE] -- CMD...: runs it $reps times (floods once), keeps every result
run_measure() {
	local name=$1
	shift
	: >"$work/out/$name.txt"
	local n=$reps
	[[ $name == flood* ]] && n=1
	for ((i = 0; i < n; i++)); do
		"$work/measure" -timeout 4m "$@" >>"$work/out/$name.txt"
	done
	if grep -qv 'exit=0' "$work/out/$name.txt"; then
		log "$name: a run did not exit 0: $(cat "$work/out/$name.txt")"
		return 1
	fi
}
mfield() { field "$2" <"$work/out/$1.txt" | median; }

fmt_ms() { [[ -n $1 ]] && awk -v v="$1" 'BEGIN {printf "%.2f ms", v / 1e6}' || echo "n/a"; }
fmt_mib() { [[ -n $1 ]] && awk -v v="$1" 'BEGIN {printf "%.1f MiB", v / 1024}' || echo "n/a"; }
fmt_rate() { [[ -n $1 ]] && awk -v v="$1" 'BEGIN {if (v >= 1e6) printf "%.2fM/s", v / 1e6; else if (v >= 1e5) printf "%.0fk/s", v / 1e3; else printf "%.1fk/s", v / 1e3}' || echo "n/a"; }
ratio() { [[ -n $1 && -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}' || echo "n/a"; }
# ---- Go benchmarks (same process: the baseline and the figure share the machine's mood) -----
# Rounds rather than -count: each round measures the baselines and fledge back to back, so
# a load spike from elsewhere on the machine hits both sides of a ratio alike.
log "exec round trip and cold start ($execN iterations, $count rounds)"
: >"$work/out/exec.txt"
for ((r = 0; r < count; r++)); do
	"$GO" test -run '^$' -bench 'ExecRoundTrip|ColdStart' -benchtime "${execN}x" -count 1 \
		./protocolhost/fledgev1/ >>"$work/out/exec.txt" 2>&1 || { cat "$work/out/exec.txt" >&2; exit 1; }
done
log "64 pipelined execs"
"$GO" test -run '^$' -bench 'ExecPipeline' -benchtime 3x -count 1 \
	./protocolhost/fledgev1/ >"$work/out/pipeline.txt" 2>&1 || { cat "$work/out/pipeline.txt" >&2; exit 1; }
log "WASM plugin: cold start (first compile, cached) and exec round trip ($count rounds)"
: >"$work/out/wasm.txt"
wasmStarts=$((reps + 2))
# Each WASM figure right after its native counterpart, so both see the same machine load.
for ((r = 0; r < count; r++)); do
	"$GO" test -run '^$' -bench 'ColdStart/confined' -benchtime "${wasmStarts}x" -count 1 \
		./protocolhost/fledgev1/ >>"$work/out/wasm.txt" 2>&1 || { cat "$work/out/wasm.txt" >&2; exit 1; }
	"$GO" test -run '^$' -bench 'WasmColdStart' -benchtime "${wasmStarts}x" -count 1 \
		./sandbox/wasm/ >>"$work/out/wasm.txt" 2>&1 || { cat "$work/out/wasm.txt" >&2; exit 1; }
	"$GO" test -run '^$' -bench 'ExecRoundTrip/fledge$' -benchtime "${execN}x" -count 1 \
		./protocolhost/fledgev1/ >>"$work/out/wasm.txt" 2>&1 || { cat "$work/out/wasm.txt" >&2; exit 1; }
	"$GO" test -run '^$' -bench 'WasmExecRoundTrip' -benchtime "${execN}x" -count 1 \
		./sandbox/wasm/ >>"$work/out/wasm.txt" 2>&1 || { cat "$work/out/wasm.txt" >&2; exit 1; }
done
log "kernel refusal records and trace mode ($execN exec pairs, 3 go build pairs)"
"$GO" test -run '^$' -bench 'KernelRecordAB/.*-true' -benchtime "${execN}x" -count 1 \
	./sandbox/linux/ >"$work/out/kernel.txt" 2>&1 || { cat "$work/out/kernel.txt" >&2; exit 1; }
"$GO" test -run '^$' -bench 'KernelRecordAB/trace-gobuild' -benchtime 3x -count 1 \
	./sandbox/linux/ >>"$work/out/kernel.txt" 2>&1 || { cat "$work/out/kernel.txt" >&2; exit 1; }
log "audit export over OTLP: exec round trip with export on vs off ($((execN * 5)) execs each, alternating; builds the test collector)"
"$GO" test -run '^$' -bench 'ExecExportAB' -benchtime "$((execN * 5))x" -count "$count" \
	./protocolhost/fledgev1/ >"$work/out/export.txt" 2>&1 || { cat "$work/out/export.txt" >&2; exit 1; }
log "audit appends"
"$GO" test -run '^$' -bench 'AppendFsync$|AppendNoFsync$' -benchtime 500x -count "$count" \
	./audit/ >"$work/out/audit.txt" 2>&1 || { cat "$work/out/audit.txt" >&2; exit 1; }

ex=$work/out/exec.txt
exec_bare=$(metric "$ex" BenchmarkExecRoundTrip/bare median-ns/exec)
exec_bwrap=$(metric "$ex" BenchmarkExecRoundTrip/bwrap median-ns/exec)
exec_firejail=$(metric "$ex" BenchmarkExecRoundTrip/firejail median-ns/exec)
exec_fledge=$(metric "$ex" BenchmarkExecRoundTrip/fledge median-ns/exec)
exec_nofsync=$(metric "$ex" BenchmarkExecRoundTrip/fledge-fsync-never median-ns/exec)
exec_request=$(metric "$ex" BenchmarkExecRoundTrip/request median-ns/exec)
cold_conf=$(metric "$ex" BenchmarkColdStart/confined median-ns/start)
cold_unconf=$(metric "$ex" BenchmarkColdStart/unconfined median-ns/start)
pipe_par=$(metric "$work/out/pipeline.txt" BenchmarkExecPipeline pipelined-ns)
pipe_seq=$(metric "$work/out/pipeline.txt" BenchmarkExecPipeline sequential-ns)
wasm_first=$(metric "$work/out/wasm.txt" BenchmarkWasmColdStart/first-compile median-ns/start)
wasm_cached=$(metric "$work/out/wasm.txt" BenchmarkWasmColdStart/cached median-ns/start)
wasm_live=$(metric "$work/out/wasm.txt" BenchmarkWasmColdStart/long-lived median-ns/start)
wasm_exec=$(metric "$work/out/wasm.txt" BenchmarkWasmExecRoundTrip median-ns/exec)
wasm_native_cold=$(metric "$work/out/wasm.txt" BenchmarkColdStart/confined median-ns/start)
wasm_native_exec=$(metric "$work/out/wasm.txt" BenchmarkExecRoundTrip/fledge median-ns/exec)
audit_on=$(metric "$work/out/audit.txt" BenchmarkAppendFsync records/s)
audit_off=$(metric "$work/out/audit.txt" BenchmarkAppendNoFsync records/s)

# ---- the real binary: throughput and peak RSS -------------------------------------------------
cd "$work"
log "host idle RSS (a plugin that says hello and exits)"
run_measure idle -- "$fledge" fledge-bench hello
# Row 10: what a user waits for before a plugin says anything. Rounds alternate fledge and
# the plugin started alone, so a load that comes and goes weighs on both. Rows 10 and 11 run
# in a project (its root is the plugin's writable root), as a user runs fledge and as the Go
# benchmarks of rows 1-5 do.
mkdir -p "$work/project"
: >"$work/project/fledge.toml"
cd "$work/project"
log "fledge <plugin>: process start to the plugin's first output ($startN starts, $reps rounds), and the plugin alone"
: >"$work/out/first-fledge.txt"
: >"$work/out/first-plugin.txt"
for ((i = 0; i < reps; i++)); do
	"$work/firstout" -n "$startN" -e "$work/out/first-fledge.err" -- "$fledge" fledge-bench hello >>"$work/out/first-fledge.txt" ||
		{ log "first output: $(tail -3 "$work/out/first-fledge.err")"; : >"$work/out/first-fledge.txt"; break; }
	"$work/firstout" -n "$startN" -- "$FLEDGE_BENCH_PLUGIN" hello >>"$work/out/first-plugin.txt"
done
# Row 11: a whole one-shot run, fledge's process start to its exit, against the peers'
# one-shot sandboxes and an unconfined `true`, each timed the same way. With hyperfine
# (--shell=none, so no shell is started or subtracted); without it, measure in a loop.
oneshot() { # NAME CMD...: leaves median, user and sys (ns) in $work/out/oneshot-NAME.ns
	local name=$1
	shift
	local f=$work/out/oneshot-$name
	if [[ -n $hyperfine ]]; then
		# --shell=none splits the command line as a shell would: quote each word.
		hyperfine -N --runs "$shotN" --warmup "$shotWarm" --export-csv "$f.csv" -n "$name" -- "$(printf '%q ' "$@")" >"$f.log" 2>&1 ||
			{ log "one-shot $name: n/a ($(grep -v '^ *$' "$f.log" | tail -1))"; return 0; }
		# command,mean,stddev,median,user,system,min,max in seconds; user and system are means
		awk -F, 'NR == 2 {printf "median_ns=%.0f user_ns=%.0f sys_ns=%.0f\n", $4 * 1e9, $5 * 1e9, $6 * 1e9}' "$f.csv" >"$f.ns"
	else
		: >"$f.txt"
		for ((i = 0; i < shotWarm + shotN; i++)); do
			"$work/measure" -timeout 1m -- "$@" >>"$f.txt" 2>"$f.log" || { log "one-shot $name: n/a ($(tail -1 "$f.log"))"; return 0; }
		done
		if grep -qv 'exit=0' "$f.txt"; then
			log "one-shot $name: n/a (a run did not exit 0)"
			return 0
		fi
		tail -n "$shotN" "$f.txt" >"$f.kept"
		printf 'median_ns=%s user_ns=%s sys_ns=%s\n' "$(field wall_ns <"$f.kept" | median)" \
			"$(field user_ns <"$f.kept" | median)" "$(field sys_ns <"$f.kept" | median)" >"$f.ns"
	fi
}
shot() { [[ -s $work/out/oneshot-$1.ns ]] && field "$2" <"$work/out/oneshot-$1.ns" || true; }
hyperfine=$(command -v hyperfine || true)
if [[ -n $hyperfine ]]; then
	log "one-shot runs: hyperfine, $shotN runs after $shotWarm warm-ups each: fledge --ni, firejail, bwrap, srt, true"
else
	log "one-shot runs: no hyperfine, so measure in a loop ($shotN runs after $shotWarm warm-ups each)"
fi
oneshot true true
oneshot fledge "$fledge" --ni fledge-bench oneshot
command -v firejail >/dev/null && oneshot firejail firejail --noprofile true
command -v bwrap >/dev/null && oneshot bwrap bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp \
	--unshare-pid --new-session --die-with-parent true
[[ -n $srt ]] && oneshot srt "$srt" -c true
cd "$work"
log "throughput: $msgs messages through the host, and through a bare pipe"
run_measure gen -- "$fledge" fledge-bench gen "$msgs"
run_measure raw -- sh -c "'$FLEDGE_BENCH_PLUGIN' gen $msgs | cat >/dev/null"
log "flood: 1 GiB without a newline"
run_measure flood-nonl -- "$fledge" fledge-bench flood-nonl $((1 << 30))
log "flood: one 50 MiB line, then 1000 valid messages"
run_measure flood-long -o "$work/out/long-stdout.txt" -- "$fledge" fledge-bench longline $((50 << 20)) 1000
got=$(grep -c '^after the long line ' "$work/out/long-stdout.txt" || true)
if [[ $got != 1000 ]]; then
	log "flood: only $got of the 1000 messages after the long line came through"
	exit 1
fi
log "jsonrpc-2.0: $rpcN tool/execute round trips through fledge serve, and to the same plugin directly"
: >"$work/out/rpc-direct.txt"
: >"$work/out/rpc-serve.txt"
: >"$work/out/rpc-serve-nofsync.txt"
: >"$work/out/rpc-relay.txt"
: >"$work/out/rpc-fsync-floor.txt"
for ((i = 0; i < reps; i++)); do
	# Back to back in each round, so a load spike hits all of them alike.
	"$work/rpcdrive" -n "$rpcN" -tool echo -- "$work/src/rpc/bench-rpc" >>"$work/out/rpc-direct.txt"
	"$work/rpcdrive" -n "$rpcN" -tool bench-rpc_echo -- "$fledge" serve --protocol jsonrpc-2.0 >>"$work/out/rpc-serve.txt"
	printf '[audit]\nfsync = "never"\n' >"$FLEDGE_CONFIG_DIR/config.toml"
	"$work/rpcdrive" -n "$rpcN" -tool bench-rpc_echo -- "$fledge" serve --protocol jsonrpc-2.0 >>"$work/out/rpc-serve-nofsync.txt"
	rm -f "$FLEDGE_CONFIG_DIR/config.toml"
	# The floors under rows 7 and 7a: a bare relay in the middle, and the disk I/O of one
	# durable call's records on the audit log's disk (decision append + fsync, head, outcome).
	"$work/rpcdrive" -n "$rpcN" -tool echo -- "$work/rpcdrive" -relay -- "$work/src/rpc/bench-rpc" >>"$work/out/rpc-relay.txt"
	"$work/rpcdrive" -n "$rpcN" -fsync-floor "$(dirname "$FLEDGE_AUDIT_LOG")" >>"$work/out/rpc-fsync-floor.txt"
done
# MCP over Streamable HTTP: an echo server (official Go SDK) on loopback, called directly,
# and through `fledge serve --mcp --listen` with the server installed as a remote plugin.
log "mcp over HTTP: $rpcN tool calls through fledge serve --mcp --listen (a remote plugin), and to the same server directly"
: >"$work/out/mcp-direct.txt"
: >"$work/out/mcp-serve.txt"
"$work/mcphttp" -serve 127.0.0.1:0 >"$work/mcp-server.txt" 2>&1 &
mcp_server=$!
mcp_serve=
stop_mcp() {
	# A server ended by a signal reports it as its status (fledge: 130 or 143), which is no
	# failure of the benchmark.
	if [[ -n $mcp_serve ]]; then kill "$mcp_serve" 2>/dev/null; wait "$mcp_serve" 2>/dev/null || true; fi
	kill "$mcp_server" 2>/dev/null; wait "$mcp_server" 2>/dev/null || true
	return 0
}
for _ in $(seq 50); do grep -q '^url=' "$work/mcp-server.txt" && break; sleep 0.1; done
mcp_url=$(sed -n 's/^url=//p' "$work/mcp-server.txt")
if [[ -n $mcp_url ]] && "$fledge" --ni plugins install "$mcp_url" --yes --name bench-mcp >"$work/install-mcp.log" 2>&1; then
	printf 'bench-token-%s\n' "$RANDOM$RANDOM" >"$work/mcp-token"
	"$fledge" serve --mcp --listen 127.0.0.1:0 --token-file "$work/mcp-token" 2>"$work/mcp-serve.log" &
	mcp_serve=$!
	for _ in $(seq 100); do grep -q 'serving MCP' "$work/mcp-serve.log" && break; sleep 0.1; done
	fledge_url=$(sed -n 's/.*Streamable HTTP at \([^ ]*\) .*/\1/p' "$work/mcp-serve.log")
	for ((i = 0; i < reps; i++)); do
		"$work/mcphttp" -n "$rpcN" -url "$mcp_url" >>"$work/out/mcp-direct.txt"
		"$work/mcphttp" -n "$rpcN" -url "$fledge_url" -tool plugin_bench-mcp_echo -token-file "$work/mcp-token" >>"$work/out/mcp-serve.txt"
	done
else
	log "mcp over HTTP: n/a ($(tail -1 "$work/install-mcp.log" 2>/dev/null))"
fi
stop_mcp

cd "$repo"

# ---- network by destination (sandbox/netstack; root only: the namespace needs CAP_NET_ADMIN) --
# Connection setup and bulk throughput through fledge's namespace and userspace stack against
# a direct connection, each benchmark timing its direct case right before fledge's. The rows'
# benchmarks (connect, throughput) run first, each on its own, $count rounds, so that a hang or
# failure elsewhere costs only the figures it did not finish (the lines a run printed before
# it failed are kept). A figure is the median of every sub-benchmark whose name holds direct,
# tun or loopback (names may gain levels).
bt=1s
[[ ${FLEDGE_BENCH_QUICK:-} == 1 ]] && bt=200ms
net_out=
net_failed=()
netbench() { # REGEX COUNT TIMEOUT: appends the finished benchmarks' lines to net_out
	local o ok=1
	o=$(FLEDGE_CONTAIN_STAGE=test timeout "$(($3 + 1))m" "$GO" test ./sandbox/netstack -run '^$' -bench "$1" \
		-benchtime "$bt" -count "$2" -timeout "$3m" 2>&1) || ok=
	net_out+=$(printf '%s\n' "$o" | grep -E '^Benchmark.*[0-9] ns/op' || true)$'\n'
	if [[ -z $ok ]]; then
		# The first failure and the line that says why (a benchmark's b.Fatal comes after it).
		net_failed+=("$1 failed: $(printf '%s\n' "$o" | grep -m1 -A1 -E 'panic:|--- FAIL|fatal|timed out' | tr -s ' \t\n' ' ' ||
			printf '%s\n' "$o" | tail -1)")
		printf '%s\n' "$o" >"$work/out/netstack-fail-${#net_failed[@]}.txt"
		log "network by destination: ${net_failed[-1]}"
	fi
}
log "network by destination: download and connection setup, TUN path and loopback port, each operation beside the same one direct ($count rounds)"
netbench '^BenchmarkEgressVsDirect$' "$count" 4
rest=$(FLEDGE_CONTAIN_STAGE=test "$GO" test ./sandbox/netstack -list '^BenchmarkEgress' 2>/dev/null |
	grep '^BenchmarkEgress' | grep -vxE 'BenchmarkEgressVsDirect' | paste -sd '|' || true)
if [[ -n $rest ]]; then
	log "network by destination: the other benchmarks ($rest)"
	netbench "^($rest)\$" 1 5
fi
# netfig SUB UNIT: the median of UNIT over the rounds of BenchmarkEgressVsDirect/SUB, which
# times each operation through fledge and then the same one direct, alternately.
netfig() {
	printf '%s' "$net_out" | awk -v b="BenchmarkEgressVsDirect/$1" -v u="$2" '
		{ n=$1; sub(/-[0-9]+$/, "", n); if (n != b) next
			for (i = 3; i <= NF; i++) if ($i == u) print $(i-1) }' | median
}
net_bulk_direct=$(netfig download-tun direct-Gbit/s)
net_bulk_tun=$(netfig download-tun fledge-Gbit/s)
net_bulk_tun_ratio=$(netfig download-tun x-direct)
net_bulk_lo_direct=$(netfig download-loopback direct-Gbit/s)
net_bulk_lo=$(netfig download-loopback fledge-Gbit/s)
net_bulk_lo_ratio=$(netfig download-loopback x-direct)
net_conn_direct=$(netfig connect-tun direct-ms/op)
net_conn_tun=$(netfig connect-tun fledge-ms/op)
net_conn_tun_plus=$(netfig connect-tun over-ms/op)
net_conn_lo_direct=$(netfig connect-loopback direct-ms/op)
net_conn_lo=$(netfig connect-loopback fledge-ms/op)
net_conn_lo_plus=$(netfig connect-loopback over-ms/op)

mcp_direct=$(mfield mcp-direct median_ns)
mcp_serve_ns=$(mfield mcp-serve median_ns)
mcp_first=$(mfield mcp-serve first_ns)
rpc_direct=$(mfield rpc-direct median_ns)
rpc_serve=$(mfield rpc-serve median_ns)
rpc_nofsync=$(mfield rpc-serve-nofsync median_ns)
rpc_first=$(mfield rpc-serve first_ns)
rpc_relay=$(mfield rpc-relay median_ns)
rpc_floor=$(mfield rpc-fsync-floor median_ns)
# Row 7's floor on this machine: the relay's hops plus the disk I/O of one durable call.
rpc_floor_total=$([[ -n $rpc_relay && -n $rpc_floor ]] && awk -v a="$rpc_relay" -v b="$rpc_floor" 'BEGIN {printf "%.0f", a + b}')
idle_hwm=$(mfield idle hwm_kib)
gen_wall=$(mfield gen wall_ns)
raw_wall=$(mfield raw wall_ns)
gen_rate=$(awk -v n="$msgs" -v w="$gen_wall" 'BEGIN {printf "%.0f", n / (w / 1e9)}')
raw_rate=$(awk -v n="$msgs" -v w="$raw_wall" 'BEGIN {printf "%.0f", n / (w / 1e9)}')
gen_hwm=$(mfield gen hwm_kib)
nonl_hwm=$(mfield flood-nonl hwm_kib)
long_hwm=$(mfield flood-long hwm_kib)
tree_max=$(cat "$work/out/gen.txt" "$work/out/flood-nonl.txt" "$work/out/flood-long.txt" | field tree_maxrss_kib | sort -g | tail -1)
exec_ratio=$(awk -v a="$exec_fledge" -v b="$exec_bare" 'BEGIN {printf "%.4f", a / b}')
exec_nofsync_ratio=$(awk -v a="$exec_nofsync" -v b="$exec_bare" 'BEGIN {printf "%.4f", a / b}')
worst_hwm=$(printf '%s\n' "$gen_hwm" "$nonl_hwm" "$long_hwm" | sort -g | tail -1)

# ---- the table ------------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
doctor=$("$fledge" doctor --json 2>/dev/null || true)
jget() { printf '%s' "$doctor" | sed -n "s/^ *\"$1\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" | head -1; }
echo
echo "fledge make bench — $(date -u +%Y-%m-%dT%H:%MZ)"
echo "machine: $(nproc) cores, ${cpu:-unknown CPU}, kernel $(uname -r), cgroup $(jget cgroup_mode) (tree kill $(jget tree_kill)), Landlock ABI $(jget landlock_abi), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
# row ID FIGURE VALUE BASELINE RATIO GOAL MEETS; every row with a goal counts in the summary
# line under the table (a goal of "-", "peer" or "within noise" is no goal to meet).
goal_yes=() goal_no=() goal_unmeasured=()
row() {
	printf '| %-3s | %-46s | %-12s | %-34s | %-8s | %-18s | %-7s |\n' "$@"
	case $6 in -|peer|"within noise"|goal|---*) return ;; esac
	case $7 in
	yes*) goal_yes+=("$1") ;;
	no*) goal_no+=("$1") ;;
	*) goal_unmeasured+=("$1") ;;
	esac
}
# meets VALUE GOAL: "yes" when VALUE <= GOAL, "no" otherwise, "-" when unmeasured (a
# minimum is checked as meets -VALUE -MINIMUM).
# The goals are the exec-path goals (docs/performance.md): one per row of that table.
meets() {
	[[ -n $1 && $1 != n/a ]] || { echo "-"; return; }
	awk -v v="$1" -v g="$2" 'BEGIN { print (v <= g) ? "yes" : "no" }'
}
div() { [[ -n $1 && -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f", a / b}' || echo ""; }
firejail_ratio=$(div "$exec_firejail" "$exec_bare")
pipe_ratio=$(div "$pipe_par" "$pipe_seq")
cold_ratio=$(div "$cold_conf" "$cold_unconf")
rpc_ratio=$(div "$rpc_serve" "$rpc_direct")
wasm_cached_ms=$([[ -n $wasm_cached ]] && awk -v v="$wasm_cached" 'BEGIN {printf "%.3f", v / 1e6}')
wasm_live_ms=$([[ -n $wasm_live ]] && awk -v v="$wasm_live" 'BEGIN {printf "%.3f", v / 1e6}')
# Row 1's goal is firejail's ratio in the same run (row 1c); its stretch goal, 1.5x, is row 1s.
exec_meets=-
if [[ -n $exec_ratio && -n $firejail_ratio ]]; then
	exec_meets=$(awk -v v="$exec_ratio" -v f="$firejail_ratio" \
		'BEGIN { printf (v < f) ? "yes (below firejail %.2fx)" : "no (firejail %.2fx)", f }')
fi
# Row 7 meets either goal: 3x direct, or 1.2x the floor of a durable decision (row 7c).
# Each round's serve figure against the floor measured in the same round, median of the
# rounds: a floor disturbed by a load spike in one round then decides nothing alone.
rpc_floor_ratio=$(paste -d ' ' <(field median_ns <"$work/out/rpc-serve.txt") <(field median_ns <"$work/out/rpc-relay.txt") \
	<(field median_ns <"$work/out/rpc-fsync-floor.txt") | awk 'NF == 3 && $2 + $3 > 0 {printf "%.4f\n", $1 / ($2 + $3)}' | median)
rpc_meets=-
if [[ -n $rpc_ratio ]]; then
	rpc_meets=$(awk -v r="$rpc_ratio" -v f="$rpc_floor_ratio" 'BEGIN {
		if (r <= 3) print "yes (<=3x direct)"
		else if (f != "" && f < 1) printf "yes (%.2fx of 7c: a noisy floor)", f
		else if (f != "" && f <= 1.2) printf "yes (%.2fx of 7c)", f
		else if (f != "") printf "no (%.2fx of 7c)", f
		else print "no" }')
fi
first_fledge=$(mfield first-fledge median_ns)
first_plugin=$(mfield first-plugin median_ns)
first_fledge_cpu=$(mfield first-fledge cpu_ns)
first_plugin_cpu=$(mfield first-plugin cpu_ns)
first_ms=$([[ -n $first_fledge ]] && awk -v v="$first_fledge" 'BEGIN {printf "%.3f", v / 1e6}')
shot_fledge=$(shot fledge median_ns)
shot_firejail=$(shot firejail median_ns)
shot_bwrap=$(shot bwrap median_ns)
shot_srt=$(shot srt median_ns)
shot_true=$(shot true median_ns)
shot_cpu() { local u s; u=$(shot "$1" user_ns) s=$(shot "$1" sys_ns); [[ -n $u && -n $s ]] && echo $((u + s)) || true; }
shot_fledge_cpu=$(shot_cpu fledge)
shot_firejail_cpu=$(shot_cpu firejail)
# BenchmarkEgressVsDirect reports its figures ready made: Gbit/s, ms, a ratio, ms over direct.
fmt_gbps() { [[ -n $1 ]] && awk -v v="$1" 'BEGIN {printf "%.2f Gbit/s", v}' || echo "n/a"; }
fmt_msv() { [[ -n $1 ]] && awk -v v="$1" 'BEGIN {printf "%.3f ms", v}' || echo "n/a"; }
fmt_x() { [[ -n $1 ]] && awk -v v="$1" 'BEGIN {printf "%.2fx", v}' || echo "n/a"; }
fmt_plus() { [[ -n $1 ]] && awk -v v="$1" 'BEGIN {printf "%+.3f ms", v}' || echo "n/a"; }
row "#" "figure" "fledge" "baseline (same run)" "ratio" "goal" "meets"
row "---" "----------------------------------------------" "------------" "----------------------------------" "--------" "------------------" "-------"
row 1 "exec round trip of true, median (plugin->host)" "$(fmt_ms "$exec_fledge")" "os/exec sh -c true $(fmt_ms "$exec_bare")" "$(ratio "$exec_fledge" "$exec_bare")" "below 1c" "$exec_meets"
row 1s "  stretch goal of row 1" "$(fmt_ms "$exec_fledge")" "os/exec sh -c true $(fmt_ms "$exec_bare")" "$(ratio "$exec_fledge" "$exec_bare")" "<=1.5x" "$(meets "$exec_ratio" 1.5)"
row 1a "  sandbox + protocol only (audit fsync off)" "$(fmt_ms "$exec_nofsync")" "os/exec sh -c true $(fmt_ms "$exec_bare")" "$(ratio "$exec_nofsync" "$exec_bare")" "<=1.4x" "$(meets "$exec_nofsync_ratio" 1.4)"
row 1b "  bubblewrap, minimal (sh -c true)" "$(fmt_ms "$exec_bwrap")" "os/exec sh -c true" "$(ratio "$exec_bwrap" "$exec_bare")" "peer" "-"
row 1c "  firejail --noprofile (sh -c true)" "$(fmt_ms "$exec_firejail")" "os/exec sh -c true" "$(ratio "$exec_firejail" "$exec_bare")" "peer" "-"
row 1d "  floor: a request answered from memory" "$(fmt_ms "$exec_request")" "os/exec sh -c true" "$(ratio "$exec_request" "$exec_bare")" "-" "-"
row 2 "host throughput, $msgs output/log msgs" "$(fmt_rate "$gen_rate")" "bare pipe to cat $(fmt_rate "$raw_rate")" "$(ratio "$gen_rate" "$raw_rate")" ">=1M/s" "$(meets "-$gen_rate" -1000000)"
row 2b "  host peak RSS during it" "$(fmt_mib "$gen_hwm")" "idle host $(fmt_mib "$idle_hwm")" "$(ratio "$gen_hwm" "$idle_hwm")" "<=32 MiB" "$(meets "$gen_hwm" 32768)"
row 3a "flood: 1 GiB without a newline, peak RSS" "$(fmt_mib "$nonl_hwm")" "idle host $(fmt_mib "$idle_hwm")" "$(ratio "$nonl_hwm" "$idle_hwm")" "<=32 MiB" "$(meets "$nonl_hwm" 32768)"
row 3b "flood: 50 MiB line + 1000 msgs, peak RSS" "$(fmt_mib "$long_hwm")" "idle host $(fmt_mib "$idle_hwm")" "$(ratio "$long_hwm" "$idle_hwm")" "<=32 MiB" "$(meets "$long_hwm" 32768)"
row 4 "64 execs of true pipelined, total" "$(fmt_ms "$pipe_par")" "64 one after another $(fmt_ms "$pipe_seq")" "$(ratio "$pipe_par" "$pipe_seq")" "<=0.6x" "$(meets "$pipe_ratio" 0.6)"
row 5 "plugin cold start, confined, median" "$(fmt_ms "$cold_conf")" "unconfined os/exec $(fmt_ms "$cold_unconf")" "$(ratio "$cold_conf" "$cold_unconf")" "<=1.5x" "$(meets "$cold_ratio" 1.5)"
row 6a "audit appends/s, fsync on" "$(fmt_rate "$audit_on")" "fsync off $(fmt_rate "$audit_off")" "$(ratio "$audit_on" "$audit_off")" "-" "-"
row 6b "exec round trip, audit default (fsync), median" "$(fmt_ms "$exec_fledge")" "audit fsync never $(fmt_ms "$exec_nofsync")" "$(ratio "$exec_fledge" "$exec_nofsync")" "-" "-"
export_on=$(metric "$work/out/export.txt" BenchmarkExecExportAB on-ns/op)
export_off=$(metric "$work/out/export.txt" BenchmarkExecExportAB off-ns/op)
export_ratio=$(metric "$work/out/export.txt" BenchmarkExecExportAB ratio)
row 6c "exec round trip, audit export OTLP on, median" "$(fmt_ms "$export_on")" "export off $(fmt_ms "$export_off")" "$([[ -n $export_ratio ]] && printf '%.2fx' "$export_ratio" || echo n/a)" "<=1.05x" "$(meets "$export_ratio" 1.05)"
row 7 "jsonrpc tool/execute via fledge serve, median" "$(fmt_ms "$rpc_serve")" "same plugin direct $(fmt_ms "$rpc_direct")" "$(ratio "$rpc_serve" "$rpc_direct")" "<=3x or <=1.2x 7c" "$rpc_meets"
row 7a "  audit fsync off" "$(fmt_ms "$rpc_nofsync")" "same plugin direct $(fmt_ms "$rpc_direct")" "$(ratio "$rpc_nofsync" "$rpc_direct")" "-" "-"
row 7b "  first call (starts the plugin, handshake)" "$(fmt_ms "$rpc_first")" "-" "-" "-" "-"
row 7c "  floor: relay + a call's audit disk I/O" "$(fmt_ms "$rpc_floor_total")" "same plugin direct $(fmt_ms "$rpc_direct")" "$(ratio "$rpc_floor_total" "$rpc_direct")" "-" "-"
row 7d "  floor: bare relay (2 more pipe hops)" "$(fmt_ms "$rpc_relay")" "same plugin direct $(fmt_ms "$rpc_direct")" "$(ratio "$rpc_relay" "$rpc_direct")" "-" "-"
row 7e "MCP tool call via serve --mcp over HTTP, median" "$(fmt_ms "$mcp_serve_ns")" "same server direct (HTTP) $(fmt_ms "$mcp_direct")" "$(ratio "$mcp_serve_ns" "$mcp_direct")" "-" "-"
row 7f "  first call (connects the remote plugin)" "$(fmt_ms "$mcp_first")" "-" "-" "-" "-"
row 8a "WASM plugin cold start, first compile, median" "$(fmt_ms "$wasm_first")" "native plugin, confined $(fmt_ms "$wasm_native_cold")" "$(ratio "$wasm_first" "$wasm_native_cold")" "-" "-"
row 8b "WASM plugin cold start, cached compile, median" "$(fmt_ms "$wasm_cached")" "native plugin, confined $(fmt_ms "$wasm_native_cold")" "$(ratio "$wasm_cached" "$wasm_native_cold")" "<=15 ms" "$(meets "$wasm_cached_ms" 15)"
row 8d "WASM start, compiled in a long-lived serve, median" "$(fmt_ms "$wasm_live")" "new process, cached $(fmt_ms "$wasm_cached")" "$(ratio "$wasm_live" "$wasm_cached")" "<=2 ms" "$(meets "$wasm_live_ms" 2)"
row 8c "exec round trip from a WASM plugin, median" "$(fmt_ms "$wasm_exec")" "from a native plugin $(fmt_ms "$wasm_native_exec")" "$(ratio "$wasm_exec" "$wasm_native_exec")" "-" "-"
kn=$work/out/kernel.txt
rec_on=$(metric "$kn" BenchmarkKernelRecordAB/record-true on-ns/op)
rec_off=$(metric "$kn" BenchmarkKernelRecordAB/record-true off-ns/op)
tr_on=$(metric "$kn" BenchmarkKernelRecordAB/trace-true on-ns/op)
tr_off=$(metric "$kn" BenchmarkKernelRecordAB/trace-true off-ns/op)
gb_on=$(metric "$kn" BenchmarkKernelRecordAB/trace-gobuild on-ns/op)
gb_off=$(metric "$kn" BenchmarkKernelRecordAB/trace-gobuild off-ns/op)
row 9a "exec of true, kernel refusals recorded (default)" "$(fmt_ms "$rec_on")" "not recorded $(fmt_ms "$rec_off")" "$(ratio "$rec_on" "$rec_off")" "within noise" "-"
row 9b "exec of true, trace mode" "$(fmt_ms "$tr_on")" "default $(fmt_ms "$tr_off")" "$(ratio "$tr_on" "$tr_off")" "-" "-"
row 9c "go build of a small module, trace mode" "$(fmt_ms "$gb_on")" "default $(fmt_ms "$gb_off")" "$(ratio "$gb_on" "$gb_off")" "-" "-"
row 10 "fledge <plugin>: start to first output, median" "$(fmt_ms "$first_fledge")" "the plugin alone $(fmt_ms "$first_plugin")" "$(ratio "$first_fledge" "$first_plugin")" "<=10 ms" "$(meets "$first_ms" 10)"
row 10a "  CPU of such a run (user + sys), median" "$(fmt_ms "$first_fledge_cpu")" "the plugin alone $(fmt_ms "$first_plugin_cpu")" "$(ratio "$first_fledge_cpu" "$first_plugin_cpu")" "-" "-"
row 11 "one-shot fledge --ni PLUGIN (one exec of true)" "$(fmt_ms "$shot_fledge")" "firejail --noprofile true $(fmt_ms "$shot_firejail")" "$(ratio "$shot_fledge" "$shot_firejail")" "<=firejail" "$(meets "$(div "$shot_fledge" "$shot_firejail")" 1)"
row 11a "  CPU of it (user + sys, mean)" "$(fmt_ms "$shot_fledge_cpu")" "firejail $(fmt_ms "$shot_firejail_cpu")" "$(ratio "$shot_fledge_cpu" "$shot_firejail_cpu")" "-" "-"
row 11b "  firejail --noprofile true" "$(fmt_ms "$shot_firejail")" "true alone $(fmt_ms "$shot_true")" "$(ratio "$shot_firejail" "$shot_true")" "peer" "-"
row 11c "  bubblewrap, minimal, true" "$(fmt_ms "$shot_bwrap")" "true alone $(fmt_ms "$shot_true")" "$(ratio "$shot_bwrap" "$shot_true")" "peer" "-"
row 11d "  sandbox-runtime: srt -c true" "$(fmt_ms "$shot_srt")" "true alone $(fmt_ms "$shot_true")" "$(ratio "$shot_srt" "$shot_true")" "peer" "-"
row 12a "network: download 64 MiB, TUN path" "$(fmt_gbps "$net_bulk_tun")" "direct $(fmt_gbps "$net_bulk_direct")" "$(fmt_x "$net_bulk_tun_ratio")" ">=0.5x" "$(meets "${net_bulk_tun_ratio:+-$net_bulk_tun_ratio}" -0.5)"
row 12b "  the same, a granted loopback port" "$(fmt_gbps "$net_bulk_lo")" "direct $(fmt_gbps "$net_bulk_lo_direct")" "$(fmt_x "$net_bulk_lo_ratio")" ">=0.5x" "$(meets "${net_bulk_lo_ratio:+-$net_bulk_lo_ratio}" -0.5)"
row 12c "network: connect+round trip+close, TUN path" "$(fmt_msv "$net_conn_tun")" "direct $(fmt_msv "$net_conn_direct")" "$(fmt_plus "$net_conn_tun_plus")" "<=+0.3 ms" "$(meets "$net_conn_tun_plus" 0.3)"
row 12d "  the same, a granted loopback port" "$(fmt_msv "$net_conn_lo")" "direct $(fmt_msv "$net_conn_lo_direct")" "$(fmt_plus "$net_conn_lo_plus")" "<=+0.3 ms" "$(meets "$net_conn_lo_plus" 0.3)"
join() { local IFS=,; echo "${*:-none}" | sed 's/,/, /g'; }
echo "Goals: ${#goal_yes[@]} of $((${#goal_yes[@]} + ${#goal_no[@]} + ${#goal_unmeasured[@]})) rows with a goal meet it; missed: $(join "${goal_no[@]}"); not measured: $(join "${goal_unmeasured[@]}")."
echo
awk -v a="$exec_fledge" -v b="$exec_nofsync" 'BEGIN {printf "The exec decision fsync adds %.0f us to an exec round trip.\n", (a - b) / 1e3}'
echo "Times are medians (per exec / per start) of $count rounds; cold start is spawn to first message received."
echo "Row 7: a host sends $rpcN tool/execute calls one after another; through fledge serve each is an audit decision (durable) and an outcome, and two more pipe hops; the first call is left out (row 7b)."
awk -v f="$rpc_floor" -v r="$rpc_relay" 'BEGIN { if (f != "" && r != "") printf "Rows 7c-7d: the floors under row 7 on this machine: a bare Go line relay in the middle (%.3f ms), plus the audit log disk I/O of one call with nothing else (a decision line appended and fsynced, the head slot, an outcome line: %.3f ms), which a durable decision per call cannot go below when calls come one at a time.\n", r / 1e6, f / 1e6 }'
echo "Rows 7e-7f: an MCP client (official Go SDK) makes $rpcN echo calls one after another over Streamable HTTP to an echo server on loopback, directly, and through fledge serve --mcp --listen with that server installed as a remote (mcp-remote) plugin: the bearer check, the catalogue and pins, a durable audit decision and an outcome per call, and a second HTTP hop."
echo "Rows 8a-8d (WASM): the Go SDK guest (sandbox/wasm/testdata/guests/benchguest, ~4 MB of wasm) in wazero; first compile is an empty compilation cache, cached a new process's start on a warm cache dir (nothing compiled in memory), 8d a start in a process that already compiled the module (a new runtime handle and audit description per start, as each tool call through fledge serve); each beside the figure measured right before it."
echo "Rows 9a-9c: the sandbox alone (no protocol), each run alternating with its baseline; 9c builds with a fresh GOCACHE each time, so the compiler and linker run and every file they open is a traced call."
echo "Row 6c: sessions of 20 execs alternate between export off and on; on, the background exporter (default 1 s interval) sends to a real OpenTelemetry Collector (its OTLP receiver, testkit/otelcollector); the ratio is the median of each back-to-back pair's ratio."
echo "RSS is the host's own VmHWM; with its plugin and every child it reaped (wait4 ru_maxrss) the largest was $(fmt_mib "$tree_max")."
echo "Row 10: the copied bin/fledge started to run the installed bench plugin's hello, in a project, timed from the fork to the first byte on fledge's stdout (bench/firstout), median of $startN starts in each of $reps rounds, each round beside the plugin started alone; CPU is the whole run's (wait4's rusage)."
if [[ -n $hyperfine ]]; then how="hyperfine --shell=none, $shotN runs after $shotWarm warm-ups, medians; CPU is hyperfine's mean user + sys"; else how="no hyperfine here: bench/measure in a loop, $shotN runs after $shotWarm warm-ups, medians"; fi
echo "Row 11: a whole process, start to exit ($how): fledge --ni fledge-bench oneshot in a project (a session, the plugin, one exec of true, the audit records) against each peer's one-shot sandbox of true; n/a where a peer is not installed."
cpu_line=
for n in fledge firejail bwrap srt true; do
	u=$(shot "$n" user_ns) sy=$(shot "$n" sys_ns)
	[[ -n $u && -n $sy ]] && cpu_line+=$(awk -v n="$n" -v u="$u" -v s="$sy" 'BEGIN {printf "; %s %.1f + %.1f ms", n, u / 1e6, s / 1e6}')
done
[[ -n $cpu_line ]] && echo "Row 11 CPU, user + sys: ${cpu_line#; }."
echo "Rows 12a-12d: sandbox/netstack's BenchmarkEgressVsDirect ($count rounds, -benchtime $bt), a client in a plugin's network namespace against a server on this host, each operation through fledge followed by the same one direct, alternately in one loop (medians; the ratio and the ms over direct are the benchmark's own); the TUN path crosses the TUN device and gVisor's stack, the loopback port a relay socket fledge holds in the namespace."
echo "Reproduce: make bench (FLEDGE_BENCH_INSTALL=1 installs the peers: bwrap, firejail, hyperfine, srt). Raw outputs: FLEDGE_BENCH_KEEP=1."

# The network's raw figures (rows 12a-12d are in the table above).
echo
if grep -q "^Benchmark" <<<"$net_out"; then
	echo "Network by destination, every figure of sandbox/netstack's benchmarks:"
	echo "$net_out" | awk '/^BenchmarkEgress/ {
		name=$1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkEgress/, "", name)
		v=""; for (i=2;i<=NF;i++) { if ($i=="ns/op") ns=$(i-1); if ($i=="MB/s") v=sprintf("%.2f Gbit/s", $(i-1)*8/1000); if ($i=="rss-MiB/100conns") v=sprintf("%.1f MiB RSS growth", $(i-1)) }
		if (v=="") v=sprintf("%.3f ms per op", ns/1e6)
		printf "  %-36s %s\n", name, v }'
	echo "  (fledge-tun crosses the TUN device and gVisor's stack; fledge-loopback is a granted host-loopback port, relayed by a socket in the namespace)"
	# Bound secrets: the same HTTPS request spliced end to end vs read by fledge (TLS
	# terminated with the session CA, the token put in, fledge's own TLS to the server),
	# timed alternately in one benchmark.
	echo "$net_out" | awk '/^BenchmarkEgressHTTPSInject\// {
		name=$1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkEgressHTTPSInject\//, "", name)
		for (i=2;i<=NF;i++) { if ($i=="spliced-ns/op") s[name]=$(i-1); if ($i=="inject-ns/op") j[name]=$(i-1) } }
		END { if (s["keepalive"] > 0)
			printf "  bound secret, kept-alive HTTPS request: %.3f ms vs spliced %.3f ms: %.2fx (goal <= 1.3x)\n", j["keepalive"]/1e6, s["keepalive"]/1e6, j["keepalive"]/s["keepalive"]
		if (s["newconn"] > 0)
			printf "  bound secret, request on a new TLS connection: %+.3f ms against spliced (goal <= +1 ms)\n", (j["newconn"]-s["newconn"])/1e6 }'
fi
for f in "${net_failed[@]}"; do echo "  n/a where unfinished: $f"; done
