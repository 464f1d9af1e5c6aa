#!/usr/bin/python3
# A test plugin driven by its arguments: args[0] is a JSON list of steps. Each step is a
# message to send; a step with an "id" waits for the reply (response or cancel) with that id.
# Raw lines (strings) are written verbatim. At the end it prints one output message whose text
# is the JSON of {"init": <init>, "replies": {id: reply}}, then exits with args[1] (default 0).
import json, sys

def send(obj):
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()

init = json.loads(sys.stdin.readline())
steps = json.loads(init["args"][0]) if init["args"] else []
code = int(init["args"][1]) if len(init["args"]) > 1 else 0
replies = {}
waiting = []
for step in steps:
    if isinstance(step, dict) and step.get("_wait_all"):
        for wid in waiting:
            while wid not in replies:
                msg = json.loads(sys.stdin.readline())
                if "id" in msg:
                    replies[str(msg["id"])] = msg
        waiting = []
        continue
    if isinstance(step, dict) and "_sleep" in step:
        import time
        time.sleep(step["_sleep"])
        continue
    if isinstance(step, dict) and "_bigline" in step:
        sys.stdout.write('{"type":"output","text":"' + "x" * step["_bigline"] + '"}\n')
        sys.stdout.flush()
        continue
    send(step)
    if isinstance(step, dict) and "id" in step and not step.get("_nowait"):
        if step.get("_pipeline"):
            waiting.append(str(step["id"]))
            continue
        want = str(step["id"])
        while want not in replies:
            line = sys.stdin.readline()
            if not line:
                break
            msg = json.loads(line)
            if "id" in msg:
                replies[str(msg["id"])] = msg
send({"type": "output", "text": json.dumps({"init": init, "replies": replies}) + "\n"})
sys.exit(code)
