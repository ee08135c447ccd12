"""Typed errors shared by every layer.

`InputError` marks a problem with what the user gave us (a file, a flag, a
graph): the CLI turns it into one line on stderr and exit code 2. Everything
else is an internal failure (exit code 1).
"""


class InputError(ValueError):
  """The input (file, graph, device, flag) is malformed or unusable."""


class GraphLoadError(InputError):
  """A graph file could not be read or parsed."""


class PlacementError(InputError):
  """A placement breaks a device, kernel or colocation constraint."""


def first_line(error: Exception) -> str:
  """The first line of an error's text, to quote it in a one-line message."""
  text = str(error).strip()
  return text.splitlines()[0] if text else type(error).__name__
