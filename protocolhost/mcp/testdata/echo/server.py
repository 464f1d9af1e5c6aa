#!/usr/bin/python3
import json, os, sys
calls = os.path.join(os.environ["FLEDGE_DATA_DIR"], "calls")
open(calls, "a").close()
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    meth, res = m.get("method"), {}
    if meth == "initialize":
        res = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "1"}}
    elif meth == "tools/list":
        res = {"tools": [{"name": "echo", "description": "echoes", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}
    elif meth == "tools/call":
        text = m["params"]["arguments"].get("text", "")
        open(calls, "a").write(text + "\n")
        res = {"content": [{"type": "text", "text": "echo: " + text}]}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": res}), flush=True)
