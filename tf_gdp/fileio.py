"""Atomic file writes: a crash or a kill never leaves half a file behind."""

import os
import shutil
import tempfile
from typing import Callable, Union


def write_atomically(path: str, data: Union[bytes, str]) -> None:
  """Writes to a temp file beside `path`, then renames it over `path`."""
  if isinstance(data, str):
    data = data.encode("utf-8")
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-",
                             suffix="-" + os.path.basename(path))
  try:
    # mkstemp makes the file 0600; give it the mode a plain open() would.
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def write_directory_atomically(path: str, write: Callable[[str], None]) -> None:
  """`write(staging)` fills a temp directory beside `path`, renamed over it.

  A directory already at `path` is replaced; if `write` fails, nothing is
  left behind.
  """
  parent = os.path.dirname(os.path.abspath(path))
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(dir=parent, prefix=".tmp-dir-")
  try:
    write(staging)
    if os.path.exists(path):
      shutil.rmtree(path)
    os.replace(staging, path)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
