"""What a run does when a rank fails or hangs, and what it leaves for the stage to record.

torchrun restarts every rank of a failed attempt (train.launch.max_restarts); each attempt resumes from the
newest complete checkpoint, so a restart costs the steps since that checkpoint and changes no result. A rank
that fails says why in one line, written to $TOKENMILL_TRAIN_REASONS/attempt<k>/rank<N>.txt (k: torchrun's
TORCHELASTIC_RESTART_COUNT); a rank that hangs is ended by its watchdog, which writes the same kind of line;
a rank killed by a signal writes nothing, and the ranks it left fail inside their next collective (gloo and
NCCL notice a closed peer at once, a silent one within train.launch.collective_timeout_seconds). Rank 0 of a
restarted attempt writes attempt<k>/resumed.json (the step it resumed from). The stage reads it all back when
torchrun returns: restarts() for the run record and the lineage, last_attempt() for the failure's one line.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path

REASONS_ENV = "TOKENMILL_TRAIN_REASONS"


def attempt() -> int:
    """This process's attempt: 0 for the first launch, k after torchrun's k-th restart."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def _attempt_dir() -> Path | None:
    root = os.environ.get(REASONS_ENV)
    return Path(root) / f"attempt{attempt()}" if root else None


def record_reason(line: str) -> None:
    """Write why this rank fails to the attempt's rank<N>.txt, where the stage set TOKENMILL_TRAIN_REASONS."""
    folder = _attempt_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"rank{os.environ.get('RANK', '0')}.txt").write_text(line + "\n")
    except OSError:
        pass  # the reason is in the log too


def fire_once(kind: str, step: int) -> bool:
    """For an injected fault (tests: TOKENMILL_FAULT kill_at, hang_at): whether it fires now. Once per run:
    the first attempt that reaches the step leaves a mark beside the attempts' reasons, so the attempt after
    the restart gets past it (without the stage's reasons folder: in the first attempt only)."""
    root = os.environ.get(REASONS_ENV)
    if not root:
        return attempt() == 0
    mark = Path(root) / f"fault-{kind}-{step}"
    if mark.exists():
        return False
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.touch()
    return True


def record_resume(step: int) -> None:
    """Rank 0 of a restarted attempt: the step it resumed from (its newest complete checkpoint)."""
    folder = _attempt_dir()
    if folder is None or attempt() == 0:
        return
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "resumed.json").write_text(json.dumps({"from_step": step}) + "\n")


def _reasons(folder: Path) -> dict[int, tuple[int, str]]:
    """rank -> (write time, its line) for the rank<N>.txt files of one attempt."""
    out = {}
    for path in folder.glob("rank*.txt"):
        text = " ".join(path.read_text(errors="replace").split())
        if text and path.stem[4:].isdigit():
            out[int(path.stem[4:])] = (path.stat().st_mtime_ns, text.removeprefix("train: "))
    return out


def _attempts(root: Path) -> list[tuple[int, Path]]:
    """(k, folder) of every attempt<k> folder under root, in attempt order."""
    return sorted((int(p.name[7:]), p) for p in root.glob("attempt*") if p.name[7:].isdigit())


def last_attempt(root: Path) -> Path | None:
    attempts = _attempts(root)
    return attempts[-1][1] if attempts else None


WAITING = "waiting in a collective"  # in a watchdog's line: a rank that waited for another, not the hung one


def first_reason(folder: Path | None, world: int) -> str | None:
    """The line of the rank that failed first in an attempt (the others mostly fail because it left); of
    watchdog lines, a rank that was not waiting in a collective first: it is the one the others waited for."""
    found = _reasons(folder) if folder is not None and folder.is_dir() else {}
    if not found:
        return None
    rank, (_, text) = min(found.items(), key=lambda kv: (WAITING in kv[1][1], kv[1]))
    return f"rank {rank}: {text}" if world > 1 else text


# torchrun's record of the first worker it saw fail in an attempt, one per failed attempt, in order.
_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")


