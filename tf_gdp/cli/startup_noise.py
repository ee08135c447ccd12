"""Keeps TensorFlow's C++ start-up notices off a CLI user's terminal.

When TensorFlow loads, its C++ runtime writes notices straight to file
descriptor 2: absl's "All log messages before absl::InitializeLog()" warning,
the oneDNN notice, "Could not find cuda drivers", "failed call to cuInit", CPU
feature hints, oneDNN's fallbacks on processors without AVX-512. They come before absl logging is set up, so
TF_CPP_MIN_LOG_LEVEL does not hide them, and they bury the one line a failing
command prints. While a command runs, fd 2 goes through a pipe whose reader
drops exactly those notices and passes every other line through unchanged
(worker processes inherit the pipe, so theirs are dropped too). With
`--verbosity=1` nothing is filtered.
"""

import os
import re
import sys
import threading
from typing import Optional, Sequence

# One TF C++ log line: severity and date, time, thread id, source:line] text.
_TF_LOG_LINE = re.compile(rb"^[IWEF]\d{4} [\d:.]+\s+\d+ ([\w.]+):\d+\] (.*)$")
# Start-up notices by source file and text; every other TF line is kept.
_STARTUP_NOTICES = (
    (b"port.cc", b"oneDNN custom operations are on"),
    (b"cudart_stub.cc", b"Could not find cuda drivers"),
    (b"cuda_platform.cc", b"failed call to cuInit"),
    (b"cuda_driver.cc", b"failed call to cuInit"),
    (b"cpu_feature_guard.cc", b"This TensorFlow binary is optimized"),
    (b"cuda_dnn.cc", b"Unable to register"),
    (b"cuda_fft.cc", b"Unable to register"),
    (b"cuda_blas.cc", b"Unable to register"),
    (b"computation_placer.cc", b"already registered"),
    (b"util.cc", b"oneDNN supports"),
)
_STARTUP_LINES = (
    b"WARNING: All log messages before absl::InitializeLog() is called are "
    b"written to STDERR",
)
_CONTINUATION = re.compile(rb"^To enable the following instructions: .*"
                           rb"rebuild TensorFlow with the appropriate compiler"
                           rb" flags\.$")
_DRAIN_SECONDS = 2.0


def is_startup_notice(line: bytes) -> bool:
  """Whether `line` (no newline) is one of TensorFlow's start-up notices."""
  line = line.rstrip(b"\r")
  if line in _STARTUP_LINES or _CONTINUATION.match(line):
    return True
  match = _TF_LOG_LINE.match(line)
  return bool(match) and any(
      match.group(1) == source and text in match.group(2)
      for source, text in _STARTUP_NOTICES)


def verbose(argv: Sequence[str]) -> bool:
  """`--verbosity=N` / `-v N` with N >= 1 among the command's arguments.

  Read before absl parses the flags: the filter must be in place before
  anything imports TensorFlow.
  """
  value: Optional[str] = None
  for i, arg in enumerate(argv):
    for name in ("--verbosity", "-v"):
      if arg == name and i + 1 < len(argv):
        value = argv[i + 1]
      elif arg.startswith(name + "="):
        value = arg.split("=", 1)[1]
  try:
    return value is not None and int(value) >= 1
  except ValueError:
    return False


class StartupNoiseFilter:
  """A context manager: fd 2 without TensorFlow's start-up notices."""

  def __init__(self):
    self._saved_fd = None
    self._reader = None

  def __enter__(self):
    sys.stderr.flush()
    self._saved_fd = os.dup(2)
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    self._reader = threading.Thread(target=self._pass_through,
                                    args=(read_fd, self._saved_fd),
                                    daemon=True)
    self._reader.start()
    return self

  def __exit__(self, *exc_info):
    sys.stderr.flush()
    os.dup2(self._saved_fd, 2)  # closes this process's end of the pipe
    # A child process still holding the pipe keeps it open: wait a little.
    self._reader.join(_DRAIN_SECONDS)
    if not self._reader.is_alive():
      os.close(self._saved_fd)
    return False

  @staticmethod
  def _pass_through(read_fd: int, out_fd: int) -> None:
    pending = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
      while True:
        chunk = pipe.read(65536)
        if not chunk:
          break
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        kept = [line + b"\n" for line in lines if not is_startup_notice(line)]
        if kept:
          os.write(out_fd, b"".join(kept))
    if pending and not is_startup_notice(pending):
      os.write(out_fd, pending)
