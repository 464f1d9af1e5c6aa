#!/usr/bin/python3
# A hostile python3 plugin: with whatever it was granted, the plugin process itself (no exec
# request, no fledge involvement) tries to reach what it must not. Its args are key=value
# pairs naming the targets. Each attempt prints one output line "RESULT <name>=ok <data>" or
# "RESULT <name>=denied <error>", so the test sees what the kernel let through; the data read
# is printed too, so a leak would show in the host's stdout.
import json, os, signal, socket, subprocess, sys

def out(text):
    sys.stdout.write(json.dumps({"type": "output", "text": text + "\n"}) + "\n")
    sys.stdout.flush()

init = json.loads(sys.stdin.readline())
A = dict(a.split("=", 1) for a in init["args"])
out("INIT " + json.dumps(init))

def attempt(name, fn):
    try:
        data = fn()
        out("RESULT %s=ok %s" % (name, json.dumps(data if data is not None else "")))
    except Exception as e:  # every failure counts as denied; the error says why
        out("RESULT %s=denied %s" % (name, json.dumps(repr(e))))

def read(path):
    with open(path) as f:
        return f.read()

def write(path, mode="w"):
    with open(path, mode) as f:
        f.write("pwned-by-plugin\n")

def env_token():
    leaked = {k: v for k, v in os.environ.items() if k in ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "MYVAR")}
    if leaked:
        return leaked
    raise LookupError("no credential in the environment")

def connect():
    s = socket.create_connection(("127.0.0.1", int(A["port"])), timeout=3)
    s.sendall(b"hello-from-plugin\n")
    s.close()

def tools():
    r = subprocess.run(["sh", "-c", "seq 3 | grep 2 | sed s/2/two/; sleep 0.1"], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return r.stdout

attempt("read_ssh", lambda: read(os.path.join(A["home"], ".ssh", "id_rsa")))
attempt("read_aws", lambda: read(os.path.join(A["home"], ".aws", "credentials")))
attempt("list_config", lambda: os.listdir(A["config"]))
attempt("read_plugins_toml", lambda: read(os.path.join(A["config"], "plugins.toml")))
attempt("read_other_state", lambda: read(A["other_state"]))
attempt("read_audit", lambda: read(A["audit"]))
attempt("read_host_environ", lambda: read("/proc/%s/environ" % A["host_pid"]))
attempt("write_home", lambda: write(A["home_target"]))
attempt("write_tmp", lambda: write(A["tmp_target"]))
attempt("append_plugins_toml", lambda: write(os.path.join(A["config"], "plugins.toml"), "a"))
attempt("rewrite_self", lambda: write(sys.argv[0], "a"))
attempt("plant_plugin_dir", lambda: write(os.path.join(init["plugin"]["dir"], "planted")))
attempt("write_state", lambda: write(os.path.join(init["plugin"]["dir"], "state.json")))
attempt("env_token", env_token)
attempt("connect", connect)
attempt("kill_host", lambda: os.kill(int(A["host_pid"]), signal.SIGKILL))
attempt("kill_canary", lambda: os.kill(int(A["canary_pid"]), signal.SIGKILL))
if A.get("kill_all") == "1":
    # kill(-1) spares the caller and may report success with nothing outside the sandbox
    # signalled: what counts is that the host and the canary are still alive afterwards.
    attempt("kill_all", lambda: os.kill(-1, signal.SIGKILL))
attempt("list_project", lambda: os.listdir(A["project"]))
attempt("read_project", lambda: read(os.path.join(A["project"], "fledge.toml")))
attempt("write_project", lambda: write(os.path.join(A["project"], "pwned")))
# What the plugin is meant to be able to do.
attempt("write_data", lambda: write(os.path.join(init["plugin"]["data_dir"], "ok")))
attempt("write_tmpdir", lambda: write(os.path.join(os.environ["TMPDIR"], "ok")))
attempt("read_self", lambda: len(read(sys.argv[0])))
attempt("tools", tools)
out("DONE")
