"""Typed errors of tf_gdp; the bad-input root lives in the bridge (lowest layer)."""

from grappler_bridge.errors import GraphLoadError
from grappler_bridge.errors import InputError
from grappler_bridge.errors import PlacementError


class GraphFormatError(InputError):
  """An op-graph document or JSON file breaks the format's rules."""


class InfeasibleError(InputError):
  """No placement can satisfy the graph's memory or device constraints.

  Raised before a search starts, with the numbers (needed vs available), so
  that nobody waits for a method to return a placement that cannot run.
  """


__all__ = ["GraphFormatError", "GraphLoadError", "InfeasibleError",
           "InputError", "PlacementError"]
