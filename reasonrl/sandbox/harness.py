"""The sandbox's inside: a fixed file of ours, run as ``python -I -S harness.py <parent pid> <result fd>``.

Never imported by reasonrl (it runs in the fresh interpreter the parent starts; stdlib only, no reasonrl import).
Process tree, in namespace mode (``unshare(USER|NS|NET|PID|IPC|UTS)`` works for an unprivileged user)::

    L  this file, started by the parent: drops root to nobody, enters new user/mount/net/ipc/uts namespaces,
    │  forks H and waits; dies with the parent (PDEATHSIG), and H dies with L
    └─ H  pid 1 of a new pid namespace: mounts (everything read-only, a fresh tmpfs on /tmp as the working
       │  directory, a fresh /proc), clears its capabilities, reads the job, runs each test in a child, reports
       │  per-test results on the result pipe; when pid 1 exits the kernel kills every process of the namespace
       └─ T  one per test (a fork of H, so a fresh copy of an interpreter that never ran model code): stdin, stdout
             and stderr on files of the tmpfs, rlimits (CPU, address space, processes, file size, open files),
             then the candidate file is imported (``__main__`` for stdin/stdout tests); after each test H kills
             every other process of the namespace (``kill(-1, SIGKILL)`` from pid 1)

Check mode (HumanEval ``check(candidate)``): H forks C, which imports the candidate and answers calls with plain
values over a pipe, *before* it reads the check; then K, a second child without the candidate's code, runs the
check, called with a proxy of the entry point that calls into C. K's exit status is the verdict, and K and H are not
dumpable, so the candidate cannot ptrace them, read their memory or reach their descriptors. K's namespace holds
trusted text only (the task's prompt, for the helpers some checks call, then the check): no name the program
defines, and C's builtins and modules are another process's, so nothing the program does changes what the check's
own names (``abs``, ``math.isclose``, ``poly``) mean.

Without namespaces (``isolate=none`` or a kernel that refuses them) H is a plain child in its own session, a child
subreaper that kills the descendants it collects; see docs/rewards_and_data.md for what that mode does not isolate.

Values cross the boundary as JSON with tags for tuples, sets, dicts, bytes and non-finite floats; any other type
(an object with a lying ``__eq__``, a subclass of ``int``) cannot be encoded and the test fails.
"""

import marshal
import os
import resource
import select
import sys
import time

# Imports are kept to what the interpreter has loaded anyway plus small C modules: json, signal and traceback would
# pull in re and enum, a third of the start-up time. ``dumps`` below writes the JSON the parent reads, ``loads``
# reads the harness's own lines with the C scanner. Both are imported here, before any privilege is dropped: the
# fallback runs code as nobody, who may not read the standard library (an interpreter under /root).
from _json import encode_basestring_ascii as _quote
from _json import make_scanner as _make_scanner

SIGKILL = 9
SIGXCPU = 24  # the CPU-time limit's signal (Linux); the signal module is not imported here (see above)
SIGNAL_NAMES = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 24: "SIGXCPU"}
SIGNAL_NAMES |= {25: "SIGXFSZ", 13: "SIGPIPE", 15: "SIGTERM", 31: "SIGSYS"}

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 4, 38, 36
NOBODY = 65534
WORK = "/tmp/work"

_libc = None


def libc():
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(rc, what):
    if rc != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option, arg):
    _check(libc().prctl(option, arg, 0, 0, 0), f"prctl {option}")


# -- values ------------------------------------------------------------------------------------------------------


