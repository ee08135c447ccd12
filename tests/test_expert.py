"""Human-expert placements of toy zoo graphs on the 4-GPU preset."""

import dataclasses
import re

import numpy as np
import pytest

from tf_gdp import graph_specs
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.errors import InputError
from tf_gdp.graph import op_graph
from tf_gdp.zoo import expert

DEVICES = "p100x4"
TINY = {
    "gnmt": "num_layers=3,hidden_size=8,vocab_size=50,batch=4,"
            "source_length=3,target_length=3",
    "rnnlm4": "hidden_size=8,vocab_size=50,batch=4,num_steps=3",
    "transformer_xl4": "model_size=8,num_heads=2,head_size=4,inner_size=16,"
                       "vocab_size=20,batch=2,segment_length=4,"
                       "memory_length=3",
    "wavenet2": "layers_per_stack=4,residual_channels=4,dilation_channels=4,"
                "skip_channels=8,quantization_levels=16,batch=2,"
                "audio_length=16",
    "amoebanet": "num_cells=1,filters=8,image_size=32,batch=2,num_classes=10",
    "inception_v3": "batch=1,image_size=75,num_classes=10,aux_logits=false",
}


@pytest.fixture(scope="module")
def topology():
  return topology_lib.get(DEVICES)


@pytest.fixture(scope="module")
def graphs():
  cache = {}

  def get(name):
    if name not in cache:
      cache[name] = graph_specs.load_model(name, knobs=TINY[name],
                                           devices=DEVICES).graph
    return cache[name]

  return get


def _devices_by_pattern(graph, placement, pattern):
  """{int(group 1 of the match): set of devices} over fwd + bwd op names."""
  found = {}
  for name, device in zip(graph.node_names, placement):
    match = re.match(r"^(?:gradient_tape/)?" + pattern, name)
    if match:
      found.setdefault(int(match.group(1)), set()).add(int(device))
  return found


def _device_of_prefix(graph, placement, prefix):
  return {int(d) for n, d in zip(graph.node_names, placement)
          if n.startswith(prefix) or n.startswith("gradient_tape/" + prefix)}


@pytest.mark.parametrize("name", sorted(TINY))
def test_expert_placement_satisfies_the_constraints(name, graphs, topology):
  graph = graphs(name)
  placement = expert.expert_placement(graph, topology)
  assert placement.dtype == np.int32
  assert placement.shape == (graph.num_nodes,)
  assert simulator.constraint_problems(graph, placement, topology) == []


def test_gnmt_one_layer_per_gpu(graphs, topology):
  graph = graphs("gnmt")
  placement = expert.expert_placement(graph, topology)
  for side in ("encoder", "decoder"):
    layers = _devices_by_pattern(graph, placement, side + r"/layer_(\d+)/")
    assert layers == {0: {0}, 1: {1}, 2: {2}}, side
  assert _device_of_prefix(graph, placement, "embedding/") == {0}
  for last in ("attention/", "softmax/", "loss/"):
    assert _device_of_prefix(graph, placement, last) == {2}, last
  # Updates follow their variable's layer, sums of gradients their producers.
  index = graph.node_index
  assert placement[index[
      "decoder/layer_1/kernel/sgd/ResourceApplyGradientDescent"]] == 1
  assert 3 not in set(placement.tolist())  # 3 layers: the 4th GPU idles


def test_rnnlm_one_layer_per_gpu(graphs, topology):
  graph = graphs("rnnlm4")
  placement = expert.expert_placement(graph, topology)
  layers = _devices_by_pattern(graph, placement, r"lstm/layer_(\d+)/")
  assert layers == {k: {k} for k in range(4)}
  assert _device_of_prefix(graph, placement, "embedding/") == {0}
  assert _device_of_prefix(graph, placement, "softmax/") == {3}
  # The tape's top-level AddN sums go where their inputs are.
  sums = [i for i, n in enumerate(graph.node_names) if n.startswith("AddN")]
  assert sums
  for i in sums:
    producers = graph.edge_src[graph.edge_dst == i]
    assert placement[i] in set(placement[producers].tolist())


