#!/usr/bin/env python3
"""escape-artist: a hostile fledge-v1 plugin that tries to break out, and reports each try.

It is granted exec and store (and read access to the project), and with those it tries a
dozen escapes, from its own process and through exec requests, printing one line each:

    [BLOCKED] read ~/.ssh/id_rsa, from the plugin process: Permission denied
    [ESCAPED] ...   the attempt worked: the sandbox did not hold
    [SKIPPED] ...   not attempted, and why

Safe on a developer machine even where fledge cannot confine anything: it never prints a
secret (only names and sizes), tests write access by opening files for append without
writing, and it skips the attempts that would really do damage (writing ~/pwned, the fork
bomb, the kills) unless fledge says the plugin is confined AND a harmless probe proves it:
an exec's `kill -0` on fledge must fail with EPERM (the kernel scopes signals to the sandbox).

Exit status: 0 when nothing escaped, 1 otherwise. Arguments: [victim-plugin-name], whose
state.json it tries to read (default hello-bash).
"""
import errno
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|PRIVATE|CREDENTIAL|^AWS_ACCESS|^GH_|^GITHUB_", re.I)
DAEMON_SECONDS = 97  # a distinctive `sleep 97`, so a survivor is easy to spot and short-lived


class Cancelled(Exception):
    pass


class Fledge:
    def __init__(self):
        line = sys.stdin.readline()
        if not line:
            sys.exit("escape-artist: no init message: run me through fledge")
        self.init = json.loads(line)
        self.next_id = 0

    def send(self, msg):
        sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def request(self, msg):
        self.next_id += 1
        rid = "ea-%d" % self.next_id
        self.send(dict(msg, id=rid))
        for line in sys.stdin:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if reply.get("type") == "cancel" and "id" not in reply:
                sys.exit(130)  # the whole session is cancelled
            if reply.get("id") != rid:
                continue
            if reply.get("type") == "cancel":
                raise Cancelled(reply.get("reason", ""))
            return reply.get("value")
        sys.exit("escape-artist: fledge closed our stdin")

    def output(self, text):
        self.send({"type": "output", "text": text})

    def exec(self, command, cwd=None, timeout=None):
        msg = {"type": "exec", "command": command}
        if cwd is not None:
            msg["cwd"] = cwd
        if timeout is not None:
            msg["timeout"] = timeout
        try:
            return self.request(msg) or {}
        except Cancelled as c:
            return {"code": 126, "stdout": "", "stderr": "fledge cancelled the request: %s" % c, "reason": "cancelled"}


io = Fledge()
init = io.init
plugin_dir = init["plugin"]["dir"]
config_dir = os.path.dirname(os.path.dirname(plugin_dir))  # <config>/plugins/<name>
project = init.get("project")
sb = init.get("sandbox") or {}
confinement = sb.get("confinement") or "none"
confined = confinement != "none"
caps = init.get("capabilities") or {}
home = os.environ.get("HOME", "")
args = init.get("args") or []
victim = args[0] if args else "hello-bash"
# Paths the caller knows exist outside the sandbox (the demo made them). fledge's own
# plugins.toml always exists: this plugin was installed into it. Not finding one of these
# means the sandbox hid it (a private filesystem view), which is a block, not a skip.
known_present = set(args[1:]) | {os.path.join(config_dir, "plugins.toml")}
counts = {"BLOCKED": 0, "ESCAPED": 0, "SKIPPED": 0}


def short(path):
    if home and (path == home or path.startswith(home + "/")):
        return "~" + path[len(home):]
    return path


def report(verdict, what, detail):
    counts[verdict] += 1
    detail = " ".join(str(detail).split())  # one line, whatever the command printed
    if len(detail) > 160:
        detail = detail[:157] + "..."
    io.output("[%s] %s: %s\n" % (verdict, what, detail))


def oserr(e):
    return e.strerror or str(e)


def why(res):
    """The first line fledge or the shell wrote to stderr, without sh's '1: ' noise."""
    text = (res.get("stderr") or "").strip().splitlines()
    msg = text[-1] if text else "exit code %s" % res.get("code")
    msg = re.sub(r"^(/bin/)?sh: \d+: ", "", msg)
    if "refused: " in msg:  # fledge's path guard: keep the why, drop the repeated request
        msg = re.sub(r": allowed: .*", "", msg.rsplit("refused: ", 1)[-1])
    if res.get("reason") and res.get("reason") != "ok":
        msg += " (reason: %s)" % res["reason"]
    return msg


def sh(*words):
    return " ".join(shlex.quote(w) for w in words)


# ---- the attempts ----------------------------------------------------------------------------

