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
