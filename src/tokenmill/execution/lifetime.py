"""Processes that end with whoever started them (contract 6: a killed stage leaves no live worker).

Two links, both Linux-only (elsewhere they do nothing):
- a pool worker asks the kernel for SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG), so a stage
  killed with SIGKILL cannot leave its workers running (they used to stay alive, blocked on a pipe);
- a stage started by DVC watches the `dvc` process and ends itself when it ends. DVC runs a stage's cmd as
  `$SHELL -c "<cmd>"` (dvc/stage/run.py) and marks its environment with DVC_STAGE; killing `dvc` used to
  leave the stage running alone.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
SHELLS = {"sh", "dash", "bash", "zsh", "ksh", "fish"}
_watching: set[int] = set()


def die_with_parent(parent_pid: int) -> None:
    """In a worker: SIGKILL this process when its parent dies. Pool initializer (picklable, top level)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    # The parent may have died between fork and prctl: then nobody will send the signal.
    if os.getppid() != parent_pid:
        os._exit(1)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses, so split after the last ')'.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def launcher_pid() -> int:
    """The nearest ancestor that is not a shell: the process that launched this one (`dvc` under DVC)."""
    pid = os.getppid()
    while pid > 1 and _comm(pid) in SHELLS:
        pid = _ppid(pid)
    return pid


def _wait_for_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)  # Linux >= 5.3: readable once the process has exited; immune to pid reuse
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])
        os.close(fd)
        return
    # Older kernels: poll. Reparenting shows that the process we hang under has gone.
    stop = threading.Event()
    while not stop.wait(0.5):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return


def end_with_launcher(stage: str = "") -> int | None:
    """Under DVC (DVC_STAGE set), end this process when the `dvc` that launched it ends.

    Returns the watched pid, or None when not launched by DVC. Idempotent: one watcher per process.
    Workers need nothing more: their PR_SET_PDEATHSIG follows this process.
    """
    if not os.environ.get("DVC_STAGE") or not sys.platform.startswith("linux"):
        return None
    pid = launcher_pid()
    if pid <= 1:  # already orphaned: the launcher is gone
        _stop(stage or os.environ["DVC_STAGE"], pid)
    if pid in _watching:
        return pid
    _watching.add(pid)

    def watch() -> None:
        _wait_for_exit(pid)
        _stop(stage or os.environ.get("DVC_STAGE", ""), pid)

    threading.Thread(target=watch, name=f"tokenmill-watch-{pid}", daemon=True).start()
    return pid


def _stop(stage: str, pid: int) -> None:
    print(f"{stage}: the dvc process that launched this stage (pid {pid}) has ended; stopping", file=sys.stderr,
          flush=True)
    # SIGTERM rather than SIGKILL: the default action still ends the process at once, but a stage that
    # installs a handler may clean up first. Pool workers follow through PR_SET_PDEATHSIG.
    os.kill(os.getpid(), signal.SIGTERM)
