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