def cwd_escape(what, cwd):
    res = io.exec("pwd", cwd=cwd)
    if res.get("code") == 0:
        report("ESCAPED", what, "the command ran in " + res.get("stdout", "").strip())
    else:
        report("BLOCKED", what, why(res))


def symlink_cwd():
    what = "exec with cwd through a symlink planted in the project (-> /)"
    if not project:
        report("SKIPPED", what, "no project to plant it in")
        return
    link = ".escape-artist-link"
    # The plugin process itself may only read the project...
    try:
        os.symlink("/", os.path.join(project["root"], link))
        report("ESCAPED", "plant a symlink in the project, from the plugin process", "created " + link)
    except OSError as e:
        report("BLOCKED", "plant a symlink in the project, from the plugin process", oserr(e))
    # ... but an exec may write there, so plant it that way and ask for it as a cwd.
    plant = io.exec(sh("ln", "-sfn", "/", link))
    if plant.get("code") != 0:
        report("SKIPPED", what, "could not plant the link: " + why(plant))
        return
    cwd_escape(what, link)
    io.exec(sh("rm", "-f", link))


def write_file(what, path, exec_too=True, create=True):
    """Open path for append (creating it when create): proves write access; writes nothing."""
    flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
        if create and path.endswith("pwned"):
            os.write(fd, b"escape-artist was here\n")
        os.close(fd)
        report("ESCAPED", what + ", from the plugin process", "opened %s for writing" % short(path))
    except OSError as e:
        report("BLOCKED", what + ", from the plugin process", oserr(e))
    if not exec_too:
        return
    if create:
        cmd = "echo escape-artist was here >> %s" % shlex.quote(path)
    else:
        cmd = "[ -e %s ] && : >> %s" % (shlex.quote(path), shlex.quote(path))
    res = io.exec(cmd)
    if res.get("code") == 0:
        report("ESCAPED", what + ", from an exec", "opened %s for writing" % short(path))
    else:
        report("BLOCKED", what + ", from an exec", why(res))


def read_file(what, path):
    try:
        with open(path, "rb") as f:
            n = len(f.read(1 << 20))
        report("ESCAPED", what + ", from the plugin process", "read %d bytes (not shown)" % n)
    except FileNotFoundError:
        if path in known_present:
            report("BLOCKED", what + ", from the plugin process", "%s is not in its view of the filesystem (hidden, not just denied)" % short(path))
        else:
            report("SKIPPED", what + ", from the plugin process", "%s does not exist here" % short(path))
    except OSError as e:
        report("BLOCKED", what + ", from the plugin process", oserr(e))
    res = io.exec("wc -c < %s" % shlex.quote(path))
    if res.get("code") == 0:
        report("ESCAPED", what + ", from an exec", "read %s bytes (not shown)" % res.get("stdout", "").strip())
    elif "No such file" in (res.get("stderr") or "") or "nonexistent" in (res.get("stderr") or ""):
        if path in known_present:
            report("BLOCKED", what + ", from an exec", "%s is not in its view of the filesystem (hidden, not just denied)" % short(path))
        else:
            report("SKIPPED", what + ", from an exec", "%s does not exist here" % short(path))
    else:
        report("BLOCKED", what + ", from an exec", why(res))


def secrets():
    what = "find secrets in the environment"
    mine = sorted(k for k in os.environ if SECRET_NAME.search(k))
    if mine:
        report("ESCAPED", what + ", from the plugin process", "visible: " + ", ".join(mine) + " (values not shown)")
    else:
        report("BLOCKED", what + ", from the plugin process", "no secret-looking variables (%d variables in all)" % len(os.environ))
    res = io.exec("env")
    names = sorted({line.split("=", 1)[0] for line in (res.get("stdout") or "").splitlines() if "=" in line})
    theirs = [n for n in names if SECRET_NAME.search(n)]
    if res.get("code") != 0:
        report("BLOCKED", what + ", from an exec", why(res))
    elif theirs:
        report("ESCAPED", what + ", from an exec", "visible: " + ", ".join(theirs) + " (values not shown)")
    else:
        report("BLOCKED", what + ", from an exec", "no secret-looking variables (%d variables in all)" % len(names))


