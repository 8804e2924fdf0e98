"""The `.lock` file of a log dir, taken as Kafka's LogManager takes it.

Kafka locks `<dir>/.lock` with FileChannel.tryLock, which on Linux is a POSIX record lock (fcntl
F_SETLK), not flock(2): locking the same way means a kcli tool sees a running Apache Kafka's lock and
Kafka sees ours. POSIX record locks belong to the process and are dropped when ANY descriptor of the
file is closed in that process, so every lock and every probe goes through this module, which keeps one
descriptor per `.lock` file for as long as the process holds it and never opens a second one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path

from kcli.errors import KcliError

LOCK_FILE_NAME = ".lock"  # LogManager.LockFileName

_held: dict[Path, int] = {}
"""The `.lock` files this process holds, by resolved path, with the one descriptor kept open for each."""
_guard = threading.Lock()


class LogDirInUse(KcliError):
    """A log dir another process (or another part of this one) has locked; one sentence, exit code 2."""


def in_use_sentence(log_dir: str | Path) -> str:
    """Kafka's sentence for a dir it cannot lock (LogManager.lockLogDirs)."""
    return (
        f"Failed to acquire lock on file {LOCK_FILE_NAME} in {log_dir}. "
        "A Kafka instance in another process or thread is using this directory."
    )


def lock_log_dir(log_dir: str | Path) -> Path:
    """Take the exclusive lock on `<log_dir>/.lock` (created if missing) for this process, or raise
    LogDirInUse when another process or an earlier caller here holds it. Returns the lock file's path."""
    path = (Path(log_dir) / LOCK_FILE_NAME).resolve()
    with _guard:
        if path in _held:
            raise LogDirInUse(in_use_sentence(log_dir))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise KcliError(f"cannot lock {log_dir}: {_reason(exc)}.") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise LogDirInUse(in_use_sentence(log_dir)) from None
            raise KcliError(f"cannot lock {path}: {_reason(exc)}.") from None
        _held[path] = fd
    return path


def lock_log_dirs(log_dirs: list[str] | list[Path]) -> list[Path]:
    """Lock every dir, all or none: on a refusal the locks already taken here are released."""
    taken: list[Path] = []
    unique = {Path(d).resolve(): d for d in reversed(list(log_dirs))}  # one dir named twice: one lock
    try:
        for log_dir in reversed(list(unique.values())):
            taken.append(lock_log_dir(log_dir))
    except BaseException:
        release(taken)
        raise
    return taken


def release(lock_files: list[Path]) -> None:
    """Drop the locks `lock_log_dir(s)` returned (closing the one descriptor drops the record lock);
    the `.lock` files stay, as Kafka leaves them."""
    with _guard:
        for path in lock_files:
            fd = _held.pop(path, None)
            if fd is not None:
                os.close(fd)


def is_locked(log_dir: str | Path) -> bool:
    """Whether a process (this one included) holds `<log_dir>/.lock`; creates nothing.

    The probe asks for a shared lock on a read-only descriptor and gives it back at once; a dir without
    a `.lock` file is not in use. A lock this process holds is answered from `_held` without opening
    the file (closing a second descriptor would drop it)."""
    path = Path(log_dir) / LOCK_FILE_NAME
    try:
        resolved = path.resolve()
    except OSError:
        return False
    with _guard:
        if resolved in _held:
            return True
        try:
            fd = os.open(resolved, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            return exc.errno in (errno.EACCES, errno.EAGAIN)
        finally:
            os.close(fd)
    return False


def offline_change_refused(log_dir: str | Path, command: str) -> LogDirInUse:
    """The one sentence an offline tool that writes says about a log dir a running broker holds."""
    return LogDirInUse(
        f"{log_dir} is in use by a running broker (its {LOCK_FILE_NAME} is locked): stop the broker "
        f"before {command} changes it."
    )


def refuse_if_in_use(log_dir: str | Path, command: str) -> None:
    """For the offline tools that write into a log dir: refuse, before anything is read or touched,
    when a running broker (kcli's or Apache Kafka's) holds it."""
    if is_locked(log_dir):
        raise offline_change_refused(log_dir, command)


def lock_for_offline_change(log_dir: str | Path, command: str) -> Path:
    """Lock `log_dir` for an offline tool's run (a broker starting meanwhile is refused), or refuse
    with `offline_change_refused`'s sentence. Returns the lock file for `release`."""
    try:
        return lock_log_dir(log_dir)
    except LogDirInUse:
        raise offline_change_refused(log_dir, command) from None


def log_dir_of(path: str | Path) -> Path | None:
    """The log dir that holds `path` (itself, its parent, or its grandparent: a log dir, a partition
    dir, a file in either) and has a `.lock` file; None when none of them has one."""
    here = Path(path).absolute()
    for candidate in (here, here.parent, here.parent.parent):
        if (candidate / LOCK_FILE_NAME).is_file():
            return candidate
    return None


def locked_log_dir(path: str | Path) -> Path | None:
    """The log dir holding `path` that a running broker has locked, or None."""
    log_dir = log_dir_of(path)
    return log_dir if log_dir is not None and is_locked(log_dir) else None


def warn_if_in_use(paths: list[Path] | list[str]) -> list[Path]:
    """For the read-only tools: one line on stderr per locked log dir among `paths`' dirs (what they
    read may change under them); returns those dirs."""
    import sys

    found: list[Path] = []
    for path in paths:
        log_dir = locked_log_dir(path)
        if log_dir is not None and log_dir not in found:
            found.append(log_dir)
            print(
                f"kcli: {log_dir} is in use by a running broker (its {LOCK_FILE_NAME} is locked); "
                "what is read may change while it is read.",
                file=sys.stderr,
                flush=True,
            )
    return found


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()
