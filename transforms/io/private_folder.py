"""A folder of the machine's temporary directory that only this user can reach.

The address, lock and socket files of the served models (scoring/model_server.py) live
in one: `private_folder("qa_eval_served_models")` is
`<tempdir>/qa_eval_served_models-<uid>`, made with mode 0700 when it does not exist.
One that exists is used only when it is a real folder (not a symbolic link), owned by
this user, and closed to everyone else (no group or other permission bits); anything
else is refused with `PrivateFolderError`, one line that says what is wrong and what to
do, and nothing is followed or written there. The temporary directory itself (`/tmp`,
sticky) lets no other user rename or replace a folder this user owns.
"""

from __future__ import annotations

import os
import stat
import tempfile


class PrivateFolderError(RuntimeError):
    """A private folder that exists but cannot be trusted (another owner, a link, loose
    permissions). One line with exit status 2 from the command line (`cli.run_main`),
    also when a worker raised it inside a running pipeline."""

    user_file_error = True


def private_folder(name: str, parent: str | None = None) -> str:
    """The path of this user's folder `<parent>/<name>-<uid>`, made (0700) if missing.

    Args:
        name: the folder's name, before the user id.
        parent: where it lives (None: the machine's temporary directory).

    Raises:
        PrivateFolderError: the path exists and is not a folder owned by this user with
            no permission for anyone else.
    """
    path = os.path.join(parent or tempfile.gettempdir(), f"{name}-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_private(path)
    return path


def check_private(path: str) -> None:
    """Raises `PrivateFolderError` unless `path` is a folder (not a link to one) owned
    by this user that no one else may read, write or enter."""
    try:
        info = os.lstat(path)
    except OSError as e:
        raise PrivateFolderError(f"cannot use {path}: {e.strerror or e}") from e
    if stat.S_ISLNK(info.st_mode):
        problem = "it is a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        problem = "it is not a folder"
    elif info.st_uid != os.getuid():
        problem = f"it belongs to user id {info.st_uid}, not to this user ({os.getuid()})"
    elif info.st_mode & 0o077:
        problem = (f"its permissions are {stat.filemode(info.st_mode)}: others may reach "
                   "it (it must be drwx------)")
    else:
        return
    raise PrivateFolderError(
        f"refusing to use {path}: {problem}; remove it (or point TMPDIR at a folder of "
        "your own) and run again")


def write_private(path: str, data: bytes) -> None:
    """Writes `data` to `path` (mode 0600) whole or not at all: a reader sees the old
    file or the new one (written beside it, then renamed)."""
    temporary = f"{path}.tmp-{os.getpid()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        remove_quietly(temporary)
        raise


def remove_quietly(*paths: str) -> None:
    """Removes each path that exists; one already gone is not an error."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
