"""`tf-gdp corpus list`: the corpus's families, split and graphs.

Examples:
  tf-gdp corpus list
  tf-gdp corpus list --devices=v100x8 --json_out=corpus.json

One line per graph: family, split, and, for graphs already built for the
hardware of `--devices`, ops and the memory one device needs against its
capacity. Nothing is built (`tf-gdp corpus build` does that).
"""

import json

from absl import flags

from tf_gdp import fileio
from tf_gdp.corpus import families
from tf_gdp.corpus import store

_DEVICES = flags.DEFINE_string("devices", "p100x4", "Whose cache to read.")
_ROOT = flags.DEFINE_string("root", None, "Cache folder (default: "
                            "$TF_GDP_HOME/corpus).")
_JSON_OUT = flags.DEFINE_string("json_out", None, "Also write it as JSON.")


def main(argv):
  del argv
  rows = store.listing(_DEVICES.value, root=_ROOT.value)
  print(store.format_manifest(rows))
  for split in families.SPLITS:
    names = [f.name for f in families.FAMILIES.values() if f.split == split]
    count = len(families.variants(split))
    print(f"{split}: {count} graphs, {len(names)} families ({', '.join(names)})")
  if _JSON_OUT.value:
    fileio.write_atomically(_JSON_OUT.value, json.dumps(rows, indent=1))