def encode(x, depth=0):
    """A plain value as JSON-able data; ``TypeError`` for anything else (exact types only)."""
    if depth > 200:
        raise TypeError("value nested too deeply")
    t = type(x)
    if x is None or t is bool or t is str or t is int:
        return x
    if t is float:
        return x if x == x and x not in (float("inf"), float("-inf")) else {"__f": repr(x)}
    if t is list:
        return [encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"__t": [encode(v, depth + 1) for v in x]}
    if t is set or t is frozenset:
        return {"__s": [encode(v, depth + 1) for v in x]}
    if t is dict:
        return {"__d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    if t is bytes:
        return {"__b": x.decode("latin-1")}
    raise TypeError(f"a value of type {t.__module__}.{t.__qualname__} is not a plain value")


def dumps(x):
    """JSON text of what ``encode`` returns (and of the harness's own messages: str keys, plain leaves)."""
    t = type(x)
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is int:
        return int.__repr__(x)
    if t is float:
        return float.__repr__(x) if x == x and x not in (float("inf"), float("-inf")) else "null"
    if t is str:
        return _quote(x)
    if t is list or t is tuple:
        return "[" + ",".join([dumps(v) for v in x]) + "]"
    if t is dict:
        return "{" + ",".join([_quote(str(k)) + ":" + dumps(v) for k, v in x.items()]) + "}"
    raise TypeError(f"cannot write {t.__name__}")


class _PlainJson:
    """What ``_json``'s C scanner reads from a ``json.JSONDecoder``: plain JSON, as ``dumps`` writes it."""

    strict, object_hook, object_pairs_hook, parse_float, parse_int = True, None, None, float, int

    @staticmethod
    def parse_constant(name):
        raise ValueError(f"{name} is not plain JSON")


_scan = _make_scanner(_PlainJson())


def loads(line):
    """The value of one line of JSON written by ``dumps`` (``json.loads`` without importing json)."""
    value, end = _scan(line, 0)
    if line[end:].strip():
        raise ValueError(f"extra data after JSON value at {end}")
    return value


def print_exc():
    """The current exception's traceback on stderr (the interpreter's own printer: no traceback import)."""
    sys.__excepthook__(*sys.exc_info())


def decode(x):
    if isinstance(x, list):
        return [decode(v) for v in x]
    if isinstance(x, dict):
        if "__t" in x:
            return tuple(decode(v) for v in x["__t"])
        if "__s" in x:
            return set(decode(v) for v in x["__s"])
        if "__d" in x:
            return {decode(k): decode(v) for k, v in x["__d"]}
        if "__b" in x:
            return x["__b"].encode("latin-1")
        if "__f" in x:
            return float(x["__f"])
        raise ValueError("untagged object")
    return x


# -- containment -------------------------------------------------------------------------------------------------


def drop_root():
    """Root runs the program as nobody (root in a user namespace mapped to root could write root's files)."""
    if os.geteuid() != 0:
        return False
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    prctl(PR_SET_DUMPABLE, 1)  # a uid change made us non-dumpable: /proc/self/uid_map would belong to root
    return True


def enter_namespaces():
    uid, gid = os.geteuid(), os.getegid()
    _check(
        libc().unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS),
        "unshare",
    )
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{NOBODY} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{NOBODY} {gid} 1")


def _mount(src, target, fstype, flags, data=None):
    _check(
        libc().mount(src.encode(), target.encode(), fstype.encode() if fstype else None, flags, data), f"mount {target}"
    )


def _ro_flags(path):
    flag = os.statvfs(path).f_flag
    out = MS_REMOUNT | MS_BIND | MS_RDONLY
    for st, ms in (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, MS_NOATIME),
        (os.ST_NODIRATIME, MS_NODIRATIME),
        (os.ST_RELATIME, MS_RELATIME),
    ):
        if flag & st:
            out |= ms
    return out


