"""Size limits on input files, checked before anything is parsed.

A parser's memory grows with its input (op-graph JSON several times the file
size, protobuf too), so a huge or hostile file must be refused by its size,
before a byte of it is decoded. One limit covers every input file (graph
files, op-graph and topology JSON); it is set by the environment variable
`TF_GDP_MAX_INPUT_BYTES` (an integer, or with a K/M/G suffix: "512M") or per
call.

This module is TF-free, so the TF-free loaders use it too.
"""

import os
import re
from typing import Optional, Type

from grappler_bridge import errors

MAX_INPUT_BYTES_ENV = "TF_GDP_MAX_INPUT_BYTES"
# 1 GiB: a 50k-node training graph is tens of MB as GraphDef or JSON; binary
# protobuf cannot exceed 2 GiB anyway.
DEFAULT_MAX_INPUT_BYTES = 1 << 30
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def max_input_bytes() -> int:
  """The file size limit in bytes (environment, else the default)."""
  text = os.environ.get(MAX_INPUT_BYTES_ENV)
  if text is None or not text.strip():
    return DEFAULT_MAX_INPUT_BYTES
  match = _SIZE.match(text)
  if not match or int(match.group(1)) <= 0:
    raise errors.InputError(
        f"{MAX_INPUT_BYTES_ENV}={text!r}: use a positive number of bytes, "
        "optionally with K, M or G (e.g. 512M)")
  return int(match.group(1)) * _UNITS[match.group(2).upper()]


def check_size(path: str, *, what: str = "file",
               error: Type[errors.InputError] = errors.GraphLoadError,
               limit: Optional[int] = None) -> int:
  """The size of a regular, non-empty file within the limit, or `error`."""
  limit = max_input_bytes() if limit is None else limit
  if not os.path.exists(path):
    raise error(f"{path}: no such {what}")
  if not os.path.isfile(path):
    raise error(f"{path}: not a regular file")
  size = os.path.getsize(path)
  if size == 0:
    raise error(f"{path}: file is empty")
  if size > limit:
    raise error(
        f"{path}: file is {size} bytes, over the {limit}-byte input limit "
        f"(set {MAX_INPUT_BYTES_ENV} to raise it)")
  return size


def read_input_file(path: str, *, what: str = "file",
                    error: Type[errors.InputError] = errors.GraphLoadError,
                    limit: Optional[int] = None) -> bytes:
  """The bytes of a regular, non-empty file within the size limit.

  Args:
    path: the file.
    what: what the file should be, for the "no such ..." message.
    error: the InputError subclass to raise.
    limit: the size limit in bytes (default: `max_input_bytes()`).

  Raises:
    `error` (one line naming the path) when the file is missing, not a
    regular file, empty, over the limit or unreadable.
  """
  limit = max_input_bytes() if limit is None else limit
  check_size(path, what=what, error=error, limit=limit)
  try:
    with open(path, "rb") as f:
      data = f.read(limit + 1)
  except OSError as e:
    raise error(f"{path}: cannot read: {e.strerror or e}") from e
  if len(data) > limit:  # it grew while we looked
    raise error(f"{path}: over the {limit}-byte input limit")
  return data
