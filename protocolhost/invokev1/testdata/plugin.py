#!/usr/bin/python3
# An invoke-v1 test plugin. Its startup behaviour is chosen by the file "mode" next to it;
# each request's behaviour by its action. Requests are served concurrently, one thread each.
import json, os, socket, sys, threading, time

here = os.path.dirname(os.path.abspath(__file__))
mode = open(os.path.join(here, "mode")).read().strip()
lock = threading.Lock()

def send(f, iid, typ, resp):
    line = json.dumps({"invoke_id": iid, "type": typ, "response": resp}) + "\n"
    with lock:
        f.write(line)
        f.flush()

out = sys.stdout
send(out, "", "info", {"info": "loading plugin"})
if mode.startswith("start_error:"):
    send(out, "", "error", {"error": mode[len("start_error:"):]})
    time.sleep(60)
if mode == "no_ready":
    time.sleep(60)
if mode == "start_garbage":
    out.write("this is not json\n"); out.flush(); time.sleep(60)

rf, wf = sys.stdin, out
if mode in ("tcp_port0", "tcp_own_port"):
    # Written for the Dify-style TCP mode: it picks its own port (0: the kernel's choice,
    # else a fixed one), never reads FLEDGE_LISTEN_PORT, and announces what it got.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0 if mode == "tcp_port0" else 5003))
    srv.listen(4)
    port = srv.getsockname()[1]
    send(out, "", "info", {"info": "plugin is running on 127.0.0.1:%d" % port, "host": "127.0.0.1", "port": port})
    conn, _ = srv.accept()
    rf = conn.makefile("r", encoding="utf-8")
    wf = conn.makefile("w", encoding="utf-8")
if mode in ("tcp", "tcp_nonloopback", "tcp_wrong_port", "tcp_any"):
    port = int(os.environ["FLEDGE_LISTEN_PORT"])
    srv = socket.socket()
    srv.bind(("0.0.0.0" if mode == "tcp_any" else "127.0.0.1", port))
    srv.listen(4)
    host, announced = "127.0.0.1", port
    if mode == "tcp_nonloopback":
        host = "10.11.12.13"
    if mode == "tcp_wrong_port":
        announced = port + 1
    send(out, "", "info", {"info": "plugin is running on %s:%d" % (host, announced), "host": host, "port": announced})
    conn, _ = srv.accept()
    rf = conn.makefile("r", encoding="utf-8")
    wf = conn.makefile("w", encoding="utf-8")
send(wf, "", "plugin_ready", {"info": "plugin loaded"})

pairs = []
pairs_lock = threading.Lock()

def interleave(a, b):
    for i in range(3):
        send(wf, a, "plugin_response", {"req": a, "i": i})
        send(wf, b, "plugin_response", {"req": b, "i": i})
    send(wf, a, "plugin_invoke_end", {"info": "done"})
    send(wf, b, "plugin_invoke_end", {"info": "done"})

def serve(req):
    iid, action, body = req["invoke_id"], req["action"], req.get("request") or {}
    if action == "interleave":
        with pairs_lock:
            pairs.append(iid)
            if len(pairs) == 2:
                threading.Thread(target=interleave, args=(pairs[0], pairs[1])).start()
        return
    send(wf, iid, "info", {"info": "received " + action})
    if action == "echo":
        send(wf, iid, "plugin_response", {"type": req["type"], "request": body})
    elif action == "invoke_tool":
        send(wf, iid, "plugin_response", {"tool": body["tool_name"], "params": body["tool_parameters"]})
    elif action == "stream":
        pad = "x" * body.get("size", 10)
        for i in range(body["n"]):
            send(wf, iid, "plugin_response", {"i": i, "pad": pad})
    elif action == "fail":
        send(wf, iid, "error", {"error": "no such model"}); return
    elif action == "timeout_prefix":
        send(wf, iid, "error", {"error": "execution timeout exceeded"}); return
    elif action == "sleep":
        time.sleep(60)
    elif action == "crash":
        os._exit(5)
    elif action == "global_error":
        send(wf, "", "error", {"error": "plugin runtime failed: heartbeat lost"}); return
    elif action == "garbage":
        with lock:
            wf.write("garbage\n"); wf.flush()
        return
    elif action == "badtype":
        send(wf, iid, "progress", {}); return
    elif action == "connect_out":
        res = {}
        try:
            c = socket.create_connection(("127.0.0.1", body["port"]), timeout=5)
            c.close(); res["connect"] = "ok"
        except OSError as e:
            res["connect"] = e.strerror
        try:
            s2 = socket.socket(); s2.bind(("127.0.0.1", 0)); res["bind_other"] = "ok"
        except OSError as e:
            res["bind_other"] = e.strerror
        send(wf, iid, "plugin_response", res)
    send(wf, iid, "plugin_invoke_end", {"info": "done"})

for line in rf:
    if not line.strip():
        continue
    threading.Thread(target=serve, args=(json.loads(line),), daemon=True).start()
