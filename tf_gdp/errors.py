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


class NoValidPlacementError(InfeasibleError):
  """Neither the method nor the repair found a placement that fits memory.

  The memory lower bound (`cost.feasibility`) allows one, but it is only a
  necessary condition: no result is returned rather than an invalid one.
  """


__all__ = ["GraphFormatError", "GraphLoadError", "InfeasibleError",
           "InputError", "NoValidPlacementError", "PlacementError"]
