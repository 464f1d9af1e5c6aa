#!/usr/bin/python3
# An attacking plugin driven by its arguments, for exec attacks: args[0] is a JSON list of
# steps (messages to send; a step with an "id" waits for its reply). Unlike scripted.py it
# summarises replies so that a reply carrying megabytes of output does not make the final
# report line longer than the host accepts: stdout/stderr are cut to 4096 characters and
# their full lengths are added as stdout_len/stderr_len. It also records, per id, how many
# seconds the reply took (elapsed), measured inside the plugin.
# At the end it prints one output message: {"init": <init>, "replies": {id: reply}}.
import json, sys, time

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

def summarise(msg):
    v = msg.get("value")
    if isinstance(v, dict):
        for k in ("stdout", "stderr"):
            if isinstance(v.get(k), str):
                v[k + "_len"] = len(v[k])
                v[k] = v[k][:4096]
    return msg

init = json.loads(sys.stdin.readline())
steps = json.loads(init["args"][0]) if init["args"] else []
replies = {}
for step in steps:
    started = time.monotonic()
    send(step)
    if "id" not in step:
        continue
    want = str(step["id"])
    while want not in replies:
        line = sys.stdin.readline()
        if not line:
            break
        msg = json.loads(line)
        if "id" in msg:
            msg = summarise(msg)
            msg["elapsed"] = time.monotonic() - started
            replies[str(msg["id"])] = msg
send({"type": "output", "text": json.dumps({"init": init, "replies": replies}) + "\n"})
