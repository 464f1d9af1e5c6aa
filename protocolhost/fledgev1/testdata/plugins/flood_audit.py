#!/usr/bin/python3
# An attacking plugin that floods the host with requests whose audit records it controls, to
# fill the disk through the audit log. args[0] is JSON: {"kind": metadata|exec|store|load|
# prompt, "seconds": S, "count": N, "size": bytes of each plugin-chosen string, "window":
# requests in flight}. It stops after S seconds or N requests, whichever comes first, then
# prints one output message {"sent": n, "replies": r, "seconds": s, "kinds": {type: n}}.
import json, sys, time

init = json.loads(sys.stdin.readline())
cfg = json.loads(init["args"][0])
kind = cfg["kind"]
seconds = float(cfg.get("seconds", 3))
count = int(cfg.get("count", 1000))
size = int(cfg.get("size", 4096))
window = int(cfg.get("window", 16))

# The big part of a metadata request is built once; each request differs in its id and the
# first key, so the plugin can send as fast as the host reads.
meta_rest = json.dumps(["%02d" % k + "K" * (size - 2) for k in range(1, 64)])[1:]

def line(i):
    tag = "%08d" % i
    rid = "r" + tag
    if kind == "metadata":
        # 64 keys of `size` bytes each.
        first = json.dumps(tag + "K" * (size - len(tag)))
        return '{"type": "metadata", "id": "' + rid + '", "keys": [' + first + ", " + meta_rest + "}", True
    if kind == "exec_append":
        # A command that leaves evidence when it runs, padded with a shell comment.
        cmd = "echo " + tag + " >> " + cfg["target"] + " #" + "#" * size
        return json.dumps({"type": "exec", "id": rid, "command": cmd}), True
    if kind == "exec":
        return json.dumps({"type": "exec", "id": rid, "command": "true " + tag + " " + "C" * size}), True
    if kind == "store":
        return json.dumps({"type": "store", "key": tag + "S" * size, "value": "v"}), False
    if kind == "load":
        return json.dumps({"type": "load", "id": rid, "key": tag + "L" * size}), True
    if kind == "prompt":
        return json.dumps({"type": "prompt", "id": rid, "message": tag + "P" * size, "default": "D" * size}), True
    raise SystemExit("unknown kind " + kind)

start = time.monotonic()
sent = replies = 0
inflight = 0
kinds = {}
codes = {}
reasons = {}
refused_audit = 0
def read_one():
    global replies, inflight, refused_audit
    l = sys.stdin.readline()
    if not l:
        return False
    m = json.loads(l)
    kinds[m.get("type", "?")] = kinds.get(m.get("type", "?"), 0) + 1
    v = m.get("value")
    if isinstance(v, dict) and "code" in v:
        codes[str(v["code"])] = codes.get(str(v["code"]), 0) + 1
        if "reason" in v:
            reasons[v["reason"]] = reasons.get(v["reason"], 0) + 1
        if "the audit log cannot record it" in v.get("stderr", ""):
            refused_audit += 1
    if "id" in m:
        replies += 1
        inflight -= 1
    return True

while sent < count and time.monotonic() - start < seconds:
    l, wants = line(sent)
    sys.stdout.write(l + "\n")
    sys.stdout.flush()
    sent += 1
    if wants:
        inflight += 1
        while inflight >= window:
            if not read_one():
                break
while inflight > 0:
    if not read_one():
        break
out = {"sent": sent, "replies": replies, "seconds": time.monotonic() - start, "kinds": kinds,
       "codes": codes, "reasons": reasons, "refused_audit": refused_audit}
sys.stdout.write(json.dumps({"type": "output", "text": json.dumps(out) + "\n"}) + "\n")
sys.stdout.flush()
