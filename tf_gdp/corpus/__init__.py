"""A corpus of real training-step graphs for pre-training and evaluation.

`families` holds the table (families, their sizes, the fixed train/eval
split); `store` builds a variant's graph on demand and caches it as op-graph
JSON; `graph_sets` turns `corpus:SPLIT` items of a graph spec into those
files. The builders (`training_steps`, `transformers`, `recurrent`,
`vision_models`, `recommenders`, `speech`, `gan`, `detector`, `moe`, `gnn`,
`keras3_models`) are real model code: Keras applications and tf_keras layers,
and, for one family, Keras 3.
"""

from grappler_bridge import package_api as _package_api

from tf_gdp.corpus.families import FAMILIES
from tf_gdp.corpus.families import VARIANTS
from tf_gdp.corpus.families import variants
from tf_gdp.corpus.store import ensure

__all__ = ["FAMILIES", "VARIANTS", "ensure", "variants"]

_package_api.install(
    globals(),
    modules=("detector", "families", "gan", "gnn", "graph_sets",
             "keras3_models", "moe",
             "recommenders", "recurrent", "speech", "store", "training_steps",
             "transformers", "vision_models"))
