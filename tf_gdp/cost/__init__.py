"""The TF-free cost model: topologies, simulator, ensembles, bound, feasibility."""

from grappler_bridge import package_api as _package_api

__all__ = []

_package_api.install(
    globals(),
    modules=("derived_topologies", "device_names", "ensemble", "feasibility",
             "lower_bound", "presets", "sim_results", "simulator",
             "simulator_reference", "topology"))
