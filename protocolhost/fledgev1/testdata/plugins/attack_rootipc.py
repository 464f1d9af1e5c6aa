#!/usr/bin/python3
# A hostile python3 plugin of a root fledge, granted nothing: the plugin process itself goes
# for root-only files in system paths (names it is given as args: a list of secret names
# cannot know them) and for the host's SysV IPC objects by id. Each attempt prints
# "RESULT <name>=ok <data>" or "RESULT <name>=denied <error>".
import ctypes, ctypes.util, json, os, subprocess, sys

def out(text):
    sys.stdout.write(json.dumps({"type": "output", "text": text + "\n"}) + "\n")
    sys.stdout.flush()

init = json.loads(sys.stdin.readline())
A = dict(a.split("=", 1) for a in init["args"])

def attempt(name, fn):
    try:
        data = fn()
        out("RESULT %s=ok %s" % (name, json.dumps(data if data is not None else "")))
    except Exception as e:
        out("RESULT %s=denied %s" % (name, json.dumps(repr(e))))

def read(path):
    with open(path) as f:
        return f.read()

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.msgrcv.restype = ctypes.c_ssize_t
libc.msgrcv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long, ctypes.c_int]
IPC_CREAT, IPC_EXCL, IPC_NOWAIT, SHM_RDONLY = 0o1000, 0o2000, 0o4000, 0o10000

def fail(what):
    e = ctypes.get_errno()
    raise OSError(e, "%s: %s" % (what, os.strerror(e)))

def shm_read():
    p = libc.shmat(int(A["shm"]), None, SHM_RDONLY)
    if p is None or p == ctypes.c_void_p(-1).value:
        fail("shmat")
    return ctypes.string_at(p, 40).split(b"\0")[0].decode()

def msg_read():
    buf = ctypes.create_string_buffer(8 + 256)
    n = libc.msgrcv(int(A["msq"]), buf, 256, 0, IPC_NOWAIT)
    if n < 0:
        fail("msgrcv")
    return buf.raw[8:8 + n].decode()

def shm_create():
    i = libc.shmget(int(A["key"]), 4096, IPC_CREAT | IPC_EXCL | 0o600)
    if i < 0:
        fail("shmget")
    return i

def tools():
    r = subprocess.run(["sh", "-c", "git --version && python3 -c 'print(6*7)' && grep -c root /etc/passwd"],
                       capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return r.stdout

def sub_cat():
    r = subprocess.run(["cat", A["file"], A["inner"]], capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return r.stdout

attempt("read_file", lambda: read(A["file"]))
attempt("read_inner", lambda: read(A["inner"]))
attempt("list_dir", lambda: os.listdir(A["dir"]))
attempt("sub_cat", sub_cat)
attempt("shm_read", shm_read)
attempt("msg_read", msg_read)
attempt("shm_create", shm_create)
attempt("read_hosts", lambda: len(read("/etc/hosts")))
attempt("tools", tools)
out("DONE")
