"""Graph specs: one parser for zoo models, files, SavedModels and generated graphs."""

import pytest

from tf_gdp import errors
from tf_gdp import graph_specs

_TINY_GNMT = "gnmt:hidden_size=8:vocab_size=20:batch=2:source_length=3:target_length=3"


def test_parse_zoo_knobs_and_files(tmp_path):
  assert [g.label for g in graph_specs.parse("zoo")][:1] and all(
      g.model for g in graph_specs.parse("zoo"))
  (tiny,) = graph_specs.parse(_TINY_GNMT)
  assert tiny.model == "gnmt" and "hidden_size=8" in tiny.knobs and "," in tiny.knobs
  (tmp_path / "a.json").write_text("{}")
  (tmp_path / "b.json").write_text("{}")
  files = graph_specs.parse(str(tmp_path / "*.json"))
  assert [g.label for g in files] == ["a.json", "b.json"]
  with pytest.raises(errors.InputError, match="neither a zoo model"):
    graph_specs.parse("no_such_thing")


def test_generated_graphs():
  items = graph_specs.parse("layered:300:width=20,cells:200:cell=16:seed=2")
  graphs = [item.load("p100x2").graph for item in items]
  assert [g.num_nodes for g in graphs] == [300, 200]
  assert graphs[1].num_edges > 200
  with pytest.raises(errors.InputError):
    graph_specs.parse("layered:x")
  with pytest.raises(errors.InputError):
    graph_specs.parse("cells:100:width=3")


def test_branches_are_independent_chains_joined_at_the_end():
  (item,) = graph_specs.parse("branches:41:k=4:seed=3")
  graph = item.load("p100x2").graph
  assert graph.num_nodes == 41
  join = graph.num_nodes - 1
  # Without the join, the branches are 4 weakly connected components.
  parent = list(range(graph.num_nodes))

  def find(v):
    while parent[v] != v:
      v = parent[v]
    return v

  for u, v in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
    if v != join:
      parent[find(u)] = find(v)
  assert len({find(v) for v in range(join)}) == 4
  # Numbered branch by branch: the topological order visits them in turn.
  roots = [find(int(v)) for v in graph.topo_order if v != join]
  assert sum(a != b for a, b in zip(roots, roots[1:])) == 3
  with pytest.raises(errors.InputError, match="2K"):
    graph_specs.parse("branches:8:k=4")
  with pytest.raises(errors.InputError, match="k must be"):
    graph_specs.parse("branches:80:k=1")


def test_generated_graphs_come_first_as_make_pretrain_relies_on():
  items = graph_specs.parse("rnnlm2,branches:30,layered:40@p100x2",
                            allow_devices=True)
  assert [i.label for i in items] == ["branches_30", "layered_40@p100x2",
                                      "rnnlm2"]


def test_a_saved_model_with_one_signature_uses_it(train_step_saved_model):
  loaded = graph_specs.load(train_step_saved_model, devices="local-cpus:2")
  assert loaded.saved_model_signature == "train_step"
  assert "MatMul" in set(loaded.graph.op_types)
  (spec,) = graph_specs.parse(train_step_saved_model, signature="train_step")
  named = spec.load("local-cpus:2")
  assert named.saved_model_signature == "train_step"
  assert named.graph.num_nodes == loaded.graph.num_nodes
  (spec,) = graph_specs.parse(train_step_saved_model, signature="nope")
  with pytest.raises(errors.GraphLoadError,
                     match=r"no signature 'nope' \(has: \['train_step'\]\)"):
    spec.load("local-cpus:2")


def test_several_signatures_and_no_default_need_one_named(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  module = tf.Module()
  module.w = tf.Variable(tf.ones([2, 2]))
  spec = [tf.TensorSpec([1, 2], tf.float32)]
  module.f = tf.function(lambda x: tf.matmul(x, module.w), input_signature=spec)
  module.g = tf.function(lambda x: tf.tanh(x), input_signature=spec)
  path = str(tmp_path / "two")
  tf.saved_model.save(module, path, signatures={"f": module.f, "g": module.g})
  with pytest.raises(errors.InputError, match=r"\(f, g\).*--signature"):
    graph_specs.load(path)
  assert graph_specs.load(path, signature="g").saved_model_signature == "g"