def test_transformer_xl_one_layer_per_gpu(graphs, topology):
  graph = graphs("transformer_xl4")
  placement = expert.expert_placement(graph, topology)
  layers = _devices_by_pattern(graph, placement, r"layer_(\d+)/")
  assert layers == {k: {k} for k in range(4)}
  for first in ("embedding/", "positions/"):
    assert _device_of_prefix(graph, placement, first) == {0}
  assert _device_of_prefix(graph, placement, "softmax/") == {3}


def test_transformer_xl8_contiguous_even_blocks(topology):
  # The 8-layer rule on a name-only chain (the real graph takes long to
  # build): embedding -> layer_0 -> ... -> layer_7 -> softmax -> loss.
  names = (["embedding/segment_0/Gather"] +
           [f"layer_{k}/segment_0/attention/MatMul" for k in range(8)] +
           [f"gradient_tape/layer_{k}/segment_0/ffn/MatMul" for k in range(8)]
           + ["softmax/segment_0/MatMul", "loss/truediv", "AddN_3"])
  graph = _chain(names, {"model": "transformer_xl8", "knobs": {}})
  placement = dict(zip(names, expert.expert_placement(graph, topology)))
  for k in range(8):
    assert placement[f"layer_{k}/segment_0/attention/MatMul"] == k // 2
    assert placement[f"gradient_tape/layer_{k}/segment_0/ffn/MatMul"] == k // 2
  assert placement["embedding/segment_0/Gather"] == 0
  assert placement["softmax/segment_0/MatMul"] == 3
  assert placement["AddN_3"] == 3  # unscoped: its producer's device


def test_wavenet_stacks_contiguous(graphs, topology):
  graph = graphs("wavenet2")
  placement = expert.expert_placement(graph, topology)
  found = {}
  for name, device in zip(graph.node_names, placement):
    match = re.match(r"^(?:gradient_tape/)?stack_(\d+)/layer_(\d+)/", name)
    if match:
      key = (int(match.group(1)), int(match.group(2)))
      found.setdefault(key, set()).add(int(device))
  assert all(len(devices) == 1 for devices in found.values())
  order = [found[key].pop() for key in sorted(found)]
  # 2 stacks x 4 layers over 4 GPUs: two consecutive layers per GPU.
  assert order == [0, 0, 1, 1, 2, 2, 3, 3]
  assert _device_of_prefix(graph, placement, "input/") == {0}
  assert _device_of_prefix(graph, placement, "output/") == {3}


@pytest.mark.parametrize("name", ["inception_v3", "amoebanet"])
def test_image_models_on_one_gpu(name, graphs, topology):
  graph = graphs(name)
  placement = expert.expert_placement(graph, topology)
  assert set(placement.tolist()) == {0}


def test_more_layers_than_gpus_and_no_gpus(graphs):
  graph = graphs("rnnlm4")
  cpus = topology_lib.get("cpu-workers:2")
  placement = expert.expert_placement(graph, cpus)
  layers = _devices_by_pattern(graph, placement, r"lstm/layer_(\d+)/")
  assert layers == {0: {0}, 1: {0}, 2: {1}, 3: {1}}
  assert simulator.constraint_problems(graph, placement, cpus) == []


def test_rules_go_by_name_not_node_id(graphs, topology):
  graph = graphs("rnnlm4")
  placement = expert.expert_placement(graph, topology)
  shuffled = _permuted(graph, np.random.default_rng(0).permutation(
      graph.num_nodes))
  again = expert.expert_placement(shuffled, topology)
  by_name = dict(zip(graph.node_names, placement.tolist()))
  assert dict(zip(shuffled.node_names, again.tolist())) == by_name


