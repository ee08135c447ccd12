"""Running placed graphs on real devices: measurement, allocator statistics, CPU worker clusters, calibration."""

from grappler_bridge import package_api as _package_api

__all__ = []

_package_api.install(
    globals(),
    modules=("allocator_stats", "calibrate", "confirmation", "measure",
             "profiled_costs", "workers"))
