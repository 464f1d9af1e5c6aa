#!/usr/bin/python3
# runtime-v1: answer the handshake with what we expose, then one execute with its input.
import json, sys
req = json.loads(sys.stdin.readline())
sys.stdout.write(json.dumps({"type": "handshake", "manifest": {"plugin_id": "rt", "plugin_version": "1.0.0",
    "protocol_version": "1", "exposed_tools": ["echo"], "capabilities": req["capabilities"]}}) + "\n")
sys.stdout.flush()
line = sys.stdin.readline()
if line:
    ex = json.loads(line)
    sys.stdout.write(json.dumps({"type": "result", "output": ex["input"]}) + "\n")
