#!/bin/bash
# A hostile bash plugin, the same attacks as attack_self.py with shell tools: with whatever it
# was granted, the plugin process itself tries to reach what it must not. Its args are
# key=value pairs; each attempt prints "RESULT <name>=ok <data>" or "RESULT <name>=denied".
# It parses its init with sed and uses grep, seq and sleep, as the reference hello plugin does.
read -r INIT
declare -A A
IFS=$'\n'
for kv in $(printf '%s' "$INIT" | sed -n 's/.*"args":\[\([^]]*\)\].*/\1/p' | sed 's/^"//; s/"$//; s/","/\n/g'); do
  A[${kv%%=*}]=${kv#*=}
done
unset IFS
PLUGIN_DIR=$(printf '%s' "$INIT" | sed -n 's/.*"plugin":{[^}]*"dir":"\([^"]*\)".*/\1/p')
DATA_DIR=$(printf '%s' "$INIT" | sed -n 's/.*"plugin":{[^}]*"data_dir":"\([^"]*\)".*/\1/p')

esc() { sed 's/\\/\\\\/g; s/"/\\"/g' | tr '\n\t\r' '   '; }
out() { printf '{"type":"output","text":"%s\\n"}\n' "$(printf '%s' "$1" | esc)"; }
out "INIT $INIT"

# attempt NAME CMD...: runs CMD in a subshell, reports ok with its output or denied.
attempt() {
  local name=$1; shift
  local data
  if data=$("$@" 2>&1); then
    out "RESULT $name=ok $data"
  else
    out "RESULT $name=denied $data"
  fi
}
pwn() { echo pwned-by-plugin > "$1"; }
pwn_append() { echo pwned-by-plugin >> "$1"; }
env_token() { env | grep -E '^(GITHUB_TOKEN|AWS_SECRET_ACCESS_KEY|MYVAR)='; }
connect() { exec 3<>"/dev/tcp/127.0.0.1/${A[port]}" && echo hello-from-plugin >&3; }
tools() { seq 3 | grep 2 | sed s/2/two/ && sleep 0.1; }

attempt read_ssh cat "${A[home]}/.ssh/id_rsa"
attempt read_aws cat "${A[home]}/.aws/credentials"
attempt list_config ls -la "${A[config]}"
attempt read_plugins_toml cat "${A[config]}/plugins.toml"
attempt read_other_state cat "${A[other_state]}"
attempt read_audit cat "${A[audit]}"
attempt read_host_environ cat "/proc/${A[host_pid]}/environ"
attempt write_home pwn "${A[home_target]}"
attempt write_tmp pwn "${A[tmp_target]}"
attempt append_plugins_toml pwn_append "${A[config]}/plugins.toml"
attempt rewrite_self pwn_append "$0"
attempt plant_plugin_dir pwn "$PLUGIN_DIR/planted"
attempt write_state pwn "$PLUGIN_DIR/state.json"
attempt env_token env_token
attempt connect connect
attempt kill_host kill -9 "${A[host_pid]}"
attempt kill_canary kill -9 "${A[canary_pid]}"
if [ "${A[kill_all]}" = 1 ]; then
  # In this shell, not a subshell: kill(-1) spares only its caller, and a subshell caller
  # would take this plugin down with everything else it may signal.
  if kill -9 -1 2>/dev/null; then out "RESULT kill_all=ok"; else out "RESULT kill_all=denied"; fi
fi
attempt list_project ls "${A[project]}"
attempt read_project cat "${A[project]}/fledge.toml"
attempt write_project pwn "${A[project]}/pwned"
attempt write_data pwn "$DATA_DIR/ok"
attempt write_tmpdir pwn "$TMPDIR/ok"
attempt read_self wc -c "$0"
attempt tools tools
out DONE