def prepare_fs(tmpfs_mb, lib_paths):
    """In a new mount namespace: every mount read-only, a fresh tmpfs on /tmp holding the working directory, and
    the interpreter's library folders bound into it (``lib_paths``: only when running as nobody, who may not be
    able to traverse to them, e.g. under /root). Returns the bound folders and how many mounts stayed writable."""
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    not_ro = 0
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    for point in points:
        if point == "/proc" or point.startswith("/proc/"):
            continue  # the user namespace's id maps are written there; H mounts a fresh /proc over it
        try:
            _mount("none", point, None, _ro_flags(point))
        except OSError:
            not_ro += 1
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_mb}m,nr_inodes=4096,mode=0755".encode())
    new_path = []
    for i, path in enumerate(lib_paths):
        target = f"/tmp/.lib{i}"
        os.mkdir(target)
        _mount(path, target, None, MS_BIND | MS_REC)
        _mount("none", target, None, _ro_flags(target))
        new_path.append(target)
    os.mkdir(WORK, 0o755)
    if os.geteuid() == 0:
        os.chown(WORK, NOBODY, NOBODY)
    return new_path, not_ro


def use_paths(old, new_path):
    """Import from the bound library folders: ``sys.path`` and the ``__path__`` of packages already imported."""
    sys.path[:] = new_path
    sys.path_importer_cache.clear()
    for module in list(sys.modules.values()):
        paths = getattr(module, "__path__", None)
        if isinstance(paths, list):
            for j, p in enumerate(paths):
                for o, n in zip(old, new_path, strict=True):
                    if p == o or p.startswith(o + os.sep):
                        paths[j] = n + p[len(o) :]
                        break


