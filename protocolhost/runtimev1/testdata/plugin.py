#!/usr/bin/python3
# A runtime-v1 test plugin. What it does is chosen by the file "mode" next to it, so one
# script covers every rule of the protocol (the host never passes the environment through).
import json, os, sys, time

here = os.path.dirname(os.path.abspath(__file__))
mode = open(os.path.join(here, "mode")).read().strip()

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

req = json.loads(sys.stdin.readline())
manifest = {
    "plugin_id": "rt", "plugin_version": "1.0.0", "protocol_version": "1",
    "exposed_tools": ["echo", "readfile", "slow"],
    "capabilities": req["capabilities"],
}
if mode == "no_version":
    del manifest["plugin_version"]
elif mode == "proto2":
    manifest["protocol_version"] = "2"
elif mode == "no_caps":
    del manifest["capabilities"]
elif mode.startswith("caps="):
    manifest["capabilities"] = json.loads(mode[5:])
elif mode == "narrow":
    manifest["capabilities"] = ["network"]
elif mode == "hs_garbage":
    sys.stdout.write("handshake: hello\n"); sys.stdout.flush(); sys.exit(0)
elif mode == "hs_exit":
    sys.exit(4)
elif mode == "hs_sleep":
    time.sleep(60)
send({"type": "handshake", "manifest": manifest})

line = sys.stdin.readline()
if not line:
    sys.exit(0)  # discovery: the host closed stdin after the handshake
ex = json.loads(line)
if mode == "crash":
    sys.exit(3)
if mode == "slow" or ex["tool"] == "slow":
    time.sleep(60)
if mode == "garbage":
    sys.stdout.write('{"type":"result","output":1} trailing\n'); sys.stdout.flush(); sys.exit(0)
if mode == "wrongtype":
    send({"type": "progress", "output": 1}); sys.exit(0)
if mode == "plugin_error":
    send({"type": "error", "error": {"code": "bad_input", "message": "no such thing"}}); sys.exit(0)
if ex["tool"] == "readfile":
    try:
        with open(ex["input"]["path"]) as f:
            out = {"read": f.read()}
    except OSError as e:
        out = {"error": e.strerror}
    send({"type": "result", "output": out})
else:
    send({"type": "result", "output": {"tool": ex["tool"], "input": ex["input"]}})
if mode == "second_line":
    send({"type": "result", "output": "again"})
