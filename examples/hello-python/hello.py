#!/usr/bin/env python3
"""hello-python: a fledge-v1 plugin (standard library only) that uses every message once.

fledge writes one JSON object per line to our stdin and reads ours from stdout, so stdout
belongs to the protocol: print diagnostics to stderr, or better, send a "log" message.
Every question has a default, so `fledge --ni hello-python` completes without a terminal.
"""
import json
import sys


class Cancelled(Exception):
    """fledge cancelled one request (reason: non_interactive, timeout, limit_exceeded...)."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class Fledge:
    def __init__(self):
        self.next_id = 0
        line = sys.stdin.readline()
        if not line:
            sys.exit("hello-python: no init message: run me through fledge")
        self.init = json.loads(line)

    def send(self, msg):
        # One compact line per message; flush so fledge sees it now, not at exit.
        sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def request(self, msg):
        """Send an id-bearing request and return its response value (or raise Cancelled)."""
        self.next_id += 1
        rid = str(self.next_id)
        self.send(dict(msg, id=rid))
        for line in sys.stdin:
            try:
                reply = json.loads(line)
            except ValueError:
                continue  # not ours to judge; skip it
            kind = reply.get("type")
            if kind == "cancel" and "id" not in reply:
                # The whole session is cancelled (Ctrl+C, timeout): leave promptly.
                print("hello-python: cancelled by fledge (%s)" % reply.get("reason"), file=sys.stderr)
                sys.exit(130)
            if reply.get("id") != rid:
                continue  # unknown inbound messages are ignored (forward compatibility)
            if kind == "cancel":
                raise Cancelled(reply.get("reason", ""))
            if kind == "response":
                return reply.get("value")
        sys.exit("hello-python: fledge closed our stdin")

    # fire and forget
    def output(self, text):
        self.send({"type": "output", "text": text})

    def log(self, level, message):
        self.send({"type": "log", "level": level, "message": message})

    def progress(self, message, current=None, total=None):
        msg = {"type": "progress", "message": message}
        if current is not None:
            msg.update(current=current, total=total)
        self.send(msg)

    def progress_done(self):
        self.send({"type": "progress", "done": True})

    def store(self, key, value):
        self.send({"type": "store", "key": key, "value": value})

    # blocking
    def prompt(self, message, default=None, validate=None):
        msg = {"type": "prompt", "message": message}
        if default is not None:
            msg["default"] = default
        if validate:
            msg["validate"] = validate
        return self.request(msg)

    def confirm(self, message, default=False):
        return self.request({"type": "confirm", "message": message, "default": default})

    def select(self, message, options, default=0):
        return self.request({"type": "select", "message": message, "options": options, "default": default})

    def multi_select(self, message, options, defaults=()):
        return self.request({"type": "multi_select", "message": message, "options": options, "defaults": list(defaults)})

    def load(self, key):
        return self.request({"type": "load", "key": key})

    def exec(self, command, cwd=None, timeout=None):
        msg = {"type": "exec", "command": command}
        if cwd is not None:
            msg["cwd"] = cwd
        if timeout is not None:
            msg["timeout"] = timeout
        return self.request(msg)

    def metadata(self, *keys):
        return self.request({"type": "metadata", "keys": list(keys)})


def ask(fn, fallback, *args, **kwargs):
    """A question with a local fallback when fledge cancels it."""
    try:
        return fn(*args, **kwargs)
    except Cancelled as c:
        io.log("warn", "question cancelled (%s); using %r" % (c.reason, fallback))
        return fallback


io = Fledge()
init = io.init
caps = init.get("capabilities") or {}
sandbox = init.get("sandbox") or {}
args = init.get("args") or []

io.log("debug", "init received: %d argument(s), protocol %s" % (len(args), init.get("protocol")))
io.log("info", "granted: exec=%s store=%s metadata=%s; sandbox: %s" % tuple(str(v).lower() for v in (
    caps.get("exec", False), caps.get("store", False), caps.get("metadata", False), sandbox.get("confinement", "unknown"))))
io.log("warn", "warnings look like this (nothing is wrong)")
io.log("error", "errors look like this (nothing failed)")
io.output("Hello from %s, a fledge-v1 plugin written in Python.\n" % init["plugin"]["name"])

last_name = ask(io.load, None, "last_name")
default_name = args[0] if args else (last_name or "world")
name = ask(io.prompt, default_name, "Who should I greet?", default=default_name, validate="non_empty")
count_text = ask(io.prompt, "3", "How many greetings (1-9)?", default="3", validate="integer")
count = int(count_text) if count_text.isdigit() and 1 <= int(count_text) <= 9 else 3
shout = ask(io.confirm, False, "Shout it?", default=False)
style = ask(io.select, "casual", "Greeting style:", ["formal", "casual", "pirate"], default=1)
langs = ask(io.multi_select, ["en", "fr"], "Also greet in:", ["en", "fr", "de", "es"], defaults=[0, 1])

io.output("Answers: name=%s count=%d shout=%s style=%s also=%s\n" % (name, count, str(shout).lower(), style, " ".join(langs)))
greeting = "%s, %s!" % ({"formal": "Good day", "pirate": "Ahoy"}.get(style, "Hello"), name)
if shout:
    greeting = greeting.upper()
for i in range(1, count + 1):
    io.progress("Greeting", i, count)
    io.output("  %d. %s\n" % (i, greeting))
io.progress_done()
others = {"fr": "Bonjour, %s !", "de": "Hallo, %s!", "es": "¡Hola, %s!"}
for lang in langs:
    if lang in others:
        io.output("  (%s) %s\n" % (lang, others[lang] % name))

runs = ask(io.load, None, "runs")
runs = int(runs) + 1 if runs and runs.isdigit() else 1
io.store("last_name", name)
io.store("runs", str(runs))
io.output("Run #%d of this plugin here (stored in its state.json).\n" % runs)

# exec: fledge runs the command in the sandbox, in the project root, and returns the result.
res = io.exec("seq 1 %d | grep -v 2 | sed 's/^/  line /'" % (count + 2), timeout=10)
io.output("exec 'seq | grep | sed' exited %d:\n%s" % (res["code"], res["stdout"]))
if res["code"] != 0:
    io.log("error", "exec failed: " + res["stderr"])
io.progress("Sleeping a second in the sandbox")
res = io.exec("sleep 1 && echo rested", timeout=5)
io.output("exec 'sleep 1' said: %s" % res["stdout"])
io.progress_done()
res = io.exec("sleep 5", timeout=1)
io.output("exec 'sleep 5' with a 1s timeout: code %d, timed_out=%s\n" % (res["code"], str(res.get("timed_out", False)).lower()))

# metadata: project facts fledge collects for us (the env is filtered: no secrets).
meta = io.metadata("git_status", "git_log", "env", "fledge_config")
changed = meta.get("git_status") or []
commits = meta.get("git_log") or []
env = meta.get("env") or {}
io.output("metadata: %d changed file(s), %d commit(s), latest: %s\n" % (len(changed), len(commits), commits[0] if commits else "none"))
io.output("metadata: env has %d variable(s): %s\n" % (len(env), " ".join(sorted(env)[:6])))
io.output("metadata: fledge.toml: %s\n" % json.dumps(meta.get("fledge_config"), separators=(",", ":"))[:120])

io.log("info", "done")
io.output("Bye!\n")
