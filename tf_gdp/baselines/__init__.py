"""Placement baselines: the published methods GDP is compared against.

    result = baselines.run("m_sct", graph, topology, seed=0)
    result.placement, result.search_seconds, result.evaluations, result.info

Every method is `place(graph, topology, *, seed=0, **options)` returning an
int32 device index per op; `METHODS` maps names to them: single_device,
random, round_robin, human_expert (the zoo's expert rules), m_topo, m_etf and
m_sct (Baechi, SoCC 2020), heft (Topcuoglu et al. 2002), metis (k-way
partitioning), stage_pipeline (the stage rules' own placements: hand-written
knowledge as a row of its own), contiguous_dp (the optimal contiguous split
of the forward pass, Tarnawski et al., NeurIPS 2020), side_offload (the
step's longest path on one device, weight gradients and updates beside it),
local_search (hill
climbing from the best cheap baseline, budgeted in simulator evaluations:
the bar for every search) and hdp (the HDP-style learned grouper + placer).
All respect allowed device kinds, colocation groups, pins and device memory
(see `common` for the memory model).
"""

from grappler_bridge import package_api as _package_api

from tf_gdp.baselines.common import InternalError
from tf_gdp.baselines.registry import METHODS
from tf_gdp.baselines.registry import MethodResult
from tf_gdp.baselines.registry import get
from tf_gdp.baselines.registry import method_names
from tf_gdp.baselines.registry import run

__all__ = [
    "InternalError",
    "METHODS",
    "MethodResult",
    "get",
    "method_names",
    "run",
]

_package_api.install(
    globals(),
    modules=("contiguous_dp", "hdp", "heft", "list_scheduler", "local_search",
             "m_etf", "m_sct", "m_topo", "metis", "random_placement",
             "round_robin", "side_offload", "single_device",
             "stage_pipeline"))
