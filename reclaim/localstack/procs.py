"""Small process helpers for the local stack: free ports, readiness waits, pid files."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType


class StackError(RuntimeError):
    """A local server could not be started, reached or stopped."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        with contextlib.suppress(OSError, IndexError):
            return stat.read_text().split(")")[-1].split()[0] != "Z"
    return True


def pid_runs(pid: int, *needles: str) -> bool:
    """True when ``pid`` is alive and its command line has every one of ``needles`` as an argument (or part
    of one): a pid from a state file may since have been reused by a process we did not start."""
    if not pid_alive(pid):
        return False
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        args = raw.decode(errors="replace").split("\0")
    except OSError:
        result = subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True,
                                check=False)
        args = result.stdout.split()
    return all(any(needle in arg for arg in args) for needle in needles)


def wait_until(check: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None,
               log: Path | None = None) -> None:
    """Poll ``check`` until it is true; fail early when ``proc`` exits, naming its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            raise StackError(f"{what} exited with code {proc.returncode} while starting{_log_hint(log)}")
        time.sleep(0.2)
    raise StackError(f"{what} not ready after {timeout:.0f}s{_log_hint(log)}")


def _log_hint(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    tail = log.read_text(errors="replace").splitlines()[-15:]
    return f"; see {log}:\n" + "\n".join(tail)


def spawn(argv: Sequence[str], log: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None, user: str | None = None) -> subprocess.Popen[bytes]:
    """Start a detached server process writing stdout and stderr to ``log`` (as ``user``, when given)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=cwd, start_new_session=True, user=user, group=_group_of(user),
        )


def _group_of(user: str | None) -> int | None:
    if user is None:
        return None
    import pwd

    return pwd.getpwnam(user).pw_gid


def stop_pid(pid: int, timeout: float = 20.0, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` (SIGTERM) to the process group of ``pid``, then SIGKILL it if it outlives ``timeout``."""
    if not pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    _reap(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


class SignalStop(threading.Event):
    """A stop event that remembers the first signal that set it: Ctrl-C (SIGINT) ends a command with exit 130,
    SIGTERM (how a service manager stops one) with 0."""

    signum: int | None = None


def stop_on_signals(what: str, log_to: Callable[[str], None] | None = None) -> SignalStop:
    """An event set by SIGTERM or SIGINT, so a long-running command stops cleanly at its next check."""
    stop = SignalStop()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if log_to is not None:
            log_to(f"signal {signal.Signals(signum).name}: {what}")
        if stop.signum is None:
            stop.signum = signum
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def exit_status(code: int, stop: threading.Event) -> int:
    """``code``, or 130 (interrupted) for a command that finished cleanly because Ctrl-C stopped it."""
    interrupted = isinstance(stop, SignalStop) and stop.signum == signal.SIGINT
    return 130 if code == 0 and interrupted else code
