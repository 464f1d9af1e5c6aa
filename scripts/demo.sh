#!/usr/bin/env bash
# make demo: fledge in half a minute. Everything happens in a throwaway HOME, config dir and
# audit log under mktemp -d, removed at the end; your own ~/.config and ~/.local are never
# read or written. Exits 0 unless fledge misbehaves (a plugin escaped, the log does not
# verify, a daemon outlived its sandbox, ...).
#
#   FLEDGE_BIN=path/to/fledge bash scripts/demo.sh    # a binary other than bin/fledge
#   KEEP=1 bash scripts/demo.sh                       # keep the throwaway dir to poke at
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fledge=${FLEDGE_BIN:-$repo/bin/fledge}
if [[ ! -x $fledge ]]; then
	echo "demo: $fledge is missing: run 'make build' first (or 'make demo')" >&2
	exit 1
fi
fledge=$(cd "$(dirname "$fledge")" && pwd)/$(basename "$fledge")

if [[ -t 1 ]]; then
	bold=$'\033[1m' dim=$'\033[2m' red=$'\033[31m' green=$'\033[32m' off=$'\033[0m'
else
	bold='' dim='' red='' green='' off=''
fi
section() { printf '\n%s== %s%s\n%s%s%s\n' "$bold" "$1" "$off" "$dim" "$2" "$off"; }
problems=()
problem() {
	problems+=("$1")
	printf '%sPROBLEM: %s%s\n' "$red" "$1" "$off"
}