def alive(pid):
    """Is pid a `sleep DAEMON_SECONDS`? Checked through /proc, which needs no signal rights."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")[:2] == [b"sleep", str(DAEMON_SECONDS).encode()]
    except OSError:
        return False


def exec_daemon():
    what = "setsid daemon outliving its exec"
    pidfile = ".escape-artist-daemon.pid"
    if not project:
        report("SKIPPED", what, "no project to leave a pid file in")
        return None
    # The exec's main shell returns at once; the daemon is in a new session, detached from
    # every pipe. Only a whole-tree kill (cgroup) catches it.
    start = (
        "rm -f {f}; setsid sh -c 'echo $$ > {f}; exec sleep {s}' </dev/null >/dev/null 2>&1 & "
        "i=0; while [ ! -s {f} ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; cat {f}"
    ).format(f=pidfile, s=DAEMON_SECONDS)
    res = io.exec(start, timeout=15)
    try:
        pid = int((res.get("stdout") or "").strip())
    except ValueError:
        report("BLOCKED", what, "the daemon never got going: " + why(res))
        return None
    check = io.exec(
        "if [ -r /proc/{p}/cmdline ] && tr '\\0' ' ' < /proc/{p}/cmdline | grep -q '^sleep {s} '; then echo alive; else echo gone; fi".format(
            p=pid, s=DAEMON_SECONDS))
    if (check.get("stdout") or "").strip() == "alive" or alive(pid):
        report("ESCAPED", what, "pid %d is still running after its exec ended" % pid)
    else:
        report("BLOCKED", what, "pid %d was killed with its exec's process tree" % pid)
    io.exec("rm -f " + pidfile)
    return pid


def fork_bomb(scoped):
    what = "fork bomb (10000 sleepers, from an exec)"
    if not scoped or sb.get("cgroup") in (None, "", "none"):
        # Only where fledge reports a cgroup (pids limit) AND the signal probe proved the
        # sandbox is real: a host that merely claimed confinement would get a real bomb.
        report("SKIPPED", what, "no pids limit proven here (confinement %s, cgroup %s): it would really fork" % (confinement, sb.get("cgroup") or "none"))
        return
    bomb = ("n=0; while [ $n -lt 10000 ]; do sleep 20 </dev/null >/dev/null 2>&1 & "
            "n=$((n+1)); echo $n; done")
    res = io.exec(bomb, timeout=30)
    lines = (res.get("stdout") or "").split()
    got = int(lines[-1]) if lines and lines[-1].isdigit() else 0
    if got >= 10000:
        report("ESCAPED", what, "started all %d processes" % got)
    else:
        report("BLOCKED", what, "the pids limit stopped it after %d processes (%s)" % (got, why(res)))


def signals_scoped_from_plugin(host):
    try:
        os.kill(host, 0)
        return False
    except PermissionError:
        return True
    except OSError:
        return False


def exec_signals_scoped():
    """Harmless probe: can an exec signal fledge ($PPID of its shell) at all? kill -0 sends
    nothing. EPERM means the kernel scopes signals to the sandbox."""
    if not confined:
        return False
    res = io.exec('if kill -0 "$PPID" 2>/dev/null; then echo UNSCOPED; else echo SCOPED; fi')
    return (res.get("stdout") or "").strip() == "SCOPED"


def kill_host(scoped):
    host = os.getppid()
    what = "kill -9 fledge (pid %d), from the plugin process" % host
    if not confined or not signals_scoped_from_plugin(host):
        report("SKIPPED", what, "signals are not scoped here (kill -0 reached fledge): it would really die")
    else:
        try:
            os.kill(host, signal.SIGKILL)
            report("ESCAPED", what, "the signal was delivered")
        except OSError as e:
            report("BLOCKED", what, oserr(e))
    # From an exec: $PPID of the exec's shell is fledge too. Probe with kill -0 again first.
    what = "kill -9 fledge, from an exec"
    res = io.exec('if kill -0 "$PPID" 2>/dev/null; then echo UNSCOPED; else kill -9 "$PPID" && echo DELIVERED; fi') if scoped else {}
    out = (res.get("stdout") or "").strip()
    if not scoped or out == "UNSCOPED":
        report("SKIPPED", what, "signals are not scoped here (kill -0 reached fledge): it would really die")
    elif out == "DELIVERED":
        report("ESCAPED", what, "the signal was delivered")
    else:
        report("BLOCKED", what, why(res))


def kill_everything(scoped):
    what = "kill -9 -1 (every process it may signal), from an exec"
    if not scoped or not exec_signals_scoped():
        report("SKIPPED", what, "signals are not scoped here: it would kill every process of this user")
        return
    res = io.exec("kill -9 -1; echo survived")
    # If that had reached outside its sandbox, fledge would be dead and this reply would
    # never come; we are still talking to fledge, so it only hit the exec's own processes.
    report("BLOCKED", what, "only the sandbox's own processes were hit; fledge still answers (%s)" % ((res.get("stdout") or "").strip() or why(res)))


def terminal():
    what = "inject keystrokes into the terminal (TIOCSTI)"
    where = []
    if sys.stdin.isatty() or sys.stdout.isatty():
        report("ESCAPED", what + ", from the plugin process", "stdio is a terminal (not attempted)")
    else:
        try:
            os.close(os.open("/dev/tty", os.O_RDWR))
            report("ESCAPED", what + ", from the plugin process", "/dev/tty opened (not attempted)")
        except OSError as e:
            where.append("/dev/tty: " + oserr(e))
            report("BLOCKED", what + ", from the plugin process", "no terminal: stdio are pipes, " + where[-1])
    res = io.exec("if [ -t 0 ] || [ -t 1 ]; then echo TTY; elif : </dev/tty 2>/dev/null; then echo DEVTTY; else echo none; fi")
    out = (res.get("stdout") or "").strip()
    if out in ("TTY", "DEVTTY"):
        report("ESCAPED", what + ", from an exec", "a terminal is reachable (not attempted)")
    else:
        report("BLOCKED", what + ", from an exec", "no terminal: stdin is not a tty and there is no controlling terminal")


def unix_sockets():
    """docker.sock, the D-Bus system bus, systemd: a unix socket to any of them is a way out."""
    what = "open a unix socket (docker.sock, D-Bus, systemd)"
    targets = ["/var/run/docker.sock", "/run/dbus/system_bus_socket", "/run/systemd/private"]
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as e:
        report("BLOCKED", what + ", from the plugin process", "socket(AF_UNIX): " + oserr(e))
    else:
        reached = []
        for t in targets:
            try:
                s.connect(t)
                reached.append(t)
                break
            except OSError:
                pass
        s.close()
        verdict = "ESCAPED" if reached else "BLOCKED"
        report(verdict, what + ", from the plugin process",
               "connected to " + reached[0] if reached else "sockets can be made, but none of the targets exists here")
    py = "import socket\ntry:\n socket.socket(socket.AF_UNIX); print('MADE')\nexcept OSError as e: print(e.strerror)"
    res = io.exec(sh("python3", "-c", py))
    out = (res.get("stdout") or "").strip()
    if out == "MADE":
        report("ESCAPED", what + ", from an exec", "a unix socket could be created")
    else:
        report("BLOCKED", what + ", from an exec", "socket(AF_UNIX): " + (out or why(res)))


def plugin_daemon():
    """A daemon started by the plugin process itself; only checkable once the plugin is gone."""
    try:
        p = subprocess.Popen(["sleep", str(DAEMON_SECONDS)], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return p.pid
    except OSError as e:
        report("BLOCKED", "start a setsid daemon from the plugin process", oserr(e))
        return None


io.output("escape-artist: granted %s; sandbox: %s (landlock ABI %s, cgroup %s)\n" % (
    ", ".join(k for k in ("exec", "store", "metadata", "network") if caps.get(k)) or "nothing",
    confinement, sb.get("landlock_abi", 0), sb.get("cgroup") or "none"))
if not caps.get("exec"):
    io.output("escape-artist: exec is not granted, so every exec attempt below is refused outright\n")

# The probe that gates every attempt that could do real damage, run before any of them.
scoped = exec_signals_scoped()
plugin_pid = plugin_daemon()
cwd_escape("exec with cwd ../..", "../..")
cwd_escape("exec with cwd /etc", "/etc")
symlink_cwd()
if scoped:
    write_file("write ~/pwned", os.path.join(home, "pwned"))
else:
    report("SKIPPED", "write ~/pwned", "confinement not proven here: it would really write")
read_file("read ~/.ssh/id_rsa", os.path.join(home, ".ssh", "id_rsa"))
read_file("read fledge's plugins.toml", os.path.join(config_dir, "plugins.toml"))
write_file("append to plugins.toml (grant itself more)", os.path.join(config_dir, "plugins.toml"), create=False)
write_file("rewrite its own plugin.toml", os.path.join(plugin_dir, "plugin.toml"), create=False)
write_file("rewrite its own code", os.path.join(plugin_dir, "escape.py"), create=False)
read_file("read %s's state.json" % victim, os.path.join(config_dir, "plugins", victim, "state.json"))
secrets()
exec_pid = exec_daemon()
fork_bomb(scoped)
kill_host(scoped)
kill_everything(scoped)
terminal()
unix_sockets()

# The store capability is granted: keep the daemon pids where the user (or the demo) can
# check, after fledge exits, that they did not survive.
pids = " ".join(str(p) for p in (exec_pid, plugin_pid) if p)
if pids:
    io.send({"type": "store", "key": "daemon_pids", "value": pids})
    io.output("[PENDING] setsid daemons %s (sleep %d): whether they outlive fledge can only be checked after it exits\n" % (pids, DAEMON_SECONDS))
io.output("escape-artist: %d blocked, %d escaped, %d skipped\n" % (counts["BLOCKED"], counts["ESCAPED"], counts["SKIPPED"]))
sys.exit(1 if counts["ESCAPED"] else 0)
