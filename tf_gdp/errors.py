"""Typed errors of tf_gdp; the bad-input root lives in the bridge (lowest layer)."""

from grappler_bridge.errors import GraphLoadError
from grappler_bridge.errors import InputError
from grappler_bridge.errors import PlacementError


class GraphFormatError(InputError):
  """An op-graph document or JSON file breaks the format's rules."""


__all__ = ["GraphFormatError", "GraphLoadError", "InputError", "PlacementError"]
