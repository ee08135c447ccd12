"""Running placed graphs on real devices.

Step times (`measure`), peak memory by TF's allocator (`allocator_stats`),
CPU worker clusters (`workers`), calibration, profiles and confirmation.
"""

from grappler_bridge import package_api as _package_api

__all__ = []

_package_api.install(
    globals(),
    modules=("allocator_stats", "calibrate", "confirmation", "measure",
             "profiled_costs", "workers"))