def restarts(root: Path, world: int, log_text: str = "") -> list[dict]:
    """Each restart of a run: its number, the step it resumed from, and its cause (the attempt before it: the
    first rank's line, and the ranks that left none: killed by a signal, or their machine gone, with the exit
    torchrun saw in its log). A rank killed by a signal can take the others down before they write anything:
    torchrun stops them as soon as it sees the first one gone."""
    exits = _TORCHRUN_FAILED.findall(log_text)
    out = []
    for k, folder in _attempts(root):
        if k == 0:
            continue
        before = root / f"attempt{k - 1}"
        found = _reasons(before) if before.is_dir() else {}
        silent = sorted(set(range(world)) - set(found))
        cause = first_reason(before, world) or "no rank said why"
        if silent and found:
            cause += f"; rank(s) {', '.join(map(str, silent))} left no reason (killed by a signal, or the machine)"
        elif silent:
            cause = "no rank said why (killed by a signal, or the machine)"
        if silent and k - 1 < len(exits):
            code, local = int(exits[k - 1][0]), exits[k - 1][1]
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            cause += f"; torchrun saw local rank {local} fail first ({how})"
        resumed = folder / "resumed.json"
        out.append({"restart": k, "cause": cause,
                    "resumed_from_step": json.loads(resumed.read_text())["from_step"] if resumed.exists() else None})
    return out


def exit_rank(code: int) -> None:
    """How a rank torchrun launched leaves once the process group is destroyed and every output is written:
    the streams flushed, then without the interpreter's teardown.

    Why: a gloo worker thread can still hold the last collective's tensors when the interpreter finalizes;
    dropping them needs the GIL, which a finalizing interpreter refuses by ending the thread, and the C++
    runtime aborts ("terminate called without an active exception", pytorch/pytorch#179291). Measured: 1 of
    about 7 demo builds, rank 1 (the rank that prints nothing, so reaches the exit first) killed by SIGABRT
    after the run had finished and written everything, so torchrun failed the stage. The process group is
    destroyed before this (train(), or the script's own destroy_process_group); nothing is left to the
    teardown. (A profiler that writes its results at exit, `python -m cProfile`, gets none: profile by calling
    the entry point's main() from your own script.)"""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

class Watchdog:
    """Ends this rank when the loop shows no sign of life for `seconds` (a collective that never returns, a
    device or file system that stopped answering): one line naming the rank and the step, on stderr and in the
    attempt's reasons, then exit code 3, so torchrun sees a failed rank and restarts the attempt. The loop calls
    beat(step) around everything that may take long (each step, evaluations, checkpoints)."""

    def __init__(self, seconds: float | None, rank: int):
        self.seconds, self.rank = seconds, rank
        self.step, self.last = 0, time.monotonic()
        self._stop = threading.Event()
        self._main = threading.main_thread().ident
        if seconds is not None:
            threading.Thread(target=self._watch, name="tokenmill-watchdog", daemon=True).start()

    def beat(self, step: int) -> None:
        self.step, self.last = step, time.monotonic()

    def close(self) -> None:
        self._stop.set()

    def _where(self) -> str:
        """Where the main thread is: inside torch.distributed (waiting for another rank), or elsewhere (the
        rank the others wait for: its innermost frame)."""
        frame = sys._current_frames().get(self._main)
        innermost = frame
        while frame is not None:
            if "torch/distributed" in frame.f_code.co_filename.replace("\\", "/"):
                return f"{WAITING} ({frame.f_code.co_name})"
            frame = frame.f_back
        if innermost is None:
            return "main thread not found"
        return f"in {Path(innermost.f_code.co_filename).name}:{innermost.f_lineno} ({innermost.f_code.co_name})"

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.seconds / 4)):
            idle = time.monotonic() - self.last
            if idle > self.seconds:
                line = (f"train: rank {self.rank} made no progress for {idle:.0f} s at step {self.step}, "
                        f"{self._where()} (watchdog, train.launch.watchdog_seconds {self.seconds:g})")
                print(line, file=sys.stderr, flush=True)
                record_reason(line)
                os._exit(3)
