#!/usr/bin/env bash
# hello-bash: a fledge-v1 plugin in plain bash (no jq) that uses every message of the
# protocol once: output, log (each level), progress (bar, spinner, done), prompt (with a
# default and a validator), confirm, select, multi_select, store, load, exec and metadata.
#
# fledge writes one JSON object per line to our stdin; we write ours to stdout. stdout is the
# protocol channel, so diagnostics for humans go to stderr (or, better, a "log" message).
# Every question has a default, so `fledge --ni hello` completes without a terminal.
set -euo pipefail

# ---- a tiny JSON toolkit -------------------------------------------------------------------
# Enough for what fledge sends: compact JSON, "type" first, then "id". JSON escaping is
# unambiguous, so a regex over one line finds a key's value without a full parser.

# json_str TEXT: TEXT as a JSON string literal.
json_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\n'/\\n}
	s=${s//$'\r'/\\r}
	s=${s//$'\t'/\\t}
	s=${s//[$'\x01'-$'\x08'$'\x0b'$'\x0c'$'\x0e'-$'\x1f']/} # other controls: dropped
	printf '"%s"' "$s"
}

# json_unescape RAW: the text of a JSON string body (\n, \", \\, \uXXXX ...).
json_unescape() {
	local s=${1//\\\"/\"}
	s=${s//\\\//\/}
	printf '%b' "$s"
}

# json_get_str LINE KEY: the first string value of KEY in LINE (empty if absent).
json_get_str() {
	local re="\"$2\":\"(([^\"\\\\]|\\\\.)*)\""
	[[ $1 =~ $re ]] || return 0
	json_unescape "${BASH_REMATCH[1]}"
}

# json_get_raw LINE KEY: the first number, true, false or null value of KEY.
json_get_raw() {
	local re="\"$2\":(-?[0-9][0-9.eE+-]*|true|false|null)"
	[[ $1 =~ $re ]] && printf '%s' "${BASH_REMATCH[1]}"
	return 0
}

# json_get_list LINE KEY: each string of the array KEY, one per line.
json_get_list() {
	local rest=${1#*\"$2\":\[} re='^"(([^"\\]|\\.)*)",?'
	[[ $rest != "$1" ]] || return 0
	while [[ $rest =~ $re ]]; do
		json_unescape "${BASH_REMATCH[1]}"
		printf '\n'
		rest=${rest:${#BASH_REMATCH[0]}}
	done
}

# json_get_keys LINE KEY: the keys of the string-valued object KEY, one per line.
json_get_keys() {
	local rest=${1#*\"$2\":\{} re='^"(([^"\\]|\\.)*)":"(([^"\\]|\\.)*)",?'
	[[ $rest != "$1" ]] || return 0
	while [[ $rest =~ $re ]]; do
		json_unescape "${BASH_REMATCH[1]}"
		printf '\n'
		rest=${rest:${#BASH_REMATCH[0]}}
	done
}

# ---- the protocol --------------------------------------------------------------------------
send() { printf '%s\n' "$1"; }
output() { send "{\"type\":\"output\",\"text\":$(json_str "$1")}"; }
log() { send "{\"type\":\"log\",\"level\":\"$1\",\"message\":$(json_str "$2")}"; }
progress() { send "{\"type\":\"progress\",\"message\":$(json_str "$1"),\"current\":$2,\"total\":$3}"; }
spinner() { send "{\"type\":\"progress\",\"message\":$(json_str "$1")}"; }
progress_done() { send '{"type":"progress","done":true}'; }
store() { send "{\"type\":\"store\",\"key\":$(json_str "$1"),\"value\":$(json_str "$2")}"; }

NEXT_ID=0
REPLY_LINE=""
CANCEL_REASON=""

# await ID: read until the response (status 0) or the cancel (status 1) for request ID.
# Other inbound lines are ignored, as the spec asks (forward compatibility).
await() {
	local line re='^\{"type":"(response|cancel)"(,"id":"([^"]*)")?'
	while IFS= read -r line; do
		[[ $line =~ $re ]] || continue
		local typ=${BASH_REMATCH[1]} hasid=${BASH_REMATCH[2]} id=${BASH_REMATCH[3]}
		if [[ $typ == cancel && -z $hasid ]]; then
			# The whole session is cancelled (Ctrl+C, timeout): clean up and leave promptly.
			printf 'hello-bash: cancelled by fledge (%s)\n' "$(json_get_str "$line" reason)" >&2
			exit 130
		fi
		[[ $id == "$1" ]] || continue
		REPLY_LINE=$line
		if [[ $typ == cancel ]]; then
			CANCEL_REASON=$(json_get_str "$line" reason)
			return 1
		fi
		return 0
	done
	echo "hello-bash: fledge closed our stdin" >&2
	exit 1
}

# request TYPE FIELDS: send an id-bearing request and wait for its answer in REPLY_LINE.
request() {
	NEXT_ID=$((NEXT_ID + 1))
	send "{\"type\":\"$1\",\"id\":\"$NEXT_ID\"${2:+,$2}}"
	await "$NEXT_ID"
}

# ---- the plugin ----------------------------------------------------------------------------
IFS= read -r INIT || {
	echo "hello-bash: no init message: run me through fledge" >&2
	exit 1
}
mapfile -t ARGS < <(json_get_list "$INIT" args)
PLUGIN_NAME=$(json_get_str "${INIT#*\"plugin\":\{}" name) # plugin.name, not project.name
CAN_EXEC=$(json_get_raw "$INIT" exec)
CAN_STORE=$(json_get_raw "$INIT" store)
CAN_META=$(json_get_raw "$INIT" metadata)
CONFINEMENT=$(json_get_str "$INIT" confinement)

log debug "init received: ${#ARGS[@]} argument(s), protocol $(json_get_str "$INIT" protocol)"
log info "granted: exec=${CAN_EXEC:-false} store=${CAN_STORE:-false} metadata=${CAN_META:-false}; sandbox: ${CONFINEMENT:-unknown}"
log warn "warnings look like this (nothing is wrong)"
log error "errors look like this (nothing failed)"
output "Hello from $PLUGIN_NAME, a fledge-v1 plugin written in bash."$'\n'

# load: what did we call the user last time?
last_name=""
if request load '"key":"last_name"'; then
	[[ $(json_get_raw "$REPLY_LINE" value) == null ]] || last_name=$(json_get_str "$REPLY_LINE" value)
fi
default_name=${ARGS[0]:-${last_name:-world}}

# prompt with a default and a validator; under --ni fledge answers with the default.
name=$default_name
if request prompt "\"message\":\"Who should I greet?\",\"default\":$(json_str "$default_name"),\"validate\":\"non_empty\""; then
	name=$(json_get_str "$REPLY_LINE" value)
else
	log warn "name prompt cancelled ($CANCEL_REASON); using $name"
fi

count=3
if request prompt '"message":"How many greetings (1-9)?","default":"3","validate":"integer"'; then
	count=$(json_get_str "$REPLY_LINE" value)
fi
# Check the shape before arithmetic: bash would evaluate an answer like a[$(cmd)].
[[ $count =~ ^[1-9]$ ]] || {
	log warn "count $count is out of range; using 3"
	count=3
}

shout=false
if request confirm '"message":"Shout it?","default":false'; then
	shout=$(json_get_raw "$REPLY_LINE" value)
fi

style=casual
if request select '"message":"Greeting style:","options":["formal","casual","pirate"],"default":1'; then
	style=$(json_get_str "$REPLY_LINE" value)
fi

langs=(en fr)
if request multi_select '"message":"Also greet in:","options":["en","fr","de","es"],"defaults":[0,1]'; then
	langs=()
	mapfile -t langs < <(json_get_list "$REPLY_LINE" value)
fi

output "Answers: name=$name count=$count shout=$shout style=$style also=${langs[*]}"$'\n'

case $style in
formal) word="Good day" ;;
pirate) word="Ahoy" ;;
*) word="Hello" ;;
esac
greeting="$word, $name!"
[[ $shout != true ]] || greeting=${greeting^^}

# progress: a bar while we greet, then clear it.
for ((i = 1; i <= count; i++)); do
	progress "Greeting" "$i" "$count"
	output "  $i. $greeting"$'\n'
done
progress_done
for l in "${langs[@]}"; do
	case $l in
	fr) output "  (fr) Bonjour, $name !"$'\n' ;;
	de) output "  (de) Hallo, $name!"$'\n' ;;
	es) output "  (es) ¡Hola, $name!"$'\n' ;;
	esac
done

# store: remember the name and count the runs.
runs=0
if request load '"key":"runs"'; then
	v=$(json_get_str "$REPLY_LINE" value)
	[[ $v =~ ^[0-9]+$ ]] && runs=$v
fi
runs=$((runs + 1))
store last_name "$name"
store runs "$runs"
output "Run #$runs of this plugin here (stored in its state.json)."$'\n'

# exec: fledge runs the command in the sandbox, in the project root, and returns the result.
if request exec "\"command\":$(json_str "seq 1 $((count + 2)) | grep -v 2 | sed 's/^/  line /'"),\"timeout\":10"; then
	code=$(json_get_raw "$REPLY_LINE" code)
	output "exec 'seq | grep | sed' exited $code:"$'\n'"$(json_get_str "$REPLY_LINE" stdout)"$'\n'
	[[ $code == 0 ]] || log error "exec failed: $(json_get_str "$REPLY_LINE" stderr)"
fi
spinner "Sleeping a second in the sandbox"
if request exec '"command":"sleep 1 && echo rested","timeout":5'; then
	output "exec 'sleep 1' said: $(json_get_str "$REPLY_LINE" stdout)"$'\n'
fi
progress_done
if request exec '"command":"sleep 5","timeout":1'; then
	output "exec 'sleep 5' with a 1s timeout: code $(json_get_raw "$REPLY_LINE" code), timed_out=$(json_get_raw "$REPLY_LINE" timed_out)"$'\n'
fi

# metadata: project facts fledge collects for us (the env is filtered: no secrets).
if request metadata '"keys":["git_status","git_log","env","fledge_config"]'; then
	mapfile -t changed < <(json_get_list "$REPLY_LINE" git_status)
	mapfile -t commits < <(json_get_list "$REPLY_LINE" git_log)
	mapfile -t envnames < <(json_get_keys "$REPLY_LINE" env)
	cfg=${REPLY_LINE#*\"fledge_config\":}
	cfg=${cfg%%,\"git_log\":*}
	output "metadata: ${#changed[@]} changed file(s), ${#commits[@]} commit(s), latest: ${commits[0]:-none}"$'\n'
	output "metadata: env has ${#envnames[@]} variable(s): ${envnames[*]:0:6}"$'\n'
	output "metadata: fledge.toml: ${cfg:0:120}"$'\n'
fi

log info "done"
output "Bye!"$'\n'
