"""tf-gdp: generalized device placement for TensorFlow dataflow graphs.

    import tf_gdp as gdp
    step = gdp.place(train_step, x, y, devices="local")  # see tf_gdp.api

Importing this package prepares TensorFlow for TF-GNN (Keras 2 via
`TF_USE_LEGACY_KERAS=1`) before TensorFlow is imported anywhere; TensorFlow
itself is imported lazily by the modules that need it.
"""

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
from tf_gdp.version import __version__

__all__ = [
    "GraphFormatError",
    "InputError",
    "OpGraph",
    "PlacedFunction",
    "PlacementError",
    "__version__",
    "from_document",
    "load_json",
    "load_placement",
    "place",
    "save_json",
]
