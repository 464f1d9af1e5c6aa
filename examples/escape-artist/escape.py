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
`kill -0` on fledge, from the plugin process and from an exec, must fail, with EPERM (the
kernel scopes signals to the sandbox) or ESRCH (fledge is not in the plugin's pid namespace).

Exit status: 0 when nothing escaped, 1 otherwise. Arguments:
    [--fledge-pid=PID] [victim-plugin-name] [path-known-to-exist ...]
--fledge-pid is fledge's pid as the caller sees it (make demo passes it): inside a pid
namespace getppid() is 0, so without it there is no pid to aim the kills at. The victim is the
plugin whose state.json it tries to read (default hello-bash).
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
fledge_pid = None  # fledge's pid as the caller sees it (see the docstring)
for a in list(args):
    if a.startswith("--fledge-pid="):
        fledge_pid = int(a.split("=", 1)[1])
        args.remove(a)
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


def fork_bomb(scoped, scope_why):
    what = "fork bomb (10000 sleepers, from an exec)"
    if not scoped or sb.get("cgroup") in (None, "", "none"):
        # Only where fledge reports a cgroup (pids limit) AND the signal probe proved the
        # sandbox is real: a host that merely claimed confinement would get a real bomb.
        report("SKIPPED", what, "no pids limit proven here (cgroup %s; %s): it would really fork" % (sb.get("cgroup") or "none", scope_why))
        return
    # A sleeper counts once it has really started: it is the child that prints its number, so a
    # fork the kernel refused prints nothing (the loop would count attempts, not processes).
    bomb = ("n=0; while [ $n -lt 10000 ]; do n=$((n+1)); "
            "(echo $n; exec sleep 20 </dev/null >/dev/null 2>&1) & "
            "done; wait")
    res = io.exec(bomb, timeout=30)
    got = len((res.get("stdout") or "").split())
    if got >= 10000:
        report("ESCAPED", what, "started all %d processes" % got)
    else:
        errs = (res.get("stderr") or "").strip().splitlines()
        cause = re.sub(r"^(/bin/)?sh: \d+: ", "", errs[-1]) if errs else why(res)
        report("BLOCKED", what, "the pids limit (cgroup %s) refused a fork after %d had started (or more, not yet counted): %s" % (sb.get("cgroup"), got, cause))


def signal_probe_plugin(pid):
    """kill -0 from the plugin process: sends nothing. None when pid is reachable, else why not."""
    try:
        os.kill(pid, 0)
        return None
    except PermissionError:
        return "EPERM: the kernel scopes signals to the sandbox (Landlock)"
    except ProcessLookupError:
        return "ESRCH: pid %d is not in its pid namespace" % pid
    except OSError as e:
        return oserr(e)


def signal_probe_exec(pid):
    """kill -0 from an exec; None when pid is reachable, else the shell's error."""
    res = io.exec('kill -0 %d 2>&1 && echo REACHED' % pid)
    out = (res.get("stdout") or "").strip()
    if res.get("code") == 0 and out.endswith("REACHED"):
        return None
    return re.sub(r"^(/bin/)?sh: \d+: (kill: )?", "", out.splitlines()[-1]) if out else why(res)


def host_target():
    """fledge's pid to aim at, or None with why there is none."""
    if fledge_pid:
        return fledge_pid, ""
    ppid = os.getppid()
    if ppid <= 1:
        # 0: the parent is outside this pid namespace; kill(0) would mean our own group.
        return None, "getppid() is %d: fledge is outside its pid namespace; pass --fledge-pid=PID to aim at it" % ppid
    return ppid, ""


def probe_scoped():
    """The gate of every attempt that could do real damage: fledge must be out of reach of
    signals, from the plugin process and from an exec. Returns (scoped, why)."""
    if not confined:
        return False, "not confined (confinement none)"
    if not caps.get("exec"):
        return False, "exec is not granted, so an exec cannot probe"
    pid, missing = host_target()
    if pid is None:
        # Without a pid to probe, a pid namespace is the proof: getppid() 0 means the
        # parent (fledge) is in an ancestor namespace, which this one cannot signal into.
        if os.getppid() == 0:
            return True, "fledge is outside its pid namespace (getppid() is 0)"
        return False, missing
    mine, theirs = signal_probe_plugin(pid), signal_probe_exec(pid)
    if mine is None or theirs is None:
        return False, "kill -0 reached fledge (pid %d)" % pid
    return True, "kill -0 fledge (pid %d): %s" % (pid, mine)


def kill_host(scoped, scope_why):
    pid, missing = host_target()
    label = "kill -9 fledge%s" % (" (pid %d)" % pid if pid else "")
    for where in ("from the plugin process", "from an exec"):
        what = "%s, %s" % (label, where)
        if not scoped:
            report("SKIPPED", what, "signals are not proven scoped here (%s): it would really die" % scope_why)
            continue
        if pid is None:
            report("SKIPPED", what, missing)
            continue
        if where == "from the plugin process":
            try:
                os.kill(pid, signal.SIGKILL)
                report("ESCAPED", what, "the signal was delivered")
            except PermissionError:
                report("BLOCKED", what, "EPERM: the kernel scopes signals to the sandbox (Landlock)")
            except ProcessLookupError:
                report("BLOCKED", what, "ESRCH: fledge's pid %d does not exist in its pid namespace" % pid)
            except OSError as e:
                report("BLOCKED", what, oserr(e))
            continue
        res = io.exec("kill -9 %d 2>&1 && echo DELIVERED" % pid)
        out = (res.get("stdout") or "").strip()
        if out.endswith("DELIVERED"):
            report("ESCAPED", what, "the signal was delivered")
        else:
            msg = re.sub(r"^(/bin/)?sh: \d+: (kill: )?", "", out.splitlines()[-1]) if out else why(res)
            if "No such process" in msg:
                msg += ": fledge's pid %d does not exist in its pid namespace" % pid
            elif "not permitted" in msg:
                msg += ": the kernel scopes signals to the sandbox (Landlock)"
            report("BLOCKED", what, msg)


def kill_everything(scoped, scope_why):
    what = "kill -9 -1 (every process it may signal), from an exec"
    if not scoped:
        report("SKIPPED", what, "signals are not proven scoped here (%s): it would kill every process of this user" % scope_why)
        return
    # Linux spares the sender of kill(-1), so the exec starts a process of its own to be hit:
    # its status shows the signal really went out. The plugin's own daemon is in the same pid
    # namespace but outside the exec's sandbox: it must survive, and so must fledge (were it
    # dead, this reply would never come). The caller checks its own processes after fledge
    # exits (make demo: a canary).
    res = io.exec("sleep 30 & kill -9 -1; wait $!; echo sleep:$?")
    out = (res.get("stdout") or "").strip()
    own = "its own sleep was killed (exit 137)" if out == "sleep:137" else "its own sleep: %s" % (out or why(res))
    if plugin_pid and not alive(plugin_pid):
        report("ESCAPED", what, "%s, and so was the plugin's daemon (pid %d)" % (own, plugin_pid))
    elif out != "sleep:137":
        report("SKIPPED", what, "the signal did not go out as expected (%s)" % own)
    else:
        report("BLOCKED", what, "%s; the plugin's daemon%s and fledge still run" % (
            own, " (pid %d)" % plugin_pid if plugin_pid else ""))


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
scoped, scope_why = probe_scoped()
plugin_pid = plugin_daemon()
cwd_escape("exec with cwd ../..", "../..")
cwd_escape("exec with cwd /etc", "/etc")
symlink_cwd()
if scoped:
    write_file("write ~/pwned", os.path.join(home, "pwned"))
else:
    report("SKIPPED", "write ~/pwned", "confinement not proven here (%s): it would really write" % scope_why)
read_file("read ~/.ssh/id_rsa", os.path.join(home, ".ssh", "id_rsa"))
read_file("read fledge's plugins.toml", os.path.join(config_dir, "plugins.toml"))
write_file("append to plugins.toml (grant itself more)", os.path.join(config_dir, "plugins.toml"), create=False)
write_file("rewrite its own plugin.toml", os.path.join(plugin_dir, "plugin.toml"), create=False)
write_file("rewrite its own code", os.path.join(plugin_dir, "escape.py"), create=False)
read_file("read %s's state.json" % victim, os.path.join(config_dir, "plugins", victim, "state.json"))
secrets()
exec_pid = exec_daemon()
fork_bomb(scoped, scope_why)
kill_host(scoped, scope_why)
kill_everything(scoped, scope_why)
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
