"""`corpus:SELECTION` items of a graph spec: which corpus graphs they name.

`corpus:train` and `corpus:eval` are the split's graphs, `corpus:all`
every graph, `corpus:FAMILY` one family and `corpus:VARIANT` one graph, so
`tf-gdp pretrain --graphs=corpus:train` trains on the training families and
`tf-gdp bench --graphs=corpus:eval` runs the evaluation families.
"""

from typing import Tuple

from tf_gdp import errors
from tf_gdp.corpus import families

PREFIX = "corpus"


def is_corpus_item(item: str) -> bool:
  return item.partition(":")[0] == PREFIX


def select(item: str) -> Tuple[families.Variant, ...]:
  """The variants a `corpus:SELECTION` item names; InputError if none."""
  selection = item.partition(":")[2]
  try:
    return families.variants(selection or "?")
  except KeyError:
    raise errors.InputError(
        f"{item!r}: use corpus:train, corpus:eval, corpus:all, corpus:FAMILY "
        f"({', '.join(families.FAMILIES)}) or corpus:VARIANT "
        "(`tf-gdp corpus list` lists them)") from None
