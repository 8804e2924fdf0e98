"""Small file operations done the way Kafka does them: the broker's logs, checkpoints and metadata,
`meta.properties`, and replay's checkpoint all write through here; a user's text files are read here."""

from __future__ import annotations

import os
from pathlib import Path

from kcli.errors import KcliError


def write_atomically(path: Path, content: str | bytes) -> None:
    """Write `<name>.tmp`, fsync it, rename it over `path`, fsync the directory (Kafka's checkpoint rule).

    A crash leaves either the old file or the new one, never a mix.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        data = content.encode("utf-8") if isinstance(content, str) else content
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make renames and new files in `path` durable; a directory that vanished is not an error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_if_missing(path: Path) -> None:
    """An empty file, as Kafka's CheckpointFile creates its file when it is first opened."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return
    os.close(fd)


def unlink_if_exists(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


_COPY_CHUNK = 8 << 20


def copy_range(source: Path, start: int, end: int | None, target: Path) -> None:
    """Copy bytes [start, end) of `source` (to its end with None) into a new file `target`, fsynced with
    its directory: what a quarantine keeps before the original is cut or removed. FileExistsError when
    `target` exists (a quarantine never overwrites what it kept)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as src, open(target, "xb") as dst:
        src.seek(start)
        left = None if end is None else end - start
        while left is None or left > 0:
            chunk = src.read(_COPY_CHUNK if left is None else min(left, _COPY_CHUNK))
            if not chunk:
                break
            dst.write(chunk)
            if left is not None:
                left -= len(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    fsync_dir(target.parent)


def quarantine_beside(log_dir: Path) -> Path:
    """The default quarantine of a log dir: `<log dir>.quarantine-<UTC time>` beside it, outside it (a
    broker would take a dir inside for a partition). `kcli recover logdir` and the broker's start-up
    recovery keep what they cut there."""
    from datetime import UTC, datetime

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    resolved = log_dir.resolve()
    return resolved.with_name(f"{resolved.name}.quarantine-{stamp}")


def read_user_text(path: Path) -> str:
    """A text file the user names (CSV, JSON, properties): its text, or one sentence naming the file
    when it is not UTF-8 (a binary file would otherwise end in a UnicodeDecodeError traceback).
    OSErrors carry the file's name and are left to the caller's error handling."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KcliError(
            f"{path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} is not valid there."
        ) from None