# ---- a throwaway world -----------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/fledge-demo.XXXXXX")
canary=""
cleanup() {
	[[ -z $canary ]] || kill "$canary" 2>/dev/null || true
	if [[ ${KEEP:-} == 1 ]]; then
		echo "kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

real_home=$HOME
export HOME=$work/home
export FLEDGE_CONFIG_DIR=$HOME/.config/fledge
export FLEDGE_AUDIT_LOG=$HOME/.local/state/fledge/audit.jsonl
unset XDG_CONFIG_HOME XDG_STATE_HOME XDG_DATA_HOME FLEDGE_NON_INTERACTIVE
# System interpreters first: a version manager's shims under your real $HOME (pyenv, asdf)
# are not visible inside the sandbox.
export PATH=/usr/local/bin:/usr/bin:/bin:$PATH
export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=demo GIT_AUTHOR_EMAIL=demo@example.com \
	GIT_COMMITTER_NAME=demo GIT_COMMITTER_EMAIL=demo@example.com
# Fake secrets for the escape artist to go after.
export GITHUB_TOKEN=ghp_demo_not_a_real_token AWS_SECRET_ACCESS_KEY=demo-not-a-real-key
mkdir -p "$HOME/.ssh" "$work/src"
chmod 700 "$HOME/.ssh"
printf -- '-----BEGIN DEMO KEY (not real)-----\n' >"$HOME/.ssh/id_rsa"
chmod 600 "$HOME/.ssh/id_rsa"

proj=$work/demo-app
mkdir -p "$proj"
# The throwaway HOME has no git identity; give the demo commit one.
export GIT_AUTHOR_NAME="fledge demo" GIT_AUTHOR_EMAIL="demo@fledge.invalid"
export GIT_COMMITTER_NAME="fledge demo" GIT_COMMITTER_EMAIL="demo@fledge.invalid"
git -C "$proj" init -q -b main
printf '[project]\nname = "demo-app"\n' >"$proj/fledge.toml"
printf '# demo-app\n' >"$proj/README.md"
git -C "$proj" add -A
git -C "$proj" commit -q -m "first commit"
printf 'work in progress\n' >>"$proj/README.md"

cp -R "$repo/examples/." "$work/src/"
rm -rf "$work/src/hello-go/bin"
have_go=0
if command -v go >/dev/null; then
	(cd "$repo" && go build -o "$work/src/hello-go/bin/hello-go" ./examples/hello-go) && have_go=1
fi

section "1. Setup" "A throwaway HOME ($work), a git project with local changes, a fake ~/.ssh/id_rsa and a fake GITHUB_TOKEN."
echo "fledge: $fledge ($("$fledge" --version 2>/dev/null || echo unknown version))"

# ---- install ---------------------------------------------------------------------------
section "2. Install" "Install never grants silently: --yes grants exactly what each plugin.toml declares, and only that counts at run time."
plugins=(hello-bash hello-python escape-artist)
((have_go)) && plugins=(hello-bash hello-python hello-go escape-artist)
for p in "${plugins[@]}"; do
	"$fledge" --ni plugins install "$work/src/$p" --yes 2>/dev/null || problem "install $p failed"
done
((have_go)) || echo "(hello-go skipped: no go on PATH to build it)"

cd "$proj"

# ---- hello -----------------------------------------------------------------------------
section "3. A friendly plugin" "hello (bash) under --ni: every question takes its default; logs and progress go to stderr, output to stdout; exec runs sandboxed in the project."
"$fledge" --ni hello || problem "hello exited $?"

section "4. Storage, and the same plugin in Python and Go" "A second run with an argument remembers the first (store/load in state.json); the Python and Go versions speak the same protocol."
"$fledge" --ni hello Ada 2>/dev/null | grep -E '^(Answers|Run #)' || problem "hello (second run) failed"
for p in hello-python hello-go; do
	[[ $p != hello-go ]] || ((have_go)) || continue
	printf '%s%s:%s ' "$bold" "$p" "$off"
	"$fledge" --ni "$p" 2>/dev/null | grep -E '^Answers' || problem "$p failed"
done

# ---- the escape artist -----------------------------------------------------------------
section "5. A hostile plugin" "escape-artist holds exec and store and tries a dozen ways out, from its own process and through exec; each line says what happened."
sleep 300 &
canary=$! # a process of yours outside every sandbox: kill -9 -1 must not reach it
registry=$FLEDGE_CONFIG_DIR/plugins.toml
before=$(cksum <"$registry")
status=0
# It is told fledge's pid (inside its pid namespace it cannot see it: the subshell's pid is
# fledge's once exec replaces it) and which of its targets really exist (so "not found"
# inside means hidden by the sandbox).
(exec "$fledge" --ni escape-artist --fledge-pid="$BASHPID" hello-bash "$HOME/.ssh/id_rsa" "$FLEDGE_CONFIG_DIR/plugins/hello-bash/state.json") 2>"$work/escape.err" | tee "$work/escape.out" || status=$?
confinement=$(sed -n 's/^escape-artist: granted .*; sandbox: \([a-z]*\).*/\1/p' "$work/escape.out")
if ((status != 0)); then
	if [[ $confinement == none ]]; then
		echo "(this system has no filesystem confinement, so some attempts got through: see fledge doctor below)"
	else
		problem "escape-artist got out (exit $status) although confinement is '${confinement:-unknown}'"
		cat "$work/escape.err" >&2
	fi
fi

section "6. After fledge exited" "Nothing the plugin started may survive it, and nothing outside its sandbox may have changed."
pids=$(sed -n 's/^\[PENDING\] setsid daemons \([0-9 ]*\) (.*/\1/p' "$work/escape.out")
for pid in $pids; do
	if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q '^sleep 97 '; then
		if [[ $confinement == none ]]; then
			echo "[ESCAPED] setsid daemon $pid survived (no cgroup tree kill here); killing it"
		else
			problem "setsid daemon $pid survived fledge; killing it"
		fi
		kill "$pid" 2>/dev/null || true
	else
		echo "[BLOCKED] setsid daemon $pid: gone with its sandbox"
	fi
done
[[ -n $pids ]] || echo "(no daemon pids reported)"
if ! kill -0 "$canary" 2>/dev/null; then
	problem "the canary process outside the sandbox was killed"
elif grep -q '^\[BLOCKED\] kill -9 -1' "$work/escape.out"; then
	echo "[BLOCKED] kill -9 -1: a process outside the sandbox (pid $canary) is alive"
else
	echo "(kill -9 -1 was not attempted; the process outside the sandbox, pid $canary, is alive)"
fi
if [[ -e $HOME/pwned ]]; then
	[[ $confinement == none ]] || problem "~/pwned was written"
elif grep -q '^\[BLOCKED\] write ~/pwned' "$work/escape.out"; then
	echo "[BLOCKED] ~/pwned does not exist"
else
	echo "(writing ~/pwned was not attempted)"
fi
if [[ $(cksum <"$registry") == "$before" ]]; then
	echo "[BLOCKED] plugins.toml is unchanged"
else
	problem "plugins.toml changed during the escape attempts"
fi

# ---- a JSON-RPC 2.0 tool/hook plugin ----------------------------------------------------------
section "6b. A plugin written for another host" "project-info is a JSON-RPC 2.0 tool/hook plugin (initialize, tool/execute, hook/<name>), written for a host that runs such executables. fledge installs the bare executable (handshake confined, nothing granted), then runs its tool and hooks confined: it reads the project only because it was granted filesystem=project."
"$fledge" --ni plugins install "$work/src/jsonrpc-project/project-info" --protocol jsonrpc-2.0 --grant filesystem=project 2>&1 |
	grep -E '^(Plugin|  [a-z]|Granting|installed)' || problem "install project-info failed"
"$fledge" tools list || problem "tools list failed"
"$fledge" tools call plugin_project-info_lines path=README.md || problem "tools call failed"
if out=$("$fledge" tools call plugin_project-info_lines path="$HOME/.ssh/id_rsa"); then
	problem "project-info read ~/.ssh/id_rsa: $out"
else
	echo "~/.ssh/id_rsa from the plugin: $out (exit $?)"
fi
"$fledge" hooks run context_enhance --params '{"user_message":"hi","dynamic_context":"You are helpful."}' |
	grep -q 'Files: README.md, fledge.toml' && echo "context_enhance: the project's files were added to the prompt" ||
	problem "context_enhance did not add the project"
"$fledge" hooks run pre_tool_execute --params '{"tool_name":"shell","arguments":"rm -rf /"}' || problem "hooks run failed"
echo "fledge serve: the same plugin behind fledge, as one plugin of a JSON-RPC host:"
printf '%s\n' '{"jsonrpc":"2.0","method":"initialize","params":{"protocol_version":1},"id":1}' \
	'{"jsonrpc":"2.0","method":"tool/execute","params":{"name":"project-info_lines","arguments":{"path":"fledge.toml"}},"id":2}' \
	'{"jsonrpc":"2.0","method":"shutdown","params":{},"id":3}' |
	"$fledge" serve --protocol jsonrpc-2.0 | cut -c1-160 || problem "serve failed"

# ---- audit -----------------------------------------------------------------------------
section "7. The audit log" "Every decision is recorded before it takes effect, outside every sandbox. fledge's own refusals:"
"$fledge" audit show --decision deny | head -n 16 || problem "audit show failed"
echo "(the file and signal denials above happened in the kernel: the plugin got EACCES/EPERM, and"
echo " each exec's decision and outcome is a record; $("$fledge" audit show --json | wc -l) records in all: try"
echo " 'fledge audit show --plugin escape-artist --event exec_outcome')"

section "8. Tamper evidence" "The log is hash-chained: audit verify passes, and fails once one record is edited."
"$fledge" audit verify || problem "audit verify failed on an untouched log"
tampered=$work/tampered.jsonl
cp "$FLEDGE_AUDIT_LOG" "$tampered"
# Flip the first denial into an allow, as an attacker covering their tracks would.
line=$(grep -n '"decision":"deny"' "$tampered" | head -n 1 | cut -d: -f1)
if [[ -n $line ]]; then
	sed -i.bak "${line}s/\"decision\":\"deny\"/\"decision\":\"allow\"/" "$tampered"
	if out=$(FLEDGE_AUDIT_LOG=$tampered "$fledge" audit verify 2>&1); then
		problem "audit verify accepted an edited log"
	else
		echo "after editing record on line $line: ${out%%$'\n'*}"
	fi
fi

# ---- an MCP server, confined -------------------------------------------------------------
section "9. An MCP server, confined" "The official filesystem MCP server, installed from npm with one command, gets the project as its root; fledge serves it to MCP clients (fledge serve --mcp). The project reads; ~/.ssh/id_rsa does not, and the audit log says so."
mcp_demo() {
	local node npm
	node=$(command -v node || true)
	npm=$(command -v npm || true)
	if [[ -z $node || -z $npm || $node == "$real_home"/* ]]; then
		echo "(skipped: node and npm are needed outside your home dir, e.g. apt-get install nodejs npm)"
		return 0
	fi
	# npm's own cache under your real home: a warm cache makes this work offline.
	local cache=${XDG_CACHE_HOME:-$real_home/.cache}/fledge-demo-npm
	mkdir -p "$cache"
	# One command: npm fetches it (no package code runs), fledge writes the plugin around it,
	# runs any install script confined, and lists (and pins) its tools.
	if ! npm_config_cache=$cache "$fledge" --ni plugins install npm:@modelcontextprotocol/server-filesystem --version 2026.8.31 --yes >"$work/npm.log" 2>&1; then
		if grep -q 'npm could not fetch' "$work/npm.log"; then
			echo "(skipped: npm cannot reach the registry and the package is not in npm's cache:"
			grep -m 2 'npm could not fetch' "$work/npm.log" | sed 's/^/   /'
			echo " run it once online to warm the cache; the rest of the demo does not need npm)"
			return 0
		fi
		problem "install of the MCP server failed: $(tail -n 1 "$work/npm.log")"
		return 0
	fi
	echo "installed with: fledge plugins install npm:@modelcontextprotocol/server-filesystem"
	echo "an MCP client's whole config:  {\"command\": \"fledge\", \"args\": [\"serve\", \"--mcp\"]}"
	# A tiny MCP client in bash: one JSON-RPC request per line, one answer read back each time.
	coproc MCP { "$fledge" serve --mcp --tools plugin_server-filesystem_read_text_file 2>"$work/serve.err"; }
	local reply i=1
	ask() {
		printf '%s\n' "$1" >&"${MCP[1]}"
		IFS= read -r -t 60 reply <&"${MCP[0]}" || reply='{"error":"no answer from fledge serve --mcp"}'
	}
	ask '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"demo","version":"1"}}}'
	printf '%s\n' '{"jsonrpc":"2.0","method":"notifications/initialized"}' >&"${MCP[1]}"
	for path in "$proj/README.md" "$HOME/.ssh/id_rsa"; do
		i=$((i + 1))
		ask '{"jsonrpc":"2.0","id":'$i',"method":"tools/call","params":{"name":"plugin_server-filesystem_read_text_file","arguments":{"path":"'"$path"'"}}}'
		printf '%sread %s%s\n' "$bold" "${path/#$work/\$DEMO}" "$off"
		"$node" -e 'const r=JSON.parse(process.argv[1]).result||{}; console.log((r.isError?"  refused: ":"  ")+(r.content||[]).map(c=>c.text).join(" ").trim().split("\n").join("\n  "))' "$reply"
		if [[ $path == */id_rsa && $reply == *"DEMO KEY"* ]]; then
			problem "the MCP server read ~/.ssh/id_rsa"
		fi
	done
	exec {MCP[1]}>&-
	wait "$MCP_PID" 2>/dev/null || true
	echo "the audit log (tool calls record argument keys, not values; the refused read is an error outcome):"
	"$fledge" audit show --plugin server-filesystem | grep -E 'plugin_start|tool_call|tool_outcome|plugin_exit' || problem "no tool records in the audit log"
	"$fledge" audit show --plugin server-filesystem --event tool_outcome --json | grep -q '"decision":"error","reason":"tool_error"' ||
		problem "the refused read is not in the audit log"
}
mcp_demo

# ---- network by destination -------------------------------------------------------------
section "9b. Network by destination" "netcheck is granted one destination (localhost:PORT). From its own process and from a command it runs, curl reaches that one; another host (this machine's own address) and an ungranted name are refused, and both decisions are in the audit log. No proxy settings: the plugin runs in a network namespace whose only way out is fledge."
net_demo() {
	local doc
	doc=$("$fledge" doctor --json)
	if [[ $doc != *'"network_egress": "netns'* ]]; then
		echo "network by destination is not available here (it needs root): $(grep -o '"network_egress": *"[^"]*"' <<<"$doc" || true)"
		return
	fi
	local other
	other=$(hostname -I 2>/dev/null | awk '{print $1}')
	[[ -n $other ]] || other=192.0.2.1
	mkdir -p "$work/www"
	echo "hello from the granted host" >"$work/www/index.html"
	python3 -u -m http.server --bind 127.0.0.1 0 --directory "$work/www" >"$work/www1.log" 2>&1 &
	local srv1=$!
	python3 -u -m http.server --bind 0.0.0.0 0 --directory "$work/www" >"$work/www2.log" 2>&1 &
	local srv2=$!
	local p1="" p2=""
	for _ in $(seq 50); do
		p1=$(sed -n 's/.* port \([0-9]*\) .*/\1/p' "$work/www1.log" | head -1 || true)
		p2=$(sed -n 's/.* port \([0-9]*\) .*/\1/p' "$work/www2.log" | head -1 || true)
		[[ -n $p1 && -n $p2 ]] && break
		sleep 0.1
	done
	mkdir -p "$work/src/netcheck"
	cat >"$work/src/netcheck/plugin.toml" <<-TOML
		[plugin]
		name = "netcheck"
		version = "0.1.0"
		protocol = "fledge-v1"

		[[commands]]
		name = "netcheck"
		binary = "netcheck.sh"

		[capabilities]
		exec = true
		network = ["localhost:$p1"]
	TOML
	cat >"$work/src/netcheck/netcheck.sh" <<-'SH'
		#!/usr/bin/env bash
		read -r _init
		say() { printf '{"type":"output","text":"%s\\n"}\n' "$1"; }
		if body=$(curl -sS --max-time 5 http://localhost:@P1@/ 2>&1); then say "plugin -> localhost:@P1@: $body"; else say "plugin -> localhost:@P1@: refused"; fi
		if curl -sS --max-time 5 http://@OTHER@:@P2@/ >/dev/null 2>&1; then say "plugin -> @OTHER@:@P2@: REACHED"; else say "plugin -> @OTHER@:@P2@: refused"; fi
		if getent hosts example.org >/dev/null; then say "lookup example.org: RESOLVED"; else say "lookup example.org: refused (NXDOMAIN)"; fi
		printf '{"type":"exec","id":"1","command":"curl -sS --max-time 5 http://localhost:@P1@/; curl -sS --max-time 5 http://@OTHER@:@P2@/ >/dev/null 2>&1 && echo REACHED || echo refused"}\n'
		read -r reply
		say "its command -> localhost:@P1@ then @OTHER@:@P2@: $(printf '%s' "$reply" | grep -o '"stdout":"[^"]*"' | cut -d'"' -f4 | sed 's/\\n/ \/ /g')"
	SH
	sed -i "s/@P1@/$p1/g; s/@P2@/$p2/g; s/@OTHER@/$other/g" "$work/src/netcheck/netcheck.sh"
	chmod +x "$work/src/netcheck/netcheck.sh"
	"$fledge" --ni plugins install --yes "$work/src/netcheck" | sed 's/^/  /'
	"$fledge" --ni netcheck | tee "$work/netcheck.out" || problem "netcheck failed"
	grep -q "localhost:$p1: hello from the granted host" "$work/netcheck.out" || problem "the granted destination did not answer"
	grep -q "REACHED\|RESOLVED" "$work/netcheck.out" && problem "netcheck reached what it was not granted"
	echo "the audit log (net_connect, net_dns):"
	"$fledge" audit show --plugin netcheck | grep -E 'net_connect|net_dns' || true
	[[ $("$fledge" audit show --plugin netcheck --event net_connect --decision allow) == *net_connect* ]] || problem "no net_connect allow record"
	[[ $("$fledge" audit show --plugin netcheck --event net_connect --decision deny) == *net_connect* ]] || problem "no net_connect deny record"
	kill "$srv1" "$srv2" 2>/dev/null || true
	wait "$srv1" "$srv2" 2>/dev/null || true
}
net_demo

# ---- doctor ----------------------------------------------------------------------------
section "10. This machine" "fledge doctor: what the OS lets fledge enforce here, and what it cannot."
"$fledge" doctor || problem "doctor failed"

section "Done" "Removing $work; your own config and audit log were never touched."
if ((${#problems[@]})); then
	printf '%s%d problem(s):%s\n' "$red" "${#problems[@]}" "$off"
	printf '  - %s\n' "${problems[@]}"
	exit 1
fi
printf '%sAll good.%s Next: fledge plugins new my-plugin --lang bash|python|go, and docs/plugin-authors.md.\n' "$green" "$off"
