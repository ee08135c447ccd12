"""The op-graph IR, its JSON format, numbered name scopes and stage rules, and
random graph generators."""

from grappler_bridge import package_api as _package_api

from tf_gdp.graph.json_io import from_document
from tf_gdp.graph.json_io import load_json
from tf_gdp.graph.json_io import save_json
from tf_gdp.graph.json_io import to_document
from tf_gdp.graph.op_graph import OpGraph
from tf_gdp.graph.describe import summary

__all__ = ["OpGraph", "from_document", "load_json", "save_json", "summary",
           "to_document"]

_package_api.install(
    globals(),
    modules=("describe", "generators", "identity", "json_io", "op_graph",
             "scopes"))
