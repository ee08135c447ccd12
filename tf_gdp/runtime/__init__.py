"""Running placed graphs on real devices: measurement, CPU worker clusters, calibration."""

from grappler_bridge import package_api as _package_api

__all__ = []

_package_api.install(
    globals(),
    modules=("calibrate", "confirmation", "measure", "profiled_costs",
             "workers"))
