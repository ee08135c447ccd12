"""tf-gdp: generalized device placement for TensorFlow dataflow graphs.

    import tf_gdp as gdp
    step = gdp.place(train_step, x, y, devices="local")  # a tf.function, placed

    loaded = gdp.load_graph("gnmt4:batch=64", devices="p100x4")  # or a file
    result = gdp.place_graph(loaded.graph, gdp.get_topology("p100x4"), "gdp")
    gdp.write_outputs("out/gnmt4", loaded, gdp.get_topology("p100x4"), result)

The subpackages (`gdp.zoo`, `gdp.baselines`, `gdp.cost`, `gdp.graph`,
`gdp.policy`, `gdp.rl`, `gdp.runtime`, `gdp.viz`, `gdp.cli`) load on first
use.
Importing this package prepares TensorFlow for TF-GNN (Keras 2 via
`TF_USE_LEGACY_KERAS=1`) before TensorFlow is imported anywhere; TensorFlow
itself is imported lazily by the modules that need it.
"""

from grappler_bridge import package_api as _package_api
from grappler_bridge.tf_env import prepare_tensorflow_environment as _prepare

_prepare()

# pylint: disable=g-import-not-at-top,wrong-import-position
from tf_gdp.api import PlacedFunction
from tf_gdp.api import load_placement
from tf_gdp.api import place
from tf_gdp.errors import GraphFormatError
from tf_gdp.errors import InputError
from tf_gdp.errors import PlacementError
from tf_gdp.graph import OpGraph
from tf_gdp.graph import from_document
from tf_gdp.graph import load_json
from tf_gdp.graph import save_json
from tf_gdp.graph_specs import LoadedGraph
from tf_gdp.graph_specs import load_graph
from tf_gdp.placement_file import PlacementFile
from tf_gdp.placing import PlaceResult
from tf_gdp.placing import method_names
from tf_gdp.placing import place as place_graph
from tf_gdp.target_devices import resolve as get_topology
from tf_gdp.version import __version__

__all__ = [
    "GraphFormatError",
    "InputError",
    "LoadedGraph",
    "OpGraph",
    "PlaceResult",
    "PlacedFunction",
    "PlacementError",
    "PlacementFile",
    "from_document",
    "get_topology",
    "load_graph",
    "load_json",
    "load_placement",
    "method_names",
    "place",
    "place_graph",
    "save_json",
    "write_outputs",
]

_package_api.install(
    globals(),
    modules=("baselines", "cli", "corpus", "cost", "graph", "policy", "rl",
             "runtime", "viz", "zoo"),
    lazy={"write_outputs": "tf_gdp.place_batch"})