def clear_capabilities():
    import ctypes

    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()
    _check(libc().capset(header, data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def set_limits(lim, cpu_s):
    cpu = max(1, int(cpu_s + 0.999))
    pairs = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (lim["memory_mb"] << 20,) * 2),
        (resource.RLIMIT_FSIZE, (lim["output_bytes"],) * 2),
        (resource.RLIMIT_NOFILE, (lim["nofile"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if lim.get("nproc_abs"):
        pairs.append((resource.RLIMIT_NPROC, (lim["nproc_abs"],) * 2))
    for which, value in pairs:
        resource.setrlimit(which, value)


def user_process_count(uid):
    n = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                n += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    return n


# -- running tests -----------------------------------------------------------------------------------------------


def read_message(fd=0):
    """A length-prefixed message from ``fd``, read exactly (no read-ahead into the next message)."""

    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    return exact(int(exact(10)))


def _redirect(stdin_path, tag, keep=()):
    """stdin from ``stdin_path``, stdout/stderr to files; ``keep`` moved to fds 3, 4, ...; every other fd closed
    (the result pipe and the job pipe above all)."""
    kept = [os.dup(fd) for fd in keep]
    fd = os.open(stdin_path, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    for target, name in ((1, f"out{tag}"), (2, f"err{tag}")):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, target)
        os.close(fd)
    for i, fd in enumerate(kept):
        os.dup2(fd, 3 + i)
    os.closerange(3 + len(kept), 1 << 16)


def import_candidate(name):
    """Import ``prog.py`` as module ``name`` through the import system's own (already loaded) file loader."""
    import _frozen_importlib as bootstrap
    import _frozen_importlib_external as external

    loader = external.SourceFileLoader(name, os.path.join(WORK if os.path.isdir(WORK) else os.getcwd(), "prog.py"))
    spec = bootstrap.spec_from_loader(name, loader)
    module = bootstrap.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def _finish(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(code)


def child_stdio(tag):
    _redirect(f"in{tag}", tag)
    sys.argv = ["prog.py"]
    try:
        import_candidate("__main__")
        code = 0
    except SystemExit as exc:  # a stdin/stdout program may exit; its output is what counts
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the candidate's error, reported on its stderr
        print_exc()
        code = 1
    _finish(code)


def find_function(module, name):
    fn = getattr(module, name, None)
    if fn is None and hasattr(module, "Solution"):  # LeetCode style: a method of class Solution
        fn = getattr(module.Solution(), name, None)
    if not callable(fn):
        raise AttributeError(f"the program defines no function {name!r}")
    return fn


def child_call(tag, fn_name, args):
    _redirect("/dev/null", tag)
    try:
        fn = find_function(import_candidate("solution"), fn_name)
        value = dumps(encode(fn(*args)))
        code = 0
    except SystemExit as exc:
        print(f"SystemExit({exc.code!r}) before the function returned", file=sys.stderr)
        code = 3
    except BaseException:  # noqa: BLE001
        print_exc()
        code = 1
    if code == 0:
        with open(f"res{tag}", "w") as f:
            f.write(value)
    _finish(code)


def serve_candidate(req_fd, resp_fd):
    """C: import the candidate, then answer ``[name, args]`` requests with ``{"v": value}`` or ``{"e": error}``."""
    _redirect("/dev/null", "c", (req_fd, resp_fd))  # fd 0 closed before any candidate code: the check is not read yet
    req, resp = os.fdopen(3, "r"), os.fdopen(4, "w")

    try:
        module = import_candidate("solution")
        names = [k for k, v in vars(module).items() if callable(v) and not k.startswith("__")]
        resp.write(dumps({"names": names}) + "\n")
        resp.flush()
        for line in req:
            name, args = loads(line)
            try:
                out = {"v": encode(getattr(module, name)(*decode(args)))}
            except Exception as exc:  # noqa: BLE001 - reported to the check as the call's exception
                out = {"e": f"{type(exc).__name__}: {str(exc)[:200]}"}
            resp.write(dumps(out) + "\n")
            resp.flush()
    except BaseException:  # noqa: BLE001 - SystemExit included: the check's next call fails
        print_exc()
    _finish(0)


class CandidateError(Exception):
    """The candidate did not answer a call of the check (it exited, crashed or returned a non-plain value)."""


def run_check(check_src, prompt_src, entry_point, req_fd, resp_fd, tag):
    """K: the check, called with a proxy of the candidate's entry point (into C).

    The check's namespace is filled from trusted text only: the task's prompt (``prompt_src``: the helpers some
    checks call, e.g. HumanEval's ``poly``), then the check. No name of the program enters it (a program defining
    ``abs``, ``isclose`` or ``poly`` changes nothing here); the prompt's stub of the entry point is replaced by the
    proxy, so the only way into the program is ``candidate`` (and that name)."""
    _redirect("/dev/null", tag, (req_fd, resp_fd))
    req, resp = os.fdopen(3, "w"), os.fdopen(4, "r")

    code = 2
    try:
        first = resp.readline()
        if not first:
            raise CandidateError("the candidate exited before the check ran")
        names = loads(first)["names"]

        def proxy(name):
            def call(*args):
                req.write(dumps([name, encode(list(args))]) + "\n")
                req.flush()
                line = resp.readline()
                if not line:
                    raise CandidateError(f"the candidate exited during {name}()")
                out = loads(line)
                if "e" in out:
                    raise CandidateError(f"{name}() raised {out['e']}")
                return decode(out["v"])

            return call

        namespace = {"__name__": "__check__"}
        if prompt_src:
            exec(compile(prompt_src, "prompt.py", "exec"), namespace)  # noqa: S102 - the dataset's prompt, trusted
        exec(compile(check_src, "check.py", "exec"), namespace)  # noqa: S102 - the dataset's check, not model text
        if entry_point not in names:
            raise CandidateError(f"the program defines no function {entry_point!r}")
        candidate = proxy(entry_point)
        namespace[entry_point] = candidate  # not the prompt's stub, for a check that calls it by name
        namespace["check"](candidate)
        code = 0
    except AssertionError:
        print_exc()
        code = 1
    except BaseException:  # noqa: BLE001
        print_exc()
        code = 2
    _finish(code)


def wait_child(pid, timeout_s):
    """``(exit status or None on timeout, elapsed)``, the child killed at the timeout."""
    start = time.monotonic()
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], max(timeout_s, 0.0))
    finally:
        os.close(pidfd)
    if not ready:
        os.kill(pid, SIGKILL)
    _, status = os.waitpid(pid, 0)
    return (status if ready else None), time.monotonic() - start


def sweep(ns):
    """Kill every other process the program started (pid 1 of the namespace; a subreaper without one)."""
    if ns:
        try:
            os.kill(-1, SIGKILL)
        except ProcessLookupError:
            pass
    else:
        for _ in range(50):  # descendants re-parented to us (double forks included), until none is left
            kids = _children()
            if not kids:
                break
            for pid in kids:
                try:
                    os.kill(pid, SIGKILL)
                except ProcessLookupError:
                    pass
            _reap()
    _reap()


def _children():
    me, out = str(os.getpid()), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                if stat[stat.rfind(")") + 2 :].split()[1] == me:
                    out.append(int(name))
            except OSError:
                pass
    return out


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _tail(path, n=800):
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _over_cap(tag, cap):
    for name in (f"out{tag}", f"err{tag}", f"res{tag}"):
        try:
            if os.stat(name).st_size >= cap:
                return True
        except OSError:
            pass
    return False


def _read_capped(path, cap):
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except OSError:
        return None
    return data


def outcome(status, elapsed, tag):
    """Per-test result: ``s`` in ok / error / timeout / killed, with the signal or exit code and stderr's tail.
    SIGXCPU is a timeout: the CPU-time limit is the test's time left, and it can fire before the wall deadline."""
    if status is None:
        return {"s": "timeout", "t": elapsed, "e": _tail(f"err{tag}")}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = SIGNAL_NAMES.get(sig, f"signal {sig}")
        return {"s": "timeout" if sig == SIGXCPU else "killed", "t": elapsed, "sig": name, "e": _tail(f"err{tag}")}
    code = os.WEXITSTATUS(status)
    err = _tail(f"err{tag}")
    if code != 0:
        memory = "MemoryError" in err
        return {"s": "killed" if memory else "error", "t": elapsed, "code": code, "e": err}
    return {"s": "ok", "t": elapsed, "e": err}


def run_job(job, ns, emit):
    lim = job["limits"]
    test_s = float(lim["test_timeout_s"])
    deadline = time.monotonic() + float(lim["timeout_s"])
    with open("prog.py", "w") as f:
        f.write(job["program"])
    mode = job["mode"]
    if mode == "check":
        return run_check_mode(job, ns, emit, lim, deadline)
    for i, test_input in enumerate(job["inputs"]):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if mode == "stdio":
            with open(f"in{i}", "w") as f:
                f.write(test_input)
        pid = os.fork()
        if pid == 0:
            set_limits(lim, min(test_s, left))
            if mode == "stdio":
                child_stdio(i)
            child_call(i, job["fn_name"], test_input)
        status, elapsed = wait_child(pid, min(test_s, left))
        sweep(ns)
        out = outcome(status, elapsed, i)
        if out["s"] in ("ok", "error") and _over_cap(i, lim["output_bytes"]):  # Python ignores SIGXFSZ: EFBIG
            out["s"], out["sig"] = "killed", "SIGXFSZ"
        data = _read_capped(f"out{i}" if mode == "stdio" else f"res{i}", lim["output_bytes"])
        if out["s"] == "ok" and data is None:
            out.update(s="error", e="no result (the program exited before returning) " + out["e"])
        elif out["s"] == "ok":
            out["o"] = data.decode("utf-8", "replace")
        elif out.get("sig") == "SIGXFSZ":
            out["e"] = f"output over {lim['output_bytes']} bytes " + out["e"]
        emit(dict(out, i=i))
        for name in (f"in{i}", f"out{i}", f"err{i}", f"res{i}"):
            try:
                os.unlink(name)
            except OSError:
                pass


def run_check_mode(job, ns, emit, lim, deadline):
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    left = deadline - time.monotonic()
    server = os.fork()
    if server == 0:
        set_limits(lim, left)
        serve_candidate(req_r, resp_w)
    trusted = marshal.loads(read_message())  # only now, after the candidate's process exists without it
    checker = os.fork()
    if checker == 0:
        set_limits(lim, left)
        run_check(trusted["check"], trusted["prompt"], job["entry_point"], req_w, resp_r, "k")
    for fd in (req_r, req_w, resp_r, resp_w):
        os.close(fd)
    status, elapsed = wait_child(checker, min(float(lim["test_timeout_s"]), deadline - time.monotonic()))
    sweep(ns)
    out = outcome(status, elapsed, "k")
    if out["s"] == "error":
        out["s"] = "wrong" if out.get("code") == 1 else "error"
    err_c = _tail("errc", 400)
    if err_c:
        out["e"] = out["e"] + "\n[candidate] " + err_c
    emit(dict(out, i=0))


def main():
    parent, result_fd = int(sys.argv[1]), int(sys.argv[2])
    sys.set_int_max_str_digits(0)
    sys.dont_write_bytecode = True
    prctl(PR_SET_PDEATHSIG, SIGKILL)
    if os.getppid() != parent:
        os._exit(70)
    job = marshal.loads(read_message())  # from the trusted parent
    lim = job["limits"]
    want = job.get("isolate", "auto")
    dropped = os.geteuid() == 0
    lib_paths = [p for p in sys.path if os.path.isdir(p)]
    ns, ns_error, new_path, not_ro = False, "", [], 0
    if want != "none" and dropped:
        # root prepares the file system in a mount namespace of its own (it can reach the stdlib), then becomes
        # nobody; the user namespace below gets a copy of that mount tree
        try:
            _check(libc().unshare(CLONE_NEWNS), "unshare mount namespace")
            new_path, not_ro = prepare_fs(int(lim["tmpfs_mb"]), lib_paths)
        except OSError as exc:
            ns_error = str(exc)
    if want == "none" or ns_error:  # the fallback's temporary folder: import while the stdlib is still readable
        import shutil  # noqa: F401
        import tempfile  # noqa: F401
    drop_root()
    if want != "none" and not ns_error:
        try:
            enter_namespaces()
            if not dropped:
                new_path, not_ro = prepare_fs(int(lim["tmpfs_mb"]), [])
            ns = True
        except OSError as exc:
            ns_error = str(exc)
    if want == "ns" and not ns:
        raise OSError(f"namespaces refused: {ns_error}")
    if not ns:
        if lim.get("nproc"):  # no user namespace: the limit counts all processes of this uid
            lim["nproc_abs"] = user_process_count(os.geteuid()) + int(lim["nproc"])
    elif lim.get("nproc"):
        lim["nproc_abs"] = int(lim["nproc"]) + 2  # counts only this namespace's processes (L and H included)
    pid = os.fork()
    if pid:
        os.close(result_fd)
        _, status = os.waitpid(pid, 0)
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 71)
    # H
    prctl(PR_SET_PDEATHSIG, SIGKILL)
    if os.getppid() == 1 and not ns:
        os._exit(72)
    setup_s = 0.0
    not_ro = 0
    if ns:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this pid namespace's processes only
        if new_path:
            use_paths(lib_paths, new_path)
        os.chdir(WORK)
        libc().sethostname(b"sandbox", 7)
        clear_capabilities()
    else:
        import tempfile

        if new_path:  # a private read-only file system without the other namespaces
            use_paths(lib_paths, new_path)
        os.setsid()
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        os.chdir(WORK if new_path else tempfile.mkdtemp(prefix="reasonrl-sandbox-"))
    prctl(PR_SET_DUMPABLE, 0)  # the candidate (same uid) cannot ptrace H nor open /proc/<H>/fd or mem

    def emit(msg):
        data = (dumps(msg) + "\n").encode()
        while data:
            data = data[os.write(result_fd, data) :]

    emit({"ready": 1, "ns": ns, "dropped": dropped, "not_ro": not_ro, "ns_error": ns_error, "setup_s": setup_s})
    if not ns:
        emit({"workdir": os.getcwd()})
    run_job(job, ns, emit)
    emit({"done": 1})
    if not ns:
        import shutil

        sweep(False)
        shutil.rmtree(os.getcwd(), ignore_errors=True)
    os._exit(0)


if __name__ == "__main__":
    main()