def test_cpu_only_ops_and_split_groups_are_fixed_up(graphs, topology):
  graph = graphs("rnnlm4")
  index = graph.node_index
  cpu_only = "lstm/layer_2/t1/MatMul"
  kinds = list(graph.device_kinds)
  kinds[index[cpu_only]] = ("CPU",)
  # One colocation group across layer 0 and layer 3 (3 members vs 1).
  groups = list(graph.colocation_groups)
  members = ["lstm/layer_0/t0/MatMul", "lstm/layer_0/t1/MatMul",
             "lstm/layer_0/t2/MatMul", "lstm/layer_3/t0/MatMul"]
  for name in members:
    groups[index[name]] = "test_group"
  changed = dataclasses.replace(graph, device_kinds=tuple(kinds),
                                colocation_groups=tuple(groups))
  placement = expert.expert_placement(changed, topology)
  assert simulator.constraint_problems(changed, placement, topology) == []
  assert topology.devices[placement[index[cpu_only]]].kind == "CPU"
  assert {int(placement[index[n]]) for n in members} == {0}


@pytest.mark.parametrize("metadata, message", [
    ({}, "is not a zoo model"),
    ({"model": "resnet50"}, "no human-expert placement for model 'resnet50'"),
    ({"model": "gnmt2"}, "has no op in that model's layer scopes"),
])
def test_non_zoo_graphs_raise_one_line_input_error(metadata, message,
                                                   topology):
  graph = op_graph.OpGraph.build(
      name="toy", node_names=["a", "b"], op_types=["Const", "Identity"],
      costs={"GPU": [1.0, 1.0]}, output_bytes=[4, 4], memory_bytes=[0, 0],
      edge_src=[0], edge_dst=[1], edge_bytes=[4], metadata=metadata)
  with pytest.raises(InputError) as info:
    expert.expert_placement(graph, topology)
  assert message in str(info.value)
  assert "\n" not in str(info.value)


def test_knobs_that_contradict_the_names_are_rejected(graphs, topology):
  graph = graphs("rnnlm4")
  wrong = dataclasses.replace(
      graph, metadata={**graph.metadata, "model": "rnnlm",
                       "knobs": {"num_layers": 2}})
  with pytest.raises(InputError, match="knobs say num_layers=2"):
    expert.expert_placement(wrong, topology)


def _chain(names, metadata):
  n = len(names)
  return op_graph.OpGraph.build(
      name="chain", node_names=names, op_types=["Identity"] * n,
      costs={"GPU": [1.0] * n, "CPU": [1.0] * n}, output_bytes=[4] * n,
      memory_bytes=[0] * n, edge_src=list(range(n - 1)),
      edge_dst=list(range(1, n)), edge_bytes=[4] * (n - 1),
      metadata=metadata)


def _permuted(graph, order):
  """The same graph with node i renumbered to position of i in `order`."""
  new_id = np.empty(graph.num_nodes, np.int32)
  new_id[order] = np.arange(graph.num_nodes, dtype=np.int32)

  def pick(values):
    return [values[i] for i in order]

  return op_graph.OpGraph.build(
      name=graph.name, node_names=pick(graph.node_names),
      op_types=pick(graph.op_types),
      costs={k: v[order] for k, v in graph.costs.items()},
      output_bytes=graph.output_bytes[order],
      memory_bytes=graph.memory_bytes[order],
      temp_bytes=graph.temp_bytes[order],
      edge_src=new_id[graph.edge_src], edge_dst=new_id[graph.edge_dst],
      edge_bytes=graph.edge_bytes, edge_output=graph.edge_output,
      colocation_groups=pick(graph.colocation_groups),
      device_kinds=pick(graph.device_kinds),
      pinned_devices=pick(graph.pinned_devices),
      output_shapes=pick(graph.output_shapes),
      fetches=graph.fetches, metadata=graph.metadata)
