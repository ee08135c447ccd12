"""The corpus: its table and split, building and caching, spec items, CLI."""

import functools
import json
import os
import subprocess
import sys
import types

import pytest

from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp.corpus import families
from tf_gdp.corpus import graph_sets
from tf_gdp.corpus import store
from tf_gdp.corpus import training_steps
from tf_gdp.graph import scopes

DEVICES = "p100x2"


def _variant(name, kind, **args):
  return families.Variant(name, "keras_rnn", kind,
                          types.MappingProxyType(args))


@functools.lru_cache(maxsize=None)
def _tiny_graph(tiny):
  """The op graph of the variant `tiny()` makes, built once for the tests
  that only read it."""
  return store.build_graph(tiny(), DEVICES)


@functools.lru_cache(maxsize=None)
def _tiny_graph_def(tiny):
  """The GraphDef of the variant `tiny()` makes, for the tests that run
  parts of it."""
  return store._extract(tiny()).meta_graph.graph_def  # pylint: disable=protected-access


TINY_RNN = _variant("tiny_lstm", families.RECURRENT, cell="lstm", layers=1,
                    hidden=16, seq=4, batch=2, vocab=50)
TINY_GENERATED = _variant("tiny_layered", families.GENERATED,
                          spec="layered:40")


def test_the_table_is_big_enough_and_split_by_family():
  assert len(families.VARIANTS) >= 40
  assert len(families.FAMILIES) >= 12
  train = families.variants(families.TRAIN)
  held_out = families.variants(families.EVAL)
  assert len(train) + len(held_out) == len(families.VARIANTS)
  train_families = {v.family for v in train}
  assert train_families.isdisjoint({v.family for v in held_out})
  assert len({v.family for v in held_out}) >= 4
  for family in families.FAMILIES.values():
    assert len(family.variants) >= 1
    assert all(v.family == family.name for v in family.variants)
  # Several sizes per real-code family, so each spans placements' regimes.
  sized = [f for f in families.FAMILIES.values() if len(f.variants) >= 2]
  assert len(sized) >= 12


def test_selection_items():
  assert graph_sets.select("corpus:eval") == families.variants("eval")
  assert graph_sets.select("corpus:vgg") == families.FAMILIES["vgg"].variants
  name = families.variants("train")[0].name
  assert [v.name for v in graph_sets.select(f"corpus:{name}")] == [name]
  for bad in ("corpus:", "corpus:nope"):
    with pytest.raises(errors.InputError, match="corpus:train"):
      graph_sets.select(bad)
  specs = graph_specs.parse("corpus:generated,rnnlm2")
  assert [s.corpus for s in specs[:-1]] == [
      v.name for v in families.FAMILIES["generated"].variants]
  assert specs[-1].model == "rnnlm2"


def test_build_caches_and_rebuilds_only_what_changed(tmp_path, monkeypatch):
  lines = []
  first = store.ensure([TINY_GENERATED, TINY_RNN], DEVICES, root=str(tmp_path),
                       log=lines.append)
  assert [b.rebuilt for b in first] == [True, True]
  rnn = first[1]
  assert rnn.path == store.graph_path(TINY_RNN, "p100x4", str(tmp_path))
  assert rnn.entry["nodes"] > 100 and rnn.entry["fits_one_device"]
  with open(rnn.path) as f:
    document = json.load(f)
  corpus = document["metadata"]["corpus"]
  assert corpus["variant"] == "tiny_lstm" and corpus["args"]["hidden"] == 16
  manifest = json.load(open(os.path.join(store.folder(DEVICES, str(tmp_path)),
                                         store.MANIFEST)))
  assert set(manifest) == {"tiny_layered", "tiny_lstm"}

  stamp = os.path.getmtime(rnn.path)
  again = store.ensure([TINY_RNN], "p100x4", root=str(tmp_path))
  assert not again[0].rebuilt and os.path.getmtime(rnn.path) == stamp

  # A corrupt file, new arguments or a new corpus version: built again.
  with open(first[0].path, "w") as f:
    f.write("{not json")
  changed = _variant("tiny_lstm", families.RECURRENT, cell="gru", layers=1,
                     hidden=16, seq=4, batch=2, vocab=50)
  rebuilt = store.ensure([TINY_GENERATED, changed], DEVICES,
                         root=str(tmp_path))
  assert [b.rebuilt for b in rebuilt] == [True, True]
  monkeypatch.setattr(store, "CORPUS_VERSION", store.CORPUS_VERSION + 1)
  assert store.ensure([TINY_GENERATED], DEVICES,
                      root=str(tmp_path))[0].rebuilt


def test_a_build_keeps_what_another_process_added_meanwhile(tmp_path,
                                                           monkeypatch):
  cache = store.folder(DEVICES, str(tmp_path))
  build = store.build_graph

  def build_while_another_process_finishes(variant, devices):
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, store.MANIFEST), "w") as f:
      json.dump({"elsewhere": {"nodes": 1}}, f)
    return build(variant, devices)

  monkeypatch.setattr(store, "build_graph",
                      build_while_another_process_finishes)
  store.ensure([TINY_GENERATED], DEVICES, root=str(tmp_path))
  with open(os.path.join(cache, store.MANIFEST)) as f:
    assert set(json.load(f)) == {"elsewhere", "tiny_layered"}


def test_adam_slots_are_in_the_graph(tmp_path):
  encoder = _variant("tiny_encoder", families.ENCODER, layers=1, hidden=16,
                     heads=2, seq=4, batch=2, vocab=30)
  graph = store.build_graph(encoder, DEVICES)
  count = lambda op: sum(t == op for t in graph.op_types)
  # Each weight is updated once and Adam's two slots once each.
  updates = count("AssignSubVariableOp")
  assert updates >= 10 and count("AssignVariableOp") == 2 * updates


def _count(graph, op):
  return sum(t == op for t in graph.op_types)


def _shapes(graph, op, prefix=""):
  """Output shapes of the `op` nodes whose names start with `prefix`."""
  return [graph.output_shapes[i][0] for i in range(graph.num_nodes)
          if graph.op_types[i] == op and
          graph.node_names[i].startswith(prefix)]


def test_unet_concatenates_the_skip_of_each_scale():
  unet = _variant("tiny_unet", families.UNET, depth=2, filters=4,
                  image_size=16, batch=2, classes=3)
  graph = store.build_graph(unet, DEVICES)
  # Upsampled decoder features beside the encoder's of the same scale.
  assert sorted(_shapes(graph, "ConcatV2", "unet/up")) == [
      (2, 8, 8, 16), (2, 16, 16, 8)]
  assert _count(graph, "MaxPool") == 2
  logits = [graph.output_shapes[i][0] for i in range(graph.num_nodes)
            if graph.node_names[i].endswith("logits/BiasAdd")]
  assert logits == [(2, 16, 16, 3)]
  with pytest.raises(ValueError, match="multiple"):
    store.build_graph(_variant("odd", families.UNET, depth=3, filters=4,
                               image_size=20, batch=1), DEVICES)


def test_mixer_mixes_tokens_across_patches():
  mixer = _variant("tiny_mixer", families.MIXER, layers=2, hidden=8,
                   token_mlp=6, channel_mlp=12, patch=4, image_size=16,
                   batch=2)
  graph = store.build_graph(mixer, DEVICES)
  # Each block turns (batch, 16 patches, 8 channels) to channels-first for
  # its token MLP, whose weights map the 16 patches through 6 units.
  assert _shapes(graph, "Transpose", "mlp_mixer/block1/to_tokens/") == [
      (2, 8, 16)]
  assert _count(graph, "Transpose") == 2 * 2 * 2  # and their gradients
  assert _shapes(graph, "MatMul", "mlp_mixer/block0/token_mlp_in/") == [
      (16, 6)]
  assert _count(graph, "Conv2D") == 1  # the patch embedding only


def test_translation_decoder_attends_to_the_source():
  model = _variant("tiny_translation", families.TRANSLATION,
                   encoder_layers=1, decoder_layers=2, hidden=8, heads=2,
                   source_seq=6, target_seq=4, batch=2, vocab=50)
  graph = store.build_graph(model, DEVICES)
  names = graph.node_names
  # Every decoder block projects the 6 source positions to its keys; the
  # encoder block has no cross-attention.
  for block in ("decoder0", "decoder1"):
    keys = [graph.output_shapes[i][0] for i in range(graph.num_nodes)
            if names[i].startswith(f"{block}/cross_attention/key/")
            and graph.op_types[i] == "Einsum"]
    assert keys == [(2, 6, 2, 4)]
  assert not any(n.startswith("encoder0/cross_attention") for n in names)
  # One embedding for source, target and output, with Adam's two slots.
  held = [int(b) for b in graph.memory_bytes]
  assert held.count(50 * 8 * 4) == 3


def test_acoustic_model_runs_both_directions_at_every_frame():
  model = _variant("tiny_speech", families.SPEECH, layers=2, hidden=8,
                   frames=8, batch=2, features=16, conv_filters=4, classes=5)
  graph = store.build_graph(model, DEVICES)
  names = graph.node_names
  # The first convolution halves 8 frames to 4 GRU steps, and each
  # direction runs an unrolled cell (two matmuls: input, recurrent) per
  # step; the logits are per step.
  for layer in ("bigru0", "bigru1"):
    for direction in ("forward_gru", "backward_gru"):
      # (Keras numbers the second layer's inner GRUs: forward_gru_1.)
      matmuls = [n for i, n in enumerate(names)
                 if graph.op_types[i] == "MatMul"
                 and n.startswith(f"acoustic_model/{layer}/{direction}")
                 and "/gru_cell/" in n]
      assert len(matmuls) == 2 * 4, (layer, direction)
  logits = [graph.output_shapes[i][0] for i in range(graph.num_nodes)
            if names[i] == "acoustic_model/frame_logits/BiasAdd"]
  assert logits == [(2, 4, 5)]
  with pytest.raises(ValueError, match="even"):
    store.build_graph(_variant("odd", families.SPEECH, layers=1, hidden=4,
                               frames=7, batch=1), DEVICES)


def test_gan_step_updates_both_networks_through_one_discriminator():
  model = _variant("tiny_gan", families.GAN, image_size=8, base_filters=4,
                   batch=2, noise_dim=3)
  graph = store.build_graph(model, DEVICES)
  names, types_ = graph.node_names, graph.op_types
  # The discriminator judges real and generated images with one kernel.
  judged = [n for n, t in zip(names, types_) if t == "Conv2D"
            and n.startswith("discriminator/down0/")]
  assert len(judged) == 2
  # The generator's gradient flows back through the discriminator to the
  # generated images.
  to_images = [graph.output_shapes[i][0] for i, n in enumerate(names)
               if types_[i] == "Conv2DBackpropInput"
               and n.startswith("gradient_tape/discriminator/down0/Conv2D_1/")]
  assert (2, 8, 8, 3) in to_images
  # One update per trainable weight: the generator's projection, its batch
  # norm's scale and offset and its output layer's kernel and bias, and the
  # discriminator's convolution and logit layer, kernels and biases.
  updates = [n for n, t in zip(names, types_) if t == "AssignSubVariableOp"
             and "AssignMovingAvg" not in n]
  assert len(updates) == 5 + 4
  with pytest.raises(ValueError, match="power of two"):
    store.build_graph(_variant("bad", families.GAN, image_size=48,
                               base_filters=4, batch=1), DEVICES)


def test_detector_predicts_on_three_levels_of_one_pyramid():
  model = _variant("tiny_detector", families.DETECTOR, image_size=64, width=4,
                   batch=2, blocks=1, pyramid=8, classes=2, anchors=1)
  graph = store.build_graph(model, DEVICES)
  names, types_ = graph.node_names, graph.op_types
  shape = {n: graph.output_shapes[i][0] for i, n in enumerate(names)
           if graph.output_shapes[i]}
  # Class and box maps at strides 8, 16 and 32 of the 64-pixel images.
  for level, cells in ((3, 8), (4, 4), (5, 2)):
    assert shape[f"detector/p{level}/class_out/BiasAdd"] == (2, cells, cells, 2)
    assert shape[f"detector/p{level}/box_out/BiasAdd"] == (2, cells, cells, 4)
  # The top-down path: each finer level adds the coarser one, upsampled with
  # static shapes (so that every tensor is priced).
  assert shape["detector/p3/upsample/Reshape_1"] == (2, 8, 8, 8)
  assert shape["detector/p4/upsample/Reshape_1"] == (2, 4, 4, 8)
  # Every convolution's kernel is trained.
  assert types_.count("Conv2DBackpropFilter") == types_.count("Conv2D") > 30
  with pytest.raises(ValueError, match="multiple of 32"):
    store.build_graph(_variant("bad", families.DETECTOR, image_size=100,
                               width=4, batch=1), DEVICES)


def test_switch_layer_routes_tokens_to_experts_with_their_own_weights():
  model = _variant("tiny_moe", families.MOE, layers=2, hidden=8, experts=3,
                   seq=4, batch=2, heads=2, vocab=20, ffn=16)
  graph = store.build_graph(model, DEVICES)
  names, types_ = graph.node_names, graph.op_types
  shape = {n: graph.output_shapes[i][0] for i, n in enumerate(names)
           if len(graph.output_shapes[i]) == 1}
  # 8 tokens over 3 experts at capacity factor 1.25: queues of 4 tokens,
  # dispatched in one einsum and served by each expert's own layers.
  assert shape["block1/switch/dispatch/einsum/Einsum"] == (3, 4, 8)
  for e in range(3):
    assert shape[f"block1/switch/expert{e}/ffn_in/MatMul"] == (4, 16)
    assert shape[f"block1/switch/expert{e}/ffn_out/MatMul"] == (4, 8)
    # Each expert's kernel has its own gradient.
    assert shape[f"gradient_tape/block1/switch/expert{e}/ffn_in/MatMul/"
                 "MatMul_1"] == (8, 16)
  assert shape["block1/switch/combine/einsum/Einsum"] == (8, 8)
  # Only the odd block is routed; the even one keeps its dense layers.
  assert "block0/ffn_in/Tensordot/MatMul" in names
  assert not any(n.startswith("block0/switch") for n in names)
  # The router is trained through the gate (and the balancing loss).
  assert "gradient_tape/block1/switch/router/MatMul/MatMul_1" in names
  assert types_.count("Cumsum") == 1


def test_gin_sums_neighbours_and_reads_out_every_layer():
  model = _variant("tiny_gnn", families.GNN, layers=2, hidden=8, nodes=6,
                   batch=3, features=4, classes=3)
  graph = store.build_graph(model, DEVICES)
  names = graph.node_names
  shape = {n: graph.output_shapes[i][0] for i, n in enumerate(names)
           if len(graph.output_shapes[i]) == 1}
  # Each layer aggregates over the 6x6 adjacency of each of the 3 graphs.
  for i in range(2):
    assert shape[f"gin{i}/aggregate/einsum/Einsum"] == (3, 6, 8)
    assert shape[f"gin{i}/pool/Sum"] == (3, 8)
  # A class readout from the embedding and from each layer, summed.
  for i in range(3):
    assert shape[f"readout{i}/MatMul"] == (3, 3)
    assert f"gradient_tape/readout{i}/MatMul/MatMul_1" in names
  assert shape["AddN"] == (3, 3)


def test_keras3_decoder_trains_every_weight_with_keras_adam():
  model = _variant("tiny_keras3", families.KERAS3_DECODER, layers=2, hidden=8,
                   heads=2, seq=4, batch=3, vocab=20)
  graph = store.build_graph(model, DEVICES)
  types_ = graph.op_types
  shapes = [graph.output_shapes[i][0] for i, t in enumerate(types_)
            if t == "Softmax"]
  # One causal attention per layer: 3 sequences, 2 heads, 4 x 4 scores.
  assert shapes == [(3, 2, 4, 4)] * 2
  # 36 weights (2 embeddings; per layer 8 of attention, 4 of the norms, 4
  # of the feed-forward; the logits' 2): Keras 3's Adam subtracts each
  # update once and adds into both moments of each.
  assert types_.count("AssignSubVariableOp") == 36
  assert types_.count("AssignAddVariableOp") == 2 * 36
  assert types_.count("SparseSoftmaxCrossEntropyWithLogits") == 1


def test_recommender_tables_and_their_adam_slots_are_in_the_graph():
  vocabularies, dim, batch = (1000, 300, 70), 8, 4
  dlrm = _variant("tiny_dlrm", families.DLRM, vocabularies=vocabularies,
                  embedding_dim=dim, dense_features=5, bottom=(16,),
                  top=(12,), batch=batch)
  graph = store.build_graph(dlrm, DEVICES)
  held = [int(b) for b in graph.memory_bytes]
  for rows in vocabularies:
    # The table, Adam's m and v; its gradient summed to the table's shape.
    assert held.count(rows * dim * 4) == 3
    assert (rows, dim) in _shapes(graph, "UnsortedSegmentSum")
  assert _count(graph, "ResourceGather") == len(vocabularies)
  # Dot products of the bottom MLP's output and every table's vector.
  assert (batch, 4, 4) in _shapes(graph, "BatchMatMulV2")


def test_unallocated_variables_have_a_shape_and_no_value():
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  tf, tf_keras = training_steps.libraries()
  with unallocated_variables.scope():
    table = tf_keras.layers.Embedding(1000, 8)
    table.build((None,))
    made = tf.Variable(tf.ones([3]))  # a value given: made as usual
  assert table.embeddings.shape == (1000, 8)
  assert not table.embeddings.is_initialized()
  assert made.is_initialized() and made.numpy().tolist() == [1, 1, 1]


def test_a_failing_variant_keeps_what_was_built(tmp_path):
  bad = _variant("bad", families.GENERATED, spec="layered:-3")
  with pytest.raises(errors.InputError, match="corpus variant bad"):
    store.ensure([TINY_GENERATED, bad], DEVICES, root=str(tmp_path))
  listing = json.load(open(os.path.join(store.folder(DEVICES, str(tmp_path)),
                                        store.MANIFEST)))
  assert list(listing) == ["tiny_layered"]


def test_an_unwritable_cache_is_one_clear_error(tmp_path):
  blocked = tmp_path / "file"
  blocked.write_text("not a folder")
  with pytest.raises(errors.InputError, match="cannot write the corpus cache"):
    store.ensure([TINY_GENERATED], DEVICES, root=str(blocked))


def test_corpus_graphs_load_through_graph_specs(tmp_path, monkeypatch):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path))
  spec = graph_specs.parse("corpus:layered_2000")[0]
  loaded = spec.load("p100x4")
  assert loaded.graph.num_nodes == 2000 and spec.label == "layered_2000"
  assert os.path.exists(store.graph_path(families.VARIANTS["layered_2000"],
                                         "p100x4"))


def _cli(*args, home):
  env = dict(os.environ, TF_GDP_HOME=str(home), TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, "-m", "tf_gdp", *args], env=env,
                        capture_output=True, text=True, timeout=300)


def test_cli_builds_lists_and_refuses_bad_input(tmp_path):
  done = _cli("corpus", "build", "--select=layered_2000,cells_2000",
              home=tmp_path)
  assert done.returncode == 0, done.stderr
  assert "2 graphs (2 built, 0 cached)" in done.stdout
  listed = _cli("corpus", "list", f"--json_out={tmp_path}/c.json",
                home=tmp_path)
  assert listed.returncode == 0, listed.stderr
  rows = {r["name"]: r for r in json.load(open(f"{tmp_path}/c.json"))}
  assert rows["cells_2000"]["built"] and not rows["resnet50_224_b8"]["built"]
  assert "(not built)" in listed.stdout and "eval:" in listed.stdout
  bare = _cli("corpus", home=tmp_path)
  assert bare.returncode == 2 and "tf-gdp corpus build" in bare.stderr
  unknown = _cli("corpus", "build", "--select=nope", home=tmp_path)
  assert unknown.returncode == 2
  assert unknown.stderr.count("\n") == 1 and "corpus:train" in unknown.stderr


def test_dual_encoder_joins_two_towers_only_in_the_contrastive_loss():
  model = _variant("tiny_dual", families.DUAL_ENCODER, image_layers=2,
                   text_layers=1, hidden=8, heads=2, image_size=8, patch=4,
                   text_seq=5, batch=3, embedding=6, vocab=20)
  graph = store.build_graph(model, DEVICES)
  names = graph.node_names
  shape = {n: graph.output_shapes[i][0] for i, n in enumerate(names)
           if len(graph.output_shapes[i]) == 1}
  softmax = [graph.output_shapes[i][0] for i, t in enumerate(graph.op_types)
             if t == "Softmax"]
  # Image attention over 4 patches (2 blocks), causal text over 5 tokens.
  assert sorted(softmax) == sorted([(3, 2, 4, 4)] * 2 + [(3, 2, 5, 5)])
  assert shape["image_projection/MatMul"] == (3, 6)
  assert shape["text_projection/MatMul"] == (3, 6)
  # Every image against every caption, both ways.
  assert graph.op_types.count("SparseSoftmaxCrossEntropyWithLogits") == 2
  # Both towers are trained through the one loss.
  for tower in ("image_block1", "text_block0"):
    assert any(n.startswith(f"gradient_tape/{tower}/") for n in names), tower


def _tiny_perceiver(repeats):
  return store.build_graph(_variant(
      "tiny_perceiver", families.PERCEIVER, latents=3, hidden=8, layers=1,
      repeats=repeats, image_size=8, patch=4, batch=2, heads=2,
      input_width=6, classes=5), DEVICES)


def test_perceiver_reads_the_image_once_per_repeat_with_shared_weights():
  once, thrice = _tiny_perceiver(1), _tiny_perceiver(3)
  softmax = [thrice.output_shapes[i][0]
             for i, t in enumerate(thrice.op_types) if t == "Softmax"]
  # Each repeat: 3 latents attend to 4 patches (one head), then to each
  # other (two heads).
  assert sorted(softmax) == sorted([(2, 1, 3, 4)] * 3 + [(2, 2, 3, 3)] * 3)
  queries = [n for n in thrice.node_names
             if n.startswith("cross_attention/query/einsum")
             and n.endswith("/Einsum")]
  assert len(queries) == 3
  # The same weights each time: as many updates as with one repeat.
  def updates(graph):
    return graph.op_types.count("AssignSubVariableOp")
  assert updates(thrice) == updates(once) > 0


def test_tagger_runs_both_directions_and_tags_every_token():
  model = _variant("tiny_tagger", families.TAGGER, cell="gru", layers=2,
                   hidden=8, seq=3, batch=2, vocab=50, tags=4)
  graph = store.build_graph(model, DEVICES)
  names = graph.node_names
  for direction in ("forward", "backward"):
    # Two matmuls (input, recurrent) per token in each direction of each
    # layer, forward pass only.
    matmuls = [n for i, n in enumerate(names)
               if graph.op_types[i] == "MatMul" and "gradient" not in n
               and f"/{direction}_" in n and "/gru_cell/" in n]
    assert len(matmuls) == 2 * 2 * 3, direction
  logits = [graph.output_shapes[i][0] for i in range(graph.num_nodes)
            if names[i].endswith("tag_logits/BiasAdd")]
  assert logits == [(2, 3, 4)]


def test_video_classifier_convolves_each_frame_then_each_pixel_over_time():
  model = _variant("tiny_video", families.VIDEO, blocks=1, frames=8,
                   image_size=16, batch=1, classes=5)
  graph = store.build_graph(model, DEVICES)
  names, types_ = graph.node_names, graph.op_types
  forward = [n for i, n in enumerate(names) if types_[i] == "Conv2D"
             and "gradient" not in n]
  # Stem plus two factorised convolutions per block (4 stages, 1 block):
  # a spatial and a temporal Conv2D each; plus the 3 strided projections.
  assert sum("/spatial/" in n for n in forward) == 1 + 2 * 4
  assert sum("/temporal/" in n for n in forward) == 1 + 2 * 4
  assert sum("/project/" in n for n in forward) == 3
  # The stages halve the frames: 8 at the stem, 1 after the third halving.
  shapes = {names[i]: graph.output_shapes[i][0]
            for i in range(graph.num_nodes) if graph.output_shapes[i]}
  last = [s for n, s in shapes.items()
          if n.endswith("stage3/block0/conv1/to_frames/transpose")]
  assert last == [(1, 1, 1, 1, 512)]
  logits = [s for n, s in shapes.items() if n.endswith("logits/BiasAdd")]
  assert logits == [(1, 5)]


def test_pointnet_transforms_the_cloud_then_labels_each_point():
  model = _variant("tiny_pointnet", families.POINTNET, points=16, batch=2,
                   segment=True, classes=5)
  graph = store.build_graph(model, DEVICES)
  names, types_ = graph.node_names, graph.op_types
  shapes = {names[i]: graph.output_shapes[i][0]
            for i in range(graph.num_nodes) if graph.output_shapes[i]}
  # The two T-Nets' matrices, 3x3 and 64x64, multiply the points.
  applied = sorted(s for n, s in shapes.items()
                   if n.endswith("transform/apply/MatMul"))
  assert applied == [(2, 16, 3), (2, 16, 64)]
  squares = sorted(s for n, s in shapes.items()
                   if n.endswith("transform/square/Reshape")
                   and "gradient" not in n)
  assert squares == [(2, 3, 3), (2, 64, 64)]
  # Each point carries its own 64 features and the 1024-wide global one.
  joined = [s for n, s in shapes.items()
            if n.endswith("point_and_global/concat")]
  assert joined == [(2, 16, 64 + 1024)]
  logits = [s for n, s in shapes.items() if n.endswith("point_logits/BiasAdd")]
  assert logits == [(2, 16, 5)]
  # The orthogonality penalty: the feature transform's gram matrix.
  grams = [shapes[n] for i, n in enumerate(names)
           if types_[i] == "BatchMatMulV2" and "/" not in n]
  assert grams == [(2, 64, 64)]


def test_swin_attends_in_shifted_windows_and_merges_patches():
  model = _variant("tiny_swin", families.SWIN, image_size=64, embed_dim=16,
                   depths=(2, 2), heads=(2, 4), window=4, batch=2, classes=5)
  graph = store.build_graph(model, DEVICES)
  names, types_ = graph.node_names, graph.op_types
  shapes = {names[i]: graph.output_shapes[i][0]
            for i in range(graph.num_nodes) if graph.output_shapes[i]}
  forward = {n: s for n, s in shapes.items() if "gradient" not in n}
  # 4x4 patches: a 16x16 map of 16 channels, then 8x8 of 32.
  assert [s for n, s in forward.items()
          if n.endswith("patch_embedding/projection/BiasAdd")] == [
              (2, 16, 16, 16)]
  # Each block's windows: 16 then 4 windows of 4x4 patches per image.
  windows = sorted((n.split("/partition")[0].split("/", 1)[-1], s)
                   for n, s in forward.items()
                   if n.endswith("/partition/Reshape_1"))
  assert windows == [("stage1/block0", (32, 16, 16)),
                     ("stage1/block1", (32, 16, 16)),
                     ("stage2/block0", (8, 16, 32)),
                     ("stage2/block1", (8, 16, 32))]
  # Attention logits per window and head, with a relative position bias
  # gathered from a (2*4-1)^2-row table.
  softmax = sorted(s for n, s in forward.items()
                   if types_[names.index(n)] == "Softmax"
                   and "/attention/" in n)
  assert softmax == [(8, 4, 16, 16), (8, 4, 16, 16), (32, 2, 16, 16),
                     (32, 2, 16, 16)]
  gathers = sorted(s for n, s in forward.items()
                   if "/attention/" in n and types_[names.index(n)]
                   in ("GatherV2", "ResourceGather"))
  assert gathers == [(256, 2)] * 2 + [(256, 4)] * 2
  # Only the odd blocks roll by half a window (-2 there, +2 back).
  rolls = sorted(n.split("/Roll")[0].split("/", 1)[-1]
                 for i, n in enumerate(names)
                 if types_[i] == "Roll" and "gradient" not in n)
  assert rolls == ["stage1/block1/shift", "stage1/block1/unshift",
                   "stage2/block1/shift", "stage2/block1/unshift"]
  # Patch merging: four neighbours side by side, then half of that width.
  assert [s for n, s in forward.items()
          if n.endswith("stage2/merge/neighbours/concat")] == [(2, 8, 8, 64)]
  merged = [s for n, s in forward.items()
            if "stage2/merge/reduce" in n and types_[names.index(n)]
            in ("MatMul", "Reshape") and len(s) == 4]
  assert merged == [(2, 8, 8, 32)]
  logits = [s for n, s in forward.items() if n.endswith("logits/BiasAdd")]
  assert logits == [(2, 5)]


def test_conformer_blocks_attend_and_convolve_and_train_by_ctc():
  model = _variant("tiny_conformer", families.CONFORMER, d_model=8, blocks=2,
                   heads=2, frames=16, batch=2, features=8, kernel=3,
                   vocab=5)
  graph = store.build_graph(model, DEVICES)
  names, types_ = graph.node_names, graph.op_types
  forward = [(n, types_[i], graph.output_shapes[i][0])
             for i, n in enumerate(names)
             if graph.output_shapes[i] and "gradient" not in n]

  def per_block(op, module):
    """(numbered scopes, shape) of each forward `op` inside `module`."""
    return sorted((tuple(scopes.numbered_scopes(n)), s)
                  for n, t, s in forward if t == op and f"/{module}/" in n)

  blocks = [("conformer/conformer_block_0",), ("conformer/conformer_block_1",)]
  # Two stride-2 convolutions: 16 frames of 8 bins -> 4 steps of 2.
  assert sorted((n, s) for n, t, s in forward if t == "Conv2D"
                and "/subsampling/" in n) == [
                    ("conformer/subsampling/conv0/Conv2D", (2, 8, 4, 8)),
                    ("conformer/subsampling/conv1/Conv2D", (2, 4, 2, 8))]
  # Per block, the convolution module: a pointwise convolution to twice
  # the width gated back to it (GLU), then a depthwise convolution along
  # time whose 3-tap filter gets a gradient.
  assert per_block("BiasAdd", "convolution/pointwise_in") == [
      (b, (2, 4, 16)) for b in blocks]
  assert per_block("Sigmoid", "convolution/glu") == [
      (b, (2, 4, 8)) for b in blocks]
  assert per_block("DepthwiseConv2dNative", "convolution/depthwise") == [
      (b, (2, 1, 4, 8)) for b in blocks]
  assert sorted((scopes.numbered_scopes(n), graph.output_shapes[i][0])
                for i, n in enumerate(names)
                if types_[i] == "DepthwiseConv2dNativeBackpropFilter") == [
                    ([b[0]], (1, 3, 8, 1)) for b in blocks]
  # Self-attention per block and head, with a logit per query and offset
  # (2*4-1 of them) shifted onto the 4 keys.
  assert per_block("Softmax", "self_attention") == [
      (b, (2, 2, 4, 4)) for b in blocks]
  assert per_block("BatchMatMulV2", "self_attention") == sorted(
      [(b, (2, 2, 4, 4)) for b in blocks] * 2
      + [(b, (2, 2, 4, 7)) for b in blocks])
  assert per_block("Pad", "self_attention") == [
      (b, (2, 2, 4, 8)) for b in blocks]
  # CTC over 4 steps of 5 units and a blank: its forward-backward scans
  # are while loops, the first over the 4 steps.
  assert [s for n, _, s in forward if n == "conformer/ctc_logits/BiasAdd"] == [
      (2, 4, 6)]
  loops = [n for n, t in zip(names, types_) if t == "LoopCond"]
  assert len(loops) == 2 and all(n.startswith("ctc_loss_dense/")
                                 for n in loops)
  assert graph.metadata["loop_trips"][0] == 4
  # Adam updates each of the 74 weights (33 per block, 6 in the front end,
  # 2 of the logits) and its two slots; batch norm its two moving stats.
  assert _count(graph, "AssignSubVariableOp") == 74 + 2 * 2
  assert _count(graph, "AssignVariableOp") == 2 * 74
  with pytest.raises(ValueError, match="multiple of 4"):
    store.build_graph(_variant("odd", families.CONFORMER, d_model=8,
                               blocks=1, heads=2, frames=18, batch=1),
                      DEVICES)


def test_hrnet_runs_parallel_branches_and_exchanges_them_all_to_all():
  model = _variant("tiny_hrnet", families.HRNET, width=4, image_size=(64, 32),
                   batch=2, modules=(1, 2, 1), blocks=1, stem_width=8,
                   joints=5)
  graph = store.build_graph(model, DEVICES)
  names, types_ = graph.node_names, graph.op_types
  forward = {n: (types_[i], graph.output_shapes[i][0])
             for i, n in enumerate(names)
             if graph.output_shapes[i] and "gradient" not in n}

  def convs(scope):
    return sorted((n, s) for n, (t, s) in forward.items()
                  if t == "Conv2D" and f"/{scope}/" in n)

  # The stem: two stride-2 convolutions, 64x32 -> 16x8.
  assert convs("stem") == [("hrnet/stem/conv0/Conv2D", (2, 32, 16, 8)),
                           ("hrnet/stem/conv1/Conv2D", (2, 16, 8, 8))]
  # Branch k of every module: 16x8 / 2^k, 4 * 2^k channels; 2, 3, 4 of them.
  resolutions = [(2, 16, 8, 4), (2, 8, 4, 8), (2, 4, 2, 16), (2, 2, 1, 32)]
  modules = {"stage2/module0": 2, "stage3/module0": 3, "stage3/module1": 3,
             "stage4/module0": 4}
  for module, count in modules.items():
    for k in range(4):
      shapes = {s for _, s in convs(f"{module}/branch{k}")}
      assert shapes == ({resolutions[k]} if k < count else set()), (module, k)
  # The branches of a module are parallel: each reads its own branch of
  # the module before and none of its siblings.
  def ancestors(scope):
    return _ancestors(graph, [n for n in forward if f"/{scope}/" in n])

  def reads(above, scope):
    return any(f"/{scope}/" in n for n in above)

  for k in range(3):
    above = ancestors(f"stage3/module1/branch{k}")
    assert reads(above, f"stage3/module0/branch{k}")
    assert [reads(above, f"stage3/module1/branch{j}") for j in range(3)] == [
        j == k for j in range(3)]
  # Exchange: each branch sums all three, the finer one through stride-2
  # convolutions (one per halving), the coarser through a 1x1 convolution
  # and an upsampling; every sum reads every branch.
  fuse = "stage3/module0/fuse"
  for k in range(3):
    sums = sorted(s for n, (t, s) in forward.items()
                  if t == "AddV2" and f"/{fuse}/to{k}/sum/" in n)
    assert sums == [resolutions[k]] * 2
    above = ancestors(f"{fuse}/to{k}/relu")
    assert all(reads(above, f"stage3/module0/branch{j}") for j in range(3))
  assert convs(f"{fuse}/to2") == [
      (f"hrnet/{fuse}/to2/from0/down0/Conv2D", (2, 8, 4, 4)),
      (f"hrnet/{fuse}/to2/from0/down1/Conv2D", (2, 4, 2, 16)),
      (f"hrnet/{fuse}/to2/from1/down0/Conv2D", (2, 4, 2, 16))]
  assert sorted((n.split("/fuse/")[1].split("/upsample")[0], s)
                for n, (t, s) in forward.items()
                if t == "ResizeNearestNeighbor" and f"/{fuse}/" in n) == [
                    ("to0/from1", (2, 16, 8, 4)), ("to0/from2", (2, 16, 8, 4)),
                    ("to1/from2", (2, 8, 4, 8))]
  # The last module fuses into the finest branch only, read by the head:
  # a heatmap per keypoint at a quarter of the image.
  assert {n.split("/fuse/")[1].split("/")[0] for n in forward
          if "/stage4/module0/fuse/" in n} == {"to0"}
  assert forward["hrnet/heatmaps/BiasAdd"] == ("BiasAdd", (2, 16, 8, 5))
  # Every convolution gets a filter gradient; Adam updates each weight (a
  # kernel and a batch norm's two per convolution, the head's kernel and
  # bias) and its two slots, and each batch norm assigns its moving stats.
  conv_count = _count(graph, "Conv2D")
  assert conv_count == 54 and _count(graph, "FusedBatchNormV3") == 53
  assert _count(graph, "Conv2DBackpropFilter") == conv_count
  weights = 3 * 53 + 2
  assert _count(graph, "AssignSubVariableOp") == weights
  assert _count(graph, "AssignVariableOp") == 2 * weights + 2 * 53
  with pytest.raises(ValueError, match="multiples of 32"):
    store.build_graph(_variant("odd", families.HRNET, width=4,
                               image_size=(48, 32), batch=1), DEVICES)


def test_diffusion_unet_reads_the_timestep_everywhere_and_its_skips():
  model = _variant("tiny_diffusion", families.DIFFUSION, channels=8,
                   image_size=16, batch=2, multipliers=(1, 2, 2), blocks=1,
                   attention=(16, 4))
  graph = store.build_graph(model, DEVICES)
  names, types_ = graph.node_names, graph.op_types
  forward = {n: (types_[i], graph.output_shapes[i][0])
             for i, n in enumerate(names)
             if graph.output_shapes[i] and "gradient" not in n}
  index = graph.node_index
  inputs = [[] for _ in names]
  for src, dst in zip(graph.edge_src, graph.edge_dst):
    inputs[dst].append(src)

  def ancestors(name):
    return _ancestors(graph, [name])

  def read(name):
    """The nodes `name` reads directly."""
    return {names[i] for i in inputs[index[f"diffusion/{name}"]]}

  def scopes(op, part):
    return sorted(n.split("diffusion/")[1].split(f"/{part}")[0]
                  for n, (t, _) in forward.items()
                  if t == op and f"/{part}" in n)

  # Levels at 16, 8 and 4 pixels, one block each down, two up, two in the
  # middle; every block adds a projection of the one timestep embedding.
  blocks = ["down0/res0", "down1/res0", "down2/res0", "mid/res0",
            "mid/res1", "up0/res0", "up0/res1", "up1/res0", "up1/res1",
            "up2/res0", "up2/res1"]
  assert scopes("AddV2", "add_time/") == blocks
  embedding = {n for n in forward if n.startswith("diffusion/time/swish/")}
  assert "diffusion/time/sinusoids/Sin" in ancestors(
      "diffusion/time/swish/mul_1")
  for block in blocks:
    assert f"diffusion/{block}/broadcast/Reshape" in read(
        f"{block}/add_time/add")
    assert f"diffusion/{block}/time/BiasAdd" in read(
        f"{block}/broadcast/Reshape")
    assert f"diffusion/{block}/time/MatMul" in read(f"{block}/time/BiasAdd")
    assert read(f"{block}/time/MatMul") & embedding, block
  # Attention after the blocks at 16 and 4 pixels and in the middle, none
  # at 8: every pixel attends to every pixel of its map.
  assert scopes("Softmax", "attention/") == [
      "down0/attn0", "down2/attn0", "mid/attn", "up0/attn0", "up0/attn1",
      "up2/attn0", "up2/attn1"]
  assert sorted({s for n, (t, s) in forward.items() if t == "Softmax"}) == [
      (2, 1, 16, 16), (2, 1, 256, 256)]
  # Down by strided convolutions, up by nearest resizing to a fixed size.
  assert [forward[f"diffusion/down{l}/downsample/Conv2D"][1]
          for l in (0, 1)] == [(2, 8, 8, 8), (2, 4, 4, 16)]
  assert sorted(s for t, s in forward.values()
                if t == "ResizeNearestNeighbor") == [(2, 8, 8, 16),
                                                     (2, 16, 16, 16)]
  # Each decoder block concatenates its own encoder output, last first:
  # a block's (after its attention), a downsampling's, the first
  # convolution's.
  skips = {"up2/skip0": "down2/attn0/add/add",
           "up2/skip1": "down1/downsample/BiasAdd",
           "up1/skip0": "down1/res0/add/add",
           "up1/skip1": "down0/downsample/BiasAdd",
           "up0/skip0": "down0/attn0/add/add",
           "up0/skip1": "conv_in/BiasAdd"}
  assert scopes("ConcatV2", "skip") == sorted(
      s.split("/skip")[0] for s in skips)
  for concat, skip in skips.items():
    assert f"diffusion/{skip}" in read(f"{concat}/concat"), concat
  # The network sees x_t, the images noised by the schedule at t, and
  # predicts the noise.
  assert forward["GatherV2"] == ("GatherV2", (2,))
  assert "GatherV2" in ancestors("diffusion/conv_in/Conv2D")
  assert forward["diffusion/out/conv/BiasAdd"][1] == (2, 16, 16, 3)
  # Adam updates every weight and its two slots: per block two norms, two
  # convolutions and the time projection (a 1x1 projection in 7 where the
  # width changes), per attention a norm and four projections; the first
  # convolution, 2 down, 2 up, the time MLP, the output norm and conv.
  assert _count(graph, "Conv2DBackpropFilter") == _count(graph, "Conv2D")
  weights = 2 * (5 * 11 + 7 + 5 * 7 + 1 + 2 + 2 + 2 + 2)
  assert _count(graph, "AssignSubVariableOp") == weights
  assert _count(graph, "AssignVariableOp") == 2 * weights
  with pytest.raises(ValueError, match=r"multiple of 2\*\*2"):
    store.build_graph(_variant("odd", families.DIFFUSION, channels=8,
                               image_size=18, batch=1, multipliers=(1, 2, 2)),
                      DEVICES)
  with pytest.raises(ValueError, match="map sides"):
    store.build_graph(_variant("odd", families.DIFFUSION, channels=8,
                               image_size=16, batch=1, multipliers=(1, 2, 2),
                               attention=(2,)), DEVICES)


def _model_ops(graph, prefix: str, *, constants: bool = True):
  """The ops under a Keras model's `prefix`, by name without it: (op type,
  first output shape) of each with a known shape, and `read(name)`, the
  ops (without the prefix) that op reads directly, constants too or not."""
  names, types_ = graph.node_names, graph.op_types
  forward = {n[len(prefix):]: (types_[i], graph.output_shapes[i][0])
             for i, n in enumerate(names)
             if graph.output_shapes[i] and n.startswith(prefix)}
  inputs = [[] for _ in names]
  for src, dst in zip(graph.edge_src, graph.edge_dst):
    inputs[dst].append(src)

  def read(name):
    return {names[i][len(prefix):]
            for i in inputs[graph.node_index[prefix + name]]
            if constants or types_[i] != "Const"}

  return forward, read


def _tiny_mobilevit(**changes):
  args = dict(channels=(4, 4, 8, 8, 8, 8, 16), dims=(8, 8, 8),
              depths=(1, 2, 1), expansion=2, heads=2, image_size=64,
              batch=2, classes=5)
  return _variant("tiny_mobilevit", families.MOBILEVIT, **{**args, **changes})


def test_mobilevit_attends_across_patches_and_fuses_with_its_input():
  graph = store.build_graph(_tiny_mobilevit(), DEVICES)
  forward, read = _model_ops(graph, "mobilevit/")

  def scopes(op, part):
    return sorted(n.split(part)[0] for n, (t, _) in forward.items()
                  if t == op and part in n)

  # A stride-2 stem, then stages at 32, 16, 8, 4 and 2 pixels; each stage
  # after the first opens with a stride-2 depthwise convolution.
  assert forward["stem/Conv2D"][1] == (2, 32, 32, 4)
  assert sorted((n, s) for n, (t, s) in forward.items()
                if t == "DepthwiseConv2dNative") == [
                    ("stage1/mv2_0/depthwise/depthwise", (2, 32, 32, 8)),
                    ("stage2/mv2_0/depthwise/depthwise", (2, 16, 16, 8)),
                    ("stage2/mv2_1/depthwise/depthwise", (2, 16, 16, 16)),
                    ("stage2/mv2_2/depthwise/depthwise", (2, 16, 16, 16)),
                    ("stage3/mv2_0/depthwise/depthwise", (2, 8, 8, 16)),
                    ("stage4/mv2_0/depthwise/depthwise", (2, 4, 4, 16)),
                    ("stage5/mv2_0/depthwise/depthwise", (2, 2, 2, 16))]
  # Inverted residual blocks add their input where stride and width allow:
  # stage 1's (4 -> 4 channels) and stage 2's two after its stride-2 block.
  residuals = {"stage1/mv2_0": "stem/swish/IdentityN",
               "stage2/mv2_1": "stage2/mv2_0/project/norm/FusedBatchNormV3",
               "stage2/mv2_2": "stage2/mv2_1/add/add"}
  assert scopes("AddV2", "/add/") == sorted(residuals)
  for block, block_input in residuals.items():
    assert read(f"{block}/add/add") == {
        block_input, f"{block}/project/norm/FusedBatchNormV3"}, block
  # MobileViT blocks at 8, 4 and 2 pixels only, with 1, 2 and 1 transformer
  # layers: the map unfolds into 2x2 patches grouped by their position
  # inside the patch (the patch axes move ahead of the grid's), so that each
  # of the batch's 4 positions attends among all 16, 4 and 1 patches.
  attention = {"stage3/mobilevit/layer0": (8, 2, 16, 16),
               "stage4/mobilevit/layer0": (8, 2, 4, 4),
               "stage4/mobilevit/layer1": (8, 2, 4, 4),
               "stage5/mobilevit/layer0": (8, 2, 1, 1)}
  assert scopes("Softmax", "/attention/") == sorted(attention)
  assert len(scopes("BatchMatMulV2", "/attention/")) == 2 * len(attention)
  for layer, shape in attention.items():
    assert forward[f"{layer}/attention/Softmax"][1] == shape
  blocks = {"stage3": (8, 16), "stage4": (4, 4), "stage5": (2, 1)}
  for stage, (side, patches) in blocks.items():
    block = f"{stage}/mobilevit"
    assert forward[f"{block}/unfold/Reshape"][1] == (
        2, side // 2, 2, side // 2, 2, 8)
    assert forward[f"{block}/unfold/transpose"][1] == (
        2, 2, 2, side // 2, side // 2, 8)
    assert forward[f"{block}/unfold/Reshape_1"][1] == (8, patches, 8)
    assert f"{block}/to_tokens/Conv2D" in read(f"{block}/unfold/Reshape")
    assert forward[f"{block}/fold/transpose"][1] == (
        2, side // 2, 2, side // 2, 2, 8)
    assert forward[f"{block}/fold/Reshape_1"][1] == (2, side, side, 8)
    # Folded back and projected, then concatenated with the block's input
    # (the stride-2 block's output) and fused by a 3x3 convolution.
    assert f"{block}/fold/Reshape_1" in read(f"{block}/to_channels/Conv2D")
    assert read(f"{block}/concat/concat") >= {
        f"{stage}/mv2_0/project/norm/FusedBatchNormV3",
        f"{block}/to_channels/swish/IdentityN"}
    assert f"{block}/concat/concat" in read(f"{block}/fuse/Conv2D")
    assert forward[f"{block}/concat/concat"][1] == (2, side, side, 16)
    assert forward[f"{block}/fuse/Conv2D"][1] == (2, side, side, 8)
  assert forward["logits/BiasAdd"][1] == (2, 5)
  # Adam updates every weight and its two slots: a convolution and its batch
  # norm's two per normalised convolution (the stem, 3 per inverted residual
  # block, 3 per MobileViT block and the last), a 1x1 map to the
  # transformer width and a final layer norm per MobileViT block, 6 layers
  # of 2 weights per transformer layer, the classifier; batch norm assigns
  # its two moving statistics.
  norms = 1 + 3 * 7 + 3 * 3 + 1
  assert _count(graph, "FusedBatchNormV3") == norms
  weights = 3 * norms + 3 * (1 + 2) + 12 * 4 + 2
  assert _count(graph, "AssignSubVariableOp") == weights
  assert _count(graph, "AssignVariableOp") == 2 * weights + 2 * norms
  # Every shape is known, the transposes' gradients' too, but batch norm's
  # reserve space and its gradient's zeros.
  assert graph.metadata["unknown_shape_nodes"] == 2 * norms
  with pytest.raises(ValueError, match="multiple of 64"):
    store.build_graph(_tiny_mobilevit(image_size=96), DEVICES)
  with pytest.raises(ValueError, match="heads"):
    store.build_graph(_tiny_mobilevit(dims=(8, 7, 8)), DEVICES)


def _tiny_deeplab(**changes):
  args = dict(blocks=(1, 1, 2, 1), width=4, aspp=8, low_level=48, decoder=8,
              image_size=64, batch=2, classes=5)
  return _variant("tiny_deeplab", families.DEEPLAB, **{**args, **changes})


def test_deeplab_joins_five_atrous_branches_and_a_stride_4_skip():
  graph = store.build_graph(_tiny_deeplab(), DEVICES)
  forward, read = _model_ops(graph, "deeplab/", constants=False)

  # Output stride 16: the stem and its pool to 16 pixels, stages 2 and 3
  # halve it, stage 4 keeps 4 (a quarter of the image's 64 / 16).
  sides = {"stem/conv/relu/Relu": 32, "stem/pool/MaxPool": 16,
           "stage1/block0/relu/Relu": 16, "stage2/block0/relu/Relu": 8,
           "stage3/block1/relu/Relu": 4, "stage4/block0/relu/Relu": 4}
  for name, side in sides.items():
    assert forward[name][1][1:3] == (side, side), name
  # The last stage dilates instead of striding: its 3x3 convolution runs
  # on 2x2 = 4 interleaved copies of the map (SpaceToBatchND, batch 2 x 4),
  # and its projection keeps the side.
  last = "stage4/block0/conv1/Conv2D"
  assert forward[f"{last}/SpaceToBatchND"][1][0] == 2 * 2 ** 2
  assert read(f"{last}/SpaceToBatchND") == {"stage4/block0/conv0/relu/Relu"}
  assert read(last) >= {f"{last}/SpaceToBatchND"}
  assert read(f"{last}/BatchToSpaceND") == {last}
  assert forward[f"{last}/BatchToSpaceND"][1] == (2, 4, 4, 32)
  assert forward["stage4/block0/project/Conv2D"][1] == (2, 4, 4, 128)
  assert sorted(n for n, (t, _) in forward.items()
                if t == "SpaceToBatchND") == sorted(
                    [f"{last}/SpaceToBatchND"] +
                    [f"aspp/atrous{r}/Conv2D/SpaceToBatchND"
                     for r in (6, 12, 18)])
  # Five branches read the backbone's output and meet in one concat: a 1x1
  # convolution, 3x3 convolutions at dilations 6, 12 and 18 (batches of
  # 2 x rate^2 copies) and image-level pooling resized back to 4x4.
  backbone = "stage4/block0/relu/Relu"
  branches = {"aspp/conv1x1/relu/Relu",
              "aspp/pool/resize/resize/ResizeBilinear"}
  for rate in (6, 12, 18):
    atrous = f"aspp/atrous{rate}/Conv2D"
    assert read(f"{atrous}/SpaceToBatchND") == {backbone}
    assert forward[f"{atrous}/SpaceToBatchND"][1][0] == 2 * rate ** 2
    assert f"{atrous}/SpaceToBatchND" in read(atrous)
    assert read(f"{atrous}/BatchToSpaceND") == {atrous}
    assert forward[f"{atrous}/BatchToSpaceND"][1] == (2, 4, 4, 8)
    branches.add(f"aspp/atrous{rate}/relu/Relu")
  assert backbone in read("aspp/conv1x1/Conv2D")
  assert read("aspp/pool/mean/Mean") == {backbone}
  assert forward["aspp/pool/conv/relu/Relu"][1] == (2, 1, 1, 8)
  assert read("aspp/concat/concat") == branches
  assert forward["aspp/concat/concat"][1] == (2, 4, 4, 5 * 8)
  assert "aspp/concat/concat" in read("aspp/project/Conv2D")
  # The decoder: the pyramid resized 4x beside stage 1's stride-4 output
  # projected to 48 channels, two 3x3 convolutions, logits at the image.
  assert read("decoder/upsample/resize/ResizeBilinear") == {
      "aspp/project/relu/Relu"}
  assert "stage1/block0/relu/Relu" in read("decoder/low_level/Conv2D")
  assert forward["decoder/low_level/relu/Relu"][1] == (2, 16, 16, 48)
  assert read("decoder/concat/concat") == {
      "decoder/upsample/resize/ResizeBilinear", "decoder/low_level/relu/Relu"}
  assert forward["decoder/concat/concat"][1] == (2, 16, 16, 8 + 48)
  assert "decoder/concat/concat" in read("decoder/conv0/Conv2D")
  assert "decoder/conv0/relu/Relu" in read("decoder/conv1/Conv2D")
  assert forward["resize/resize/ResizeBilinear"][1] == (2, 64, 64, 5)
  # Adam updates every weight and its two slots: a convolution and its batch
  # norm's two per normalised convolution (the stem, 3 per block, 4
  # projections, 6 in the pyramid, 3 in the decoder), the logits' kernel
  # and bias; batch norm assigns its two moving statistics.
  norms = 1 + 3 * 5 + 4 + 6 + 3
  assert _count(graph, "FusedBatchNormV3") == norms
  weights = 3 * norms + 2
  assert _count(graph, "AssignSubVariableOp") == weights
  assert _count(graph, "AssignVariableOp") == 2 * weights + 2 * norms
  assert graph.metadata["unknown_shape_nodes"] == 2 * norms
  with pytest.raises(ValueError, match="multiple of 16"):
    store.build_graph(_tiny_deeplab(image_size=72), DEVICES)
  with pytest.raises(ValueError, match="4 counts"):
    store.build_graph(_tiny_deeplab(blocks=(1, 1, 1)), DEVICES)


def _tiny_captioner(**changes):
  args = dict(blocks=(1, 1, 1, 1), channels=4, encoder_layers=1, width=8,
              heads=2, decoder_layers=2, image_size=64, caption_length=5,
              batch=2, vocab=11)
  return _variant("tiny_captioner", families.CAPTIONER, **{**args, **changes})


def test_captioner_decoder_reads_convolutional_tokens_in_every_layer():
  graph = store.build_graph(_tiny_captioner(), DEVICES)
  names, types_, index = graph.node_names, graph.op_types, graph.node_index
  inputs = [[] for _ in names]
  for src, dst, slot in zip(graph.edge_src, graph.edge_dst,
                            graph.edge_output):
    if slot >= 0:  # data edges only
      inputs[dst].append((names[src], int(slot)))

  def read(name):
    """The ops but constants whose outputs `name` reads directly."""
    return {src for src, _ in inputs[index[name]]
            if types_[index[src]] != "Const"}

  def shape(name):
    return graph.output_shapes[index[name]][0]

  c = "captioner/"
  # The visual tokens: the ResNet's last map (64 / 32 = 2 pixels a side)
  # flattened into 4 tokens of 32 channels, projected to the width 8, given
  # positions, read by the encoder layer and normalised.
  backbone = f"{c}stage4/block0/relu/Relu"
  assert shape(backbone) == (2, 2, 2, 32)
  assert backbone in read(f"{c}flatten/Reshape")
  assert shape(f"{c}flatten/Reshape") == (2, 4, 32)
  assert f"{c}flatten/Reshape" in read(
      f"{c}visual_projection/Tensordot/Reshape")
  assert f"{c}visual_projection/BiasAdd" in read(f"{c}visual_positions/add")
  assert read(f"{c}encoder0/attention/residual/add") == {
      f"{c}visual_positions/add", f"{c}encoder0/attention/attention_output/add"}
  assert f"{c}encoder0/mlp/residual/add" in read(f"{c}visual_norm/moments/mean")
  visual = f"{c}visual_norm/batchnorm/add_1"
  assert shape(visual) == (2, 4, 8)
  # Every decoder layer: self-attention among the 5 caption positions under
  # the one lower-triangular mask added to its scores, then cross-attention
  # whose keys and values are the visual tokens (5 x 4 scores, unmasked).
  stream = f"{c}caption_positions/add"
  for layer in ("decoder0", "decoder1"):
    own, cross = f"{c}{layer}/self_attention", f"{c}{layer}/cross_attention"
    assert stream in read(f"{own}/norm/moments/mean")
    for part in ("query", "key", "value"):
      assert f"{own}/norm/batchnorm/add_1" in read(
          f"{own}/{part}/einsum/Einsum"), (layer, part)
    assert shape(f"{own}/softmax/Softmax") == (2, 2, 5, 5)
    assert read(f"{own}/softmax/Softmax") == {f"{own}/softmax/add"}
    assert read(f"{own}/softmax/add") == {f"{own}/einsum/Einsum",
                                          f"{own}/softmax/mul"}
    assert shape(f"{own}/softmax/mul") == (1, 1, 5, 5)
    assert f"{c}causal_mask/MatrixBandPart" in _ancestors(
        graph, [f"{own}/softmax/mul"])
    assert f"{own}/residual/add" in read(f"{cross}/norm/moments/mean")
    assert f"{cross}/norm/batchnorm/add_1" in read(
        f"{cross}/query/einsum/Einsum")
    for part in ("key", "value"):
      assert visual in read(f"{cross}/{part}/einsum/Einsum"), (layer, part)
    assert shape(f"{cross}/softmax/Softmax") == (2, 2, 5, 4)
    assert read(f"{cross}/softmax/Softmax") == {f"{cross}/einsum/Einsum"}
    stream = f"{c}{layer}/mlp/residual/add"
  assert shape(f"{c}causal_mask/MatrixBandPart") == (1, 5, 5)
  assert sorted(n for n, t in zip(names, types_) if t == "Softmax"
                and not n.startswith("gradient")) == sorted(
                    [f"{c}encoder0/attention/softmax/Softmax"] +
                    [f"{c}decoder{i}/{kind}/softmax/Softmax"
                     for i in range(2)
                     for kind in ("self_attention", "cross_attention")])
  # Teacher forcing: one read of the 6-token captions is split 5 + 1 and
  # its first 5 tokens embedded; another is split 1 + 5 and its last 5 are
  # the labels of the logits at the same 5 positions, so the logits at t
  # are scored against token t + 1.
  captions = {src for split in ("caption_inputs", "caption_targets")
              for src in read(f"{split}/ReadVariableOp")}
  assert len(captions) == 1
  assert shape("caption_inputs/ReadVariableOp") == (2, 6)
  assert graph.output_shapes[index["caption_inputs"]] == ((2, 5), (2, 1))
  assert graph.output_shapes[index["caption_targets"]] == ((2, 1), (2, 5))
  assert ("caption_inputs", 0) in inputs[
      index[f"{c}token_embedding/embedding_lookup"]]
  loss = "SparseSoftmaxCrossEntropyWithLogits/"
  assert read(f"{loss}SparseSoftmaxCrossEntropyWithLogits") == {
      f"{loss}Reshape", f"{loss}Reshape_1"}
  assert f"{c}vocabulary/BiasAdd" in read(f"{loss}Reshape")
  assert shape(f"{c}vocabulary/BiasAdd") == (2, 5, 11)
  assert [src for src in inputs[index[f"{loss}Reshape_1"]]
          if types_[index[src[0]]] != "Const"] == [("caption_targets", 1)]
  # Adam updates every weight the forward pass reads (but the images and
  # batch norm's moving statistics, which it assigns), once each, and its
  # two slots: a convolution and its batch norm's two per normalised
  # convolution (the stem, 2 per block, 3 projections), the projection and
  # positions of the visual tokens, 2 per layer norm (2 per encoder layer,
  # 3 per decoder layer, 2 final), 8 per attention, 4 per MLP, the token
  # embedding, the caption positions and the vocabulary's kernel and bias.
  norms = 1 + 2 * 4 + 3
  assert _count(graph, "FusedBatchNormV3") == norms
  weights = (3 * norms + 3 + 2 * (2 + 3 * 2 + 2) + 8 * (1 + 2 * 2)
             + 4 * (1 + 2) + 2 + 2)
  def variables(op):
    """The variables (resource placeholders) `op` reads."""
    return [src for src, _ in inputs[index[op]]
            if types_[index[src]] == "Placeholder"]

  forward_reads = {v for n, t in zip(names, types_) if n.startswith(c)
                   and t in ("ReadVariableOp", "ResourceGather")
                   for v in variables(n)}
  moving = {v for n in names if "/AssignNewValue" in n for v in variables(n)}
  images = {src for i, t in enumerate(types_) if t == "ReadVariableOp"
            and graph.output_shapes[i][0] == (2, 64, 64, 3)
            for src, _ in inputs[i]}
  assert len(images) == 1
  updated = [v for n, t in zip(names, types_) if t == "AssignSubVariableOp"
             for v in variables(n)]
  assert set(updated) == forward_reads - moving - images
  assert len(updated) == len(set(updated)) == weights
  assert _count(graph, "AssignVariableOp") == 2 * weights + 2 * norms
  # Every shape is known but batch norm's reserve space and its gradient's
  # zeros, and the token embedding's gradient rows (reshaped at run time).
  assert graph.metadata["unknown_shape_nodes"] == 2 * norms + 1
  with pytest.raises(ValueError, match="multiple of 32"):
    store.build_graph(_tiny_captioner(image_size=72), DEVICES)
  with pytest.raises(ValueError, match="heads"):
    store.build_graph(_tiny_captioner(width=9), DEVICES)


def _tiny_llama(**changes):
  args = dict(layers=2, hidden=8, heads=4, kv_heads=2, seq=4, batch=2,
              vocab=11, ffn=12)
  return _variant("tiny_llama", families.LLAMA, **{**args, **changes})


def test_llama_blocks_rotate_queries_and_keys_and_share_kv_heads():
  graph = store.build_graph(_tiny_llama(), DEVICES)
  forward, read = _model_ops(graph, "", constants=False)
  names, types_ = graph.node_names, graph.op_types
  layers = ("layer_0", "layer_1")
  # A stack of numbered blocks, each reading the one before: the stage
  # rules put every op of block i, forward and backward, at stage i.
  assert {scopes.numbered_scopes(n)[0] for n in names
          if n.startswith("layer_")} == set(layers)
  stage, known = scopes.stage_coordinates(names, graph.edge_src,
                                          graph.edge_dst, graph.topo_order)
  stream = "token_embedding/embedding_lookup/Identity"
  for i, layer in enumerate(layers):
    ops = [j for j, n in enumerate(names) if n.startswith(f"{layer}/")
           or n.startswith(f"gradient_tape/{layer}/")]
    assert known[ops].all() and (stage[ops] == i).all(), layer
    assert read(f"{layer}/attention_norm/Square") == {stream}
    assert read(f"{layer}/attention_residual") == {
        stream, f"{layer}/attention/out/MatMul"}
    stream = f"{layer}/mlp_residual"
    assert read(stream) == {f"{layer}/attention_residual",
                            f"{layer}/mlp/down/MatMul"}
  assert "layer_1/mlp_residual" in read("final_norm/Square")
  # Rotary embeddings: one cos and one sin table, [4 positions, 1, head
  # width 2], turn the queries and the keys of every layer, and the scores
  # read only the turned ones.
  assert forward["rotary/cos"] == ("Cos", (4, 1, 2))
  assert forward["rotary/sin"] == ("Sin", (4, 1, 2))
  tables = {"rotary_query": ("rotary/query_cos", "rotary/query_sin"),
            "rotary_key": ("rotary/cos", "rotary/sin")}
  assert read("rotary/query_cos") == {"rotary/cos"}
  assert read("rotary/query_sin") == {"rotary/sin"}
  for layer in layers:
    a = f"{layer}/attention"
    for turn, projected in (("rotary_query", "Reshape"),
                            ("rotary_key", "Reshape_1")):
      cos, sin = tables[turn]
      assert read(f"{a}/{turn}/mul") == {f"{a}/{projected}", cos}, layer
      assert read(f"{a}/{turn}/mul_1") == {f"{a}/{turn}/concat", sin}, layer
      assert read(f"{a}/{turn}/rotated") == {f"{a}/{turn}/mul",
                                             f"{a}/{turn}/mul_1"}
    assert read(f"{a}/einsum/Einsum") == {f"{a}/rotary_query/rotated",
                                          f"{a}/rotary_key/rotated"}
    # Grouped-query attention: 4 query heads, 2 key/value heads of width 2,
    # so scores [batch, 2 key/value heads, 2 groups, 4, 4] under the
    # causal mask, and values read by head group.
    query = forward[f"{a}/query/MatMul"][1]
    assert query == (8, 4 * 2)
    for part in ("key", "value"):
      assert forward[f"{a}/{part}/MatMul"][1] == (8, 2 * 2), (layer, part)
      assert forward[f"{a}/{part}/MatMul"][1][1] < query[1]
    assert forward[f"{a}/einsum/Einsum"][1] == (2, 2, 2, 4, 4)
    assert read(f"{a}/add") == {f"{a}/mul", "causal_mask/mul"}
    assert read(f"{a}/einsum_1/Einsum") == {f"{a}/Softmax", f"{a}/Reshape_2"}
    assert read(f"{a}/Reshape_2") == {f"{a}/value/MatMul"}
    # SwiGLU: silu(x W1) gates x W3, then W2.
    m = f"{layer}/mlp"
    assert read(f"{m}/silu") == {f"{m}/gate/MatMul", f"{m}/Sigmoid"}
    assert read(f"{m}/Sigmoid") == {f"{m}/gate/MatMul"}
    assert forward[f"{m}/swiglu"] == ("Mul", (8, 12))
    assert read(f"{m}/swiglu") == {f"{m}/silu", f"{m}/up/MatMul"}
    assert f"{m}/swiglu" in read(f"{m}/down/MatMul")
  assert forward["causal_mask/MatrixBandPart"][1] == (4, 4)
  # Next-token cross-entropy: one read of the [2, 5] tokens gives the
  # inputs (the first 4 of each row, embedded), another the labels (the
  # last 4); the logits come from an output projection of its own.
  loss = "/".join(["SparseSoftmaxCrossEntropyWithLogits"] * 2)
  assert read(loss) == {"output/MatMul", "Reshape_1"}
  assert forward["output/MatMul"][1] == (8, 11)
  for sliced, flat in (("strided_slice", "Reshape"),
                       ("strided_slice_1", "Reshape_1")):
    (tokens,) = read(sliced)
    assert forward[tokens][1] == (2, 5)
    assert forward[sliced][1] == (2, 4)
    assert read(flat) == {sliced}
  assert "Reshape" in read("token_embedding/embedding_lookup")

  def variables(op):
    """The variables (resource placeholders) `op` reads."""
    return {n for n in read(op)
            if types_[graph.node_index[n]] == "Placeholder"}

  updates = {}
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in variables(n):
        updates.setdefault(v, []).append(n)
  # AdamW: the loss reaches one update of every weight of every layer (its
  # Adam step), and every matrix has a second update that the loss does not
  # reach (the decoupled decay); the norms' gains do not decay.
  read_by = {}
  for scope in layers + ("final_norm", "output", "token_embedding"):
    rank = {v: len(forward[n][1]) for n, (t, _) in forward.items()
            if n.startswith(f"{scope}/")
            and t in ("ReadVariableOp", "ResourceGather")
            for v in variables(n)}
    assert len(rank) == (9 if scope in layers else 1), scope
    for v, r in rank.items():
      reached = sorted(loss in _ancestors(graph, [u])
                       for u in updates.get(v, ()))
      assert reached == ([False, True] if r == 2 else [True]), (scope, v)
    read_by[scope] = set(rank)
  assert read_by["token_embedding"] != read_by["output"]
  # 21 weights (the embedding, 9 per layer, the final gain, the output's
  # kernel), 16 of them matrices; Adam assigns two slots per weight.
  assert _count(graph, "AssignSubVariableOp") == 21 + 16
  assert _count(graph, "AssignVariableOp") == 2 * 21
  # Every shape is known but the embedding's gradient rows (reshaped at run
  # time).
  assert graph.metadata["unknown_shape_nodes"] == 1
  with pytest.raises(ValueError, match="key/value heads"):
    store.build_graph(_tiny_llama(kv_heads=3), DEVICES)
  with pytest.raises(ValueError, match="even"):
    store.build_graph(_tiny_llama(hidden=12), DEVICES)


def _tiny_edsr(**changes):
  args = dict(blocks=10, features=4, scale=4, patch=5, batch=2)
  return _variant("tiny_edsr", families.EDSR, **{**args, **changes})


def test_edsr_stacks_scaled_residual_blocks_and_upsamples_by_sub_pixels():
  graph = store.build_graph(_tiny_edsr(), DEVICES)
  forward, read = _model_ops(graph, "", constants=False)
  names, types_ = graph.node_names, graph.op_types
  blocks = tuple(f"block_{i}" for i in range(10))
  # A stack of numbered blocks, each reading the one before: the stage
  # rules put every op of block i, forward and backward, at stage i (of
  # 0-9, scaled to [0, 1]). Adam's updates, outside the blocks, are numbered
  # too (`mul_7/...`); here, from 9 blocks on, the blocks hold more ops.
  assert {scopes.numbered_scopes(n)[0] for n in names
          if n.startswith("block_")} == set(blocks)
  stage, known = scopes.stage_coordinates(names, graph.edge_src,
                                          graph.edge_dst, graph.topo_order)
  for i, block in enumerate(blocks):
    ops = [j for j, n in enumerate(names) if n.startswith(f"{block}/")
           or n.startswith(f"gradient_tape/{block}/")]
    assert known[ops].all() and (stage[ops] == i / 9).all(), block
  # Each block: conv, ReLU, conv, scaled by a constant, added to the block's
  # input; no normalization.
  stream = "head/BiasAdd"
  assert forward[stream] == ("BiasAdd", (2, 5, 5, 4))
  for block in blocks:
    assert stream in read(f"{block}/conv_in/Conv2D"), block
    assert read(f"{block}/relu") == {f"{block}/conv_in/BiasAdd"}
    assert f"{block}/relu" in read(f"{block}/conv_out/Conv2D")
    assert read(f"{block}/scaled") == {f"{block}/conv_out/BiasAdd"}
    assert forward[f"{block}/scaled"][0] == "Mul"
    assert read(f"{block}/residual") == {stream, f"{block}/scaled"}, block
    stream = f"{block}/residual"
    assert forward[stream] == ("AddV2", (2, 5, 5, 4))
  assert not any(types_[graph.node_index[n]].startswith("FusedBatchNorm")
                 for n in names)
  # A last convolution of the body, then the global skip from the head.
  assert stream in read("body/conv/Conv2D")
  assert read("body/global_skip") == {"body/conv/BiasAdd", "head/BiasAdd"}
  # x4: two sub-pixel steps, each a convolution to 4x the maps and a
  # depth-to-space by 2, then a convolution to RGB at 20 x 20.
  assert sorted((n, s) for n, (t, s) in forward.items()
                if t == "DepthToSpace") == [
                    ("upsample/first/depth_to_space", (2, 10, 10, 4)),
                    ("upsample/second/depth_to_space", (2, 20, 20, 4))]
  assert "body/global_skip" in read("upsample/first/conv/Conv2D")
  for step in ("first", "second"):
    assert forward[f"upsample/{step}/conv/Conv2D"][1][-1] == 16
    assert read(f"upsample/{step}/depth_to_space") == {
        f"upsample/{step}/conv/BiasAdd"}
  assert "upsample/second/depth_to_space" in read("output/Conv2D")
  assert forward["output/BiasAdd"] == ("BiasAdd", (2, 20, 20, 3))
  # L1 loss: the mean absolute difference from the high-resolution target.
  assert forward["loss/absolute_error"][0] == "Abs"
  assert read("loss/absolute_error") == {"loss/error"}
  (target,) = read("loss/error") - {"output/BiasAdd"}
  assert forward[target] == ("ReadVariableOp", (2, 20, 20, 3))
  assert read("loss/Mean") == {"loss/absolute_error"}
  # Its gradient is the sign of the difference, which reaches the one Adam
  # update of every weight of every block.
  sign = "gradient_tape/loss/absolute_error/Sign"
  assert forward[sign][0] == "Sign" and read(sign) == {"loss/error"}
  updates = {}
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in read(n):
        if types_[graph.node_index[v]] == "Placeholder":
          updates.setdefault(v, []).append(n)
  for block in blocks:
    weights = {n for n in names if n.startswith(f"{block}/")
               and types_[graph.node_index[n]] == "Placeholder"}
    assert len(weights) == 4, block  # two kernels, two biases
    for v in weights:
      assert len(updates.get(v, ())) == 1, (block, v)
      assert sign in _ancestors(graph, updates[v]), (block, v)
  # 50 weights (head, 10 blocks of 2 convolutions, body, 2 upsampling
  # steps, output: a kernel and a bias each); Adam's two slots per weight.
  assert _count(graph, "AssignSubVariableOp") == 50
  assert _count(graph, "AssignVariableOp") == 2 * 50
  assert graph.metadata["unknown_shape_nodes"] == 0

  # x2 and x3: one convolution to 4x or 9x the maps, one depth-to-space.
  for scale in (2, 3):
    forward, _ = _model_ops(
        store.build_graph(_tiny_edsr(blocks=1, scale=scale), DEVICES), "")
    side = 5 * scale
    assert [(n, s) for n, (t, s) in forward.items()
            if t == "DepthToSpace"] == [
                ("upsample/first/depth_to_space", (2, side, side, 4))]
    assert forward["upsample/first/conv/Conv2D"][1] == (2, 5, 5,
                                                        4 * scale ** 2)
    assert forward["output/BiasAdd"][1] == (2, side, side, 3)
  with pytest.raises(ValueError, match="scale"):
    store.build_graph(_tiny_edsr(scale=5), DEVICES)


def _tiny_convs2s(**changes):
  args = dict(encoder_blocks=3, decoder_blocks=2, width=8, seq=5, batch=2,
              vocab=11, embedding=6)
  return _variant("tiny_convs2s", families.CONVS2S, **{**args, **changes})


_CONVS2S_ENCODER = tuple(f"encoder/block_{i}" for i in range(3))
_CONVS2S_DECODER = tuple(f"decoder/block_{j}" for j in range(2))


def _data_inputs(graph, name) -> list:
  """(source name, output slot) of each data input of the op `name`, in the
  op's input order."""
  dst = graph.node_index[name]
  return [(graph.node_names[s], int(o)) for s, d, o in
          zip(graph.edge_src, graph.edge_dst, graph.edge_output)
          if d == dst and o >= 0]


def test_convs2s_encoder_and_decoder_blocks_are_numbered_stages():
  graph = _tiny_graph(_tiny_convs2s)
  names = graph.node_names
  # Two numbered stacks on one stem, `block_` in `encoder/` and `decoder/`.
  # The stage rules rank each template's numbers, so every op of encoder
  # block i, forward and backward, sits at stage i / 2 and every op of
  # decoder block j at j / 1.
  numbered = {found[0] for found in map(scopes.numbered_scopes, names)
              if found}
  assert {s for s in numbered if "block_" in s} == set(
      _CONVS2S_ENCODER + _CONVS2S_DECODER)
  stage, known = scopes.stage_coordinates(names, graph.edge_src,
                                          graph.edge_dst, graph.topo_order)
  for stack in (_CONVS2S_ENCODER, _CONVS2S_DECODER):
    for i, block in enumerate(stack):
      ops = [k for k, n in enumerate(names) if n.startswith(f"{block}/")
             or n.startswith(f"gradient_tape/{block}/")]
      assert len(ops) > 20, block
      assert known[ops].all(), block
      assert (stage[ops] == i / (len(stack) - 1)).all(), block
  with pytest.raises(ValueError, match="1 block or more"):
    store.build_graph(_tiny_convs2s(decoder_blocks=0), DEVICES)


def test_convs2s_every_block_gates_its_convolution_and_scales_residuals():
  graph = _tiny_graph(_tiny_convs2s)
  forward, read = _model_ops(graph, "", constants=False)
  _, read_all = _model_ops(graph, "")
  # GLU in every block: the width-3 convolution makes 2 x 8 channels; the
  # first half, gated by the sigmoid of the second, is the block's output.
  for block in _CONVS2S_ENCODER + _CONVS2S_DECODER:
    conv, split = f"{block}/conv/BiasAdd", f"{block}/glu/split"
    sigmoid, gated = f"{block}/glu/Sigmoid", f"{block}/glu/gated"
    assert {split, sigmoid, gated} <= set(forward), f"{block} has no GLU"
    assert forward[conv] == ("BiasAdd", (2, 5, 16)), block
    assert forward[split][0] == "Split" and conv in read(split), block
    assert forward[sigmoid][0] == "Sigmoid", block
    assert _data_inputs(graph, sigmoid) == [(split, 1)], block
    assert forward[gated] == ("Mul", (2, 5, 8)), block
    assert set(_data_inputs(graph, gated)) == {(split, 0), (sigmoid, 0)}
  assert _count(graph, "Sigmoid") == 5
  # Encoder blocks: the convolution reads the block's input (no padding op:
  # "same"), and the residual is (gated + input) times a scalar, sqrt(0.5).
  stream = "source/to_width/BiasAdd"
  assert read("source/embedded") == {
      "source/tokens/embedding_lookup/Identity",
      "source/positions/embedding_lookup/Identity"}
  for block in _CONVS2S_ENCODER:
    assert f"{block}/add" in forward, f"{block} has no residual add"
    assert read(f"{block}/conv/Conv1D/ExpandDims") == {stream}, block
    assert read(f"{block}/add") == {f"{block}/glu/gated", stream}, block
    residual = f"{block}/residual"
    assert forward[residual] == ("Mul", (2, 5, 8))
    assert read(residual) == {f"{block}/add"}
    (scale,) = read_all(residual) - {f"{block}/add"}
    assert forward[scale] == ("Const", ()), block
    stream = residual


def test_convs2s_decoder_convolutions_are_causal():
  graph = _tiny_graph(_tiny_convs2s)
  forward, read = _model_ops(graph, "", constants=False)
  # Each decoder block puts kernel - 1 = 2 zero positions before its input
  # and none after, then convolves without padding (7 positions to 5): the
  # output at t reads inputs t - 2 .. t only.
  stream = "target/to_width/BiasAdd"
  for block in _CONVS2S_DECODER:
    pad = f"{block}/causal_pad"
    assert pad in forward, f"{block} does not pad its input"
    assert forward[pad] == ("ConcatV2", (2, 7, 8)), block
    (zeros, _), (after, _), (axis, _) = _data_inputs(graph, pad)
    assert forward[zeros][1] == (2, 2, 8) and not read(zeros), block
    assert after == stream and forward[axis] == ("Const", ()), block
    assert read(f"{block}/conv/Conv1D/ExpandDims") == {pad}, block
    assert forward[f"{block}/conv/Conv1D"][1] == (2, 1, 5, 16), block
    stream = f"{block}/residual"
  # The encoder's convolutions see both sides: no padding op of their own,
  # 5 positions in and out.
  for block in _CONVS2S_ENCODER:
    assert forward[f"{block}/conv/Conv1D/ExpandDims"][1] == (2, 1, 5, 8)
    assert forward[f"{block}/conv/Conv1D"][1] == (2, 1, 5, 16)
  assert not [n for n, (t, _) in forward.items()
              if n.startswith("encoder/") and t in ("Pad", "PadV2",
                                                    "ConcatV2")]
  assert _count(graph, "Pad") == _count(graph, "PadV2") == 0


def test_convs2s_every_decoder_block_attends_over_the_last_encoder_block():
  graph = _tiny_graph(_tiny_convs2s)
  forward, read = _model_ops(graph, "", constants=False)
  # Keys: the last encoder block's output projected to the embedding size
  # (6); values: the keys plus the source embedding, scaled.
  keys = "encoder/to_embedding/BiasAdd"
  assert forward[keys][1] == (2, 5, 6)
  assert read("encoder/to_embedding/Tensordot/Reshape") == {
      f"{_CONVS2S_ENCODER[-1]}/residual"}
  assert read("encoder/values") == {"encoder/add"}
  assert read("encoder/add") == {keys, "source/embedded"}
  stream = "target/to_width/BiasAdd"
  for block in _CONVS2S_DECODER:
    a, gated = f"{block}/attention", f"{block}/glu/gated"
    assert f"{a}/scores" in forward, f"{block} does not attend"
    # The query: the gated output projected to the embedding size, plus
    # the target embedding, scaled.
    assert read(f"{a}/to_embedding/Tensordot/Reshape") == {gated}
    assert read(f"{a}/add") == {f"{a}/to_embedding/BiasAdd",
                                "target/embedded"}
    assert read(f"{a}/query") == {f"{a}/add"}
    # Dot-product scores [batch, 5 target, 5 source], a softmax over the
    # last (source) axis, the values weighted by it.
    assert forward[f"{a}/scores"] == ("BatchMatMulV2", (2, 5, 5))
    assert read(f"{a}/scores") == {f"{a}/query", keys}, block
    assert forward[f"{a}/weights"][0] == "Softmax"
    assert read(f"{a}/weights") == {f"{a}/scores"}
    assert read(f"{a}/MatMul") == {f"{a}/weights", "encoder/values"}, block
    assert read(f"{a}/context") == {f"{a}/MatMul"}
    # Back to the width, added to the gated output, then the residual.
    assert read(f"{a}/to_width/Tensordot/Reshape") == {f"{a}/context"}
    assert forward[f"{a}/to_width/BiasAdd"][1] == (2, 5, 8)
    assert read(f"{a}/add_1") == {f"{a}/to_width/BiasAdd", gated}
    assert read(f"{a}/attended") == {f"{a}/add_1"}
    assert read(f"{block}/add") == {f"{a}/attended", stream}, block
    assert read(f"{block}/residual") == {f"{block}/add"}
    stream = f"{block}/residual"
  assert _count(graph, "Softmax") == len(_CONVS2S_DECODER)
  # Next-token cross-entropy on the last block, through a projection to the
  # embedding size and one to the 11 tokens.
  assert read("decoder/to_embedding/Tensordot/Reshape") == {stream}
  assert forward["output/BiasAdd"] == ("BiasAdd", (10, 11))
  loss = "/".join(["SparseSoftmaxCrossEntropyWithLogits"] * 2)
  assert read(loss) == {"output/BiasAdd", "Reshape_1"}
  assert read("target/embedded") == {
      "target/tokens/embedding_lookup/Identity",
      "target/positions/embedding_lookup/Identity"}


def test_convs2s_clipped_nesterov_update_touches_every_trainable_variable():
  graph = _tiny_graph(_tiny_convs2s)
  forward, read = _model_ops(graph, "", constants=False)
  names, types_ = graph.node_names, graph.op_types
  loss = "/".join(["SparseSoftmaxCrossEntropyWithLogits"] * 2)
  norm = "global_norm/global_norm"
  assert forward.get(norm) == ("Sqrt", ()), "no global norm to clip by"

  def placeholders(op):
    return {n for n in read(op) if types_[graph.node_index[n]] == "Placeholder"}

  def data(op):
    """The ops `op` reads data from (not control), but constants."""
    return {n for n, _ in _data_inputs(graph, op)
            if types_[graph.node_index[n]] != "Const"}

  updates, assigns = {}, {}
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in placeholders(n):
        updates.setdefault(v, []).append(n)
    elif t == "AssignVariableOp":
      for v in placeholders(n):
        assigns.setdefault(v, []).append(n)
  # Every variable the forward pass reads is updated once, but the two
  # token tables (the data).
  read_forward = {v for n in names
                  if not n.startswith(("gradient_tape/", "nesterov/",
                                       "clip_by_global_norm/",
                                       "global_norm/"))
                  and types_[graph.node_index[n]] != "Placeholder"
                  for v in placeholders(n)}
  tokens = read_forward - set(updates)
  assert len(tokens) == 2
  assert {forward[n][1] for v in tokens for n in names if v in read(n)
          and types_[graph.node_index[n]] == "ReadVariableOp"} == {
              (2, 5), (2, 6)}  # source, target with its next token
  # 32 weights: per side the token and position tables and the projection
  # to the width (kernel, bias); 2 per encoder block, 6 per decoder block
  # (convolution, projections to the embedding size and back); the
  # encoder's and decoder's projections to the embedding size; the output.
  assert len(updates) == 2 * 4 + 3 * 2 + 2 * 6 + 2 + 2 + 2
  assert read_forward - tokens == set(updates)
  for block in _CONVS2S_ENCODER + _CONVS2S_DECODER:
    weights = {n for n in names if n.startswith(f"{block}/")
               and types_[graph.node_index[n]] == "Placeholder"}
    assert len(weights) == (2 if block.startswith("encoder") else 6), block
    assert weights <= set(updates), block
  # Nesterov: velocity v' = mu v + g is assigned to its slot, and the
  # weight steps by lr (g + mu v'), g the gradient after clipping by the
  # global norm, which the loss reaches.
  slots = set()
  for v, (update,) in updates.items():
    (step,) = data(update) - {v}
    (total,) = data(step)
    (clipped,) = {n for n in data(total)
                  if n.startswith("clip_by_global_norm/")}
    (momentum_term,) = data(total) - {clipped}
    (velocity,) = data(momentum_term)
    (slot_assign,) = [n for n in names
                      if types_[graph.node_index[n]] == "AssignVariableOp"
                      and velocity in data(n)]
    (slot,) = placeholders(slot_assign)
    assert slot != v and slot not in updates and assigns[slot] == [
        slot_assign], v
    assert clipped in data(velocity), v
    slots.add(slot)
    upstream = _ancestors(graph, [clipped])
    assert norm in upstream and loss in upstream, v
  assert len(slots) == len(updates)
  assert _count(graph, "AssignSubVariableOp") == len(updates)
  assert _count(graph, "AssignVariableOp") == len(updates)
  # Every shape is known but the four embeddings' gradient rows.
  assert graph.metadata["unknown_shape_nodes"] == 4


def _tiny_tacotron(**changes):
  # Every width differs, so each shape names its tensor: memory 2 x 3.
  args = dict(text_len=5, frames=4, batch=2, vocab=11, embedding=8,
              encoder_lstm=3, prenet=12, rnn=10, attention=13,
              location_filters=14, location_kernel=3, mels=7,
              postnet_channels=9)
  return _variant("tiny_tacotron", families.TACOTRON, **{**args, **changes})


_TACOTRON_STEPS = tuple(f"decoder/step_{t}" for t in range(4))


def _variables(graph, op) -> set:
  """The variables (resource placeholders) the op `op` reads."""
  return {n for n, _ in _data_inputs(graph, op)
          if graph.op_types[graph.node_index[n]] == "Placeholder"}


def test_tacotron_convolutions_and_decoder_steps_are_numbered_stages():
  graph = _tiny_graph(_tiny_tacotron)
  names = graph.node_names
  # Three numbered stacks: the encoder's convolutions, one decoder step per
  # mel frame, the postnet's convolutions. The decoder steps hold most ops,
  # so `step_` is the stage stem: every op of step t, forward and backward,
  # sits at stage t / 3.
  numbered = {found[0] for found in map(scopes.numbered_scopes, names)
              if found}
  assert {s for s in numbered if "conv_" in s or "step_" in s} == {
      *(f"encoder/conv_{i}" for i in range(3)), *_TACOTRON_STEPS,
      *(f"postnet/conv_{k}" for k in range(5))}
  stage, known = scopes.stage_coordinates(names, graph.edge_src,
                                          graph.edge_dst, graph.topo_order)
  for t, step in enumerate(_TACOTRON_STEPS):
    ops = [k for k, n in enumerate(names) if n.startswith(f"{step}/")
           or n.startswith(f"gradient_tape/{step}/")]
    assert len(ops) > 150, step
    assert known[ops].all(), step
    assert (stage[ops] == t / 3).all(), step
  with pytest.raises(ValueError, match="at least 1"):
    store.build_graph(_tiny_tacotron(frames=0), DEVICES)


def test_tacotron_encoder_convolves_then_reads_the_text_both_ways():
  graph = _tiny_graph(_tiny_tacotron)
  forward, read = _model_ops(graph, "", constants=False)
  # Three width-5 convolutions (no bias: batch norm follows), batch norm in
  # training mode, ReLU; each reads the one before.
  stream = "characters/embedding_lookup/Identity"
  assert forward[stream] == ("Identity", (2, 5, 8))
  for i in range(3):
    c = f"encoder/conv_{i}"
    assert read(f"{c}/conv/Conv1D/ExpandDims") == {stream}, c
    assert forward[f"{c}/conv/Conv1D/ExpandDims_1"][1] == (1, 5, 8, 8)
    assert read(f"{c}/batch_norm/moments/mean") == {f"{c}/conv/Conv1D/Squeeze"}
    assert read(f"{c}/relu") == {f"{c}/batch_norm/batchnorm/add_1"}, c
    stream = f"{c}/relu"
  # A bidirectional LSTM: each direction projects every position's inputs
  # at once, then steps through them, the forward one from the first, the
  # backward one from the last; their outputs, in text order, are joined.
  for direction, first in (("forward", 0), ("backward", 4)):
    d = f"encoder/{direction}"
    assert read(f"{d}/Reshape") == {stream}
    assert forward[f"{d}/unstack"] == ("Unpack", (2, 12))
    assert (f"{d}/unstack", first) in _data_inputs(graph, f"{d}/gates")
    hs = [f"{d}/h"] + [f"{d}/h_{n}" for n in range(1, 5)]
    for n in range(1, 5):  # each step reads the state before it
      assert hs[n - 1] in read(f"{d}/MatMul_{n + 1}"), (d, n)
    order = hs if direction == "forward" else hs[::-1]
    assert [n for n, _ in _data_inputs(graph, f"{d}/stack")] == order
  assert [n for n, _ in _data_inputs(graph, "encoder/memory")][:2] == [
      "encoder/forward/stack", "encoder/backward/stack"]
  assert forward["encoder/memory"] == ("ConcatV2", (2, 5, 6))


def test_tacotron_every_step_attends_by_location_over_the_processed_memory():
  graph = _tiny_graph(_tiny_tacotron)
  forward, read = _model_ops(graph, "", constants=False)
  _, read_all = _model_ops(graph, "")
  processed = "decoder/processed_memory"
  filters = set()
  for t, step in enumerate(_TACOTRON_STEPS):
    a = f"{step}/attention"
    assert f"{a}/location_conv" in forward, f"{step} has no location conv"
    # Location features: a width-3 convolution (14 filters) over the
    # attention weights summed over the earlier steps (zeros at step 0),
    # projected to 13.
    if t == 0:
      assert ("Const", (2, 5)) in {
          forward[n] for n in read_all(f"{a}/cumulative_weights")}
    else:  # the sum before (zeros at step 1) plus the last step's weights
      assert read(f"{a}/cumulative") == {weights} | (
          {cumulative} if t > 1 else set()), step
      assert read(f"{a}/cumulative_weights") == {f"{a}/cumulative"}, step
    assert read(f"{a}/location_conv/ExpandDims") == {
        f"{a}/cumulative_weights"}
    assert forward[f"{a}/location_conv"] == ("Conv2D", (2, 1, 5, 14))
    assert f"{a}/location_conv/ExpandDims" in read(f"{a}/location_conv")
    filters |= _variables(graph, f"{a}/location_conv/ExpandDims_1/"
                                 "ReadVariableOp")
    assert f"{a}/location_conv/Squeeze" in _ancestors(
        graph, [f"{a}/location_features"])
    # Energies v^T tanh(memory + location + query + b), the query the
    # attention LSTM's output; a softmax over the 5 positions.
    assert read(f"{a}/keys") == {processed, f"{a}/location_features"}, step
    assert forward[f"{a}/keys"] == ("AddV2", (2, 5, 13))
    assert read(f"{a}/query") - {f"{a}/query/ReadVariableOp"} == {
        f"{step}/attention_lstm/h"}
    assert f"{a}/query" in _ancestors(graph, [f"{a}/hidden"])
    assert f"{a}/keys" in read(f"{a}/add_1")
    assert read(f"{a}/hidden") == {f"{a}/add_1"}
    assert forward[f"{a}/energies"] == ("Sum", (2, 5))
    assert f"{a}/hidden" in _ancestors(graph, [f"{a}/energies"])
    assert forward[f"{a}/weights"] == ("Softmax", (2, 5))
    assert read(f"{a}/weights") == {f"{a}/energies"}
    # The context: the memory weighted by them.
    assert read(f"{a}/MatMul_1") == {f"{a}/ExpandDims_1", "encoder/memory"}
    assert forward[f"{a}/context"] == ("Squeeze", (2, 6))
    weights, cumulative = f"{a}/weights", f"{a}/cumulative"
  assert len(filters) == 1  # one location convolution for every step
  assert _count(graph, "Softmax") == 4
  # The memory's term, once for every step: the encoder's output projected
  # to 13.
  assert forward[processed] == ("Reshape", (2, 5, 13))
  assert "encoder/memory" in _ancestors(graph, [processed])


def test_tacotron_teacher_forcing_feeds_the_ground_truth_previous_frame():
  graph = _tiny_graph(_tiny_tacotron)
  forward, read = _model_ops(graph, "", constants=False)
  _, read_all = _model_ops(graph, "")
  # Step t's prenet reads ground-truth frame t - 1, step 0's a zero "go"
  # frame.
  for t, step in enumerate(_TACOTRON_STEPS):
    first = f"{step}/prenet/first/MatMul"
    if t == 0:
      assert "decoder/go_frame" in read_all(first)
      assert forward["decoder/go_frame"] == ("Const", (2, 7))
    else:
      assert ("decoder/previous_frames", t - 1) in _data_inputs(graph, first)
    # No step reads a predicted frame: those reach only the loss and the
    # postnet.
    upstream = _ancestors(graph, [first])
    assert not any(n.endswith("/frame/BiasAdd") for n in upstream), step
    assert not {"decoder/mel", "postnet/residual"} & upstream, step
    # Prenet: two ReLU layers of 12, then into the attention LSTM with the
    # context of the step before.
    assert read(f"{step}/prenet/first/Relu") == {
        f"{step}/prenet/first/BiasAdd"}
    assert f"{step}/prenet/first/Relu" in read(f"{step}/prenet/second/MatMul")
    assert forward[f"{step}/prenet/second/Relu"] == ("Relu", (2, 12))
    assert f"{step}/prenet/second/Relu" in read(f"{step}/attention_lstm/concat")
    if t:
      assert f"decoder/step_{t - 1}/attention/context" in read(
          f"{step}/attention_lstm/concat")
  # The ground truth: the target frames, read once and split by frame; the
  # loss reads the same target.
  (targets,) = read("decoder/previous_frames")
  assert forward[targets] == ("ReadVariableOp", (2, 4, 7))
  assert forward["decoder/previous_frames"][0] == "Unpack"
  (target_variable,) = _variables(graph, targets)
  assert _variables(graph, "loss/sub/ReadVariableOp") == {target_variable}


def test_tacotron_decoder_lstms_share_their_weights_across_steps():
  graph = _tiny_graph(_tiny_tacotron)
  forward, read = _model_ops(graph, "", constants=False)
  names, types_ = graph.node_names, graph.op_types
  for cell in ("attention_lstm", "decoder_lstm"):
    weights = {}
    for t, step in enumerate(_TACOTRON_STEPS):
      c = f"{step}/{cell}"
      # gates = [inputs] @ kernel + bias + h @ recurrent kernel, split in 4.
      for role, op in (("kernel", "MatMul"), ("bias", "inputs"),
                       ("recurrent", "MatMul_1")):
        weights.setdefault(role, set()).update(
            _variables(graph, f"{c}/{op}/ReadVariableOp"))
      assert read(f"{c}/gates") == {f"{c}/inputs", f"{c}/MatMul_1"}
      assert forward[f"{c}/split"][1] == (2, 10)
      assert read(f"{c}/h") == {f"{c}/Sigmoid_2", f"{c}/Tanh_1"}
      # The state carries from the step before.
      if t:
        before = f"decoder/step_{t - 1}/{cell}"
        assert f"{before}/h" in read(f"{c}/MatMul_1"), c
        assert f"{before}/c" in read(f"{c}/mul"), c
    # One variable per role, read by every step (the real model's one set
    # of LSTM weights), and updated once from the gradients of every step.
    assert all(len(v) == 1 for v in weights.values()), (cell, weights)
    for (variable,) in weights.values():
      (update,) = [n for n, t in zip(names, types_)
                   if t == "AssignSubVariableOp"
                   and variable in _variables(graph, n)]
      upstream = _ancestors(graph, [update])
      for step in _TACOTRON_STEPS:
        assert any(n.startswith(f"gradient_tape/{step}/{cell}/")
                   for n in upstream), (cell, step)
  # The decoder LSTM reads the attention LSTM's output and the context; the
  # projections read its output and the context.
  for step in _TACOTRON_STEPS:
    assert read(f"{step}/decoder_lstm/concat") == {
        f"{step}/attention_lstm/h", f"{step}/attention/context"}
    assert read(f"{step}/output") == {f"{step}/decoder_lstm/h",
                                      f"{step}/attention/context"}
    assert forward[f"{step}/frame/BiasAdd"][1] == (2, 7)
    assert forward[f"{step}/stop_token/BiasAdd"][1] == (2, 1)


def test_tacotron_postnet_adds_a_residual_to_the_decoder_frames():
  graph = _tiny_graph(_tiny_tacotron)
  forward, read = _model_ops(graph, "", constants=False)
  # The decoder's frames in order, [2, 4 frames, 7 bins].
  assert [n for n, _ in _data_inputs(graph, "decoder/mel")] == [
      f"{step}/frame/BiasAdd" for step in _TACOTRON_STEPS]
  assert forward["decoder/mel"] == ("Pack", (2, 4, 7))
  # Five width-5 convolutions, 9 channels then back to 7, batch norm, tanh
  # but after the last; its output added to the decoder's frames.
  stream = "decoder/mel"
  for k in range(5):
    c = f"postnet/conv_{k}"
    assert read(f"{c}/conv/Conv1D/ExpandDims") == {stream}, c
    assert forward[f"{c}/conv/Conv1D/Squeeze"][1] == (
        2, 4, 9 if k < 4 else 7)
    stream = f"{c}/batch_norm/batchnorm/add_1"
    if k < 4:
      assert read(f"{c}/tanh") == {stream}, c
      stream = f"{c}/tanh"
  assert "postnet/conv_4/tanh" not in forward
  assert read("postnet/residual") == {"decoder/mel", stream}
  assert forward["postnet/residual"] == ("AddV2", (2, 4, 7))
  # Loss: squared error of the frames before and after the postnet, and the
  # stop token's sigmoid cross-entropy, summed.
  assert read("loss/sub") == {"decoder/mel", "loss/sub/ReadVariableOp"}
  assert read("loss/sub_1") == {"postnet/residual",
                                "loss/sub_1/ReadVariableOp"}
  assert read("loss/mel_before") == {"loss/Square"}
  assert read("loss/Square") == {"loss/sub"}
  assert read("loss/mel_after") == {"loss/Square_1"}
  assert read("loss/Square_1") == {"loss/sub_1"}
  assert [n for n, _ in _data_inputs(graph, "decoder/stop_logits")][:4] == [
      f"{step}/stop_token/BiasAdd" for step in _TACOTRON_STEPS]
  assert "decoder/stop_logits" in read("loss/logistic_loss/mul")
  assert read("loss/stop_token") == {"loss/logistic_loss"}
  assert read("loss/total") == {"loss/mel_before", "loss/mel_after",
                                "loss/stop_token"}


def test_tacotron_clipped_adam_update_touches_every_trainable_variable():
  graph = _tiny_graph(_tiny_tacotron)
  forward, read = _model_ops(graph, "", constants=False)
  names, types_ = graph.node_names, graph.op_types
  assert forward.get("global_norm/global_norm") == ("Sqrt", ())
  updates, moving = {}, set()
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in _variables(graph, n):
        if "/AssignMovingAvg" in n:
          moving.add(v)
        else:
          updates.setdefault(v, []).append(n)
  # Every variable the forward pass reads is updated once, but the data
  # (the text, the target frames and stop tokens) and batch norm's moving
  # statistics, which it assigns.
  read_forward = {v for n, t in zip(names, types_)
                  if t in ("ReadVariableOp", "ResourceGather")
                  and not n.startswith(("gradient_tape/", "adam/"))
                  for v in _variables(graph, n)}
  data = read_forward - set(updates) - moving
  assert sorted(forward[n][1] for v in data for n in names
                if types_[graph.node_index[n]] == "ReadVariableOp"
                and v in _variables(graph, n)
                and not n.startswith("adam/")) == [
                    (2, 4), (2, 4, 7), (2, 4, 7), (2, 4, 7), (2, 5)]
  assert len(moving) == 2 * 8
  # 51 weights: the character table; 3 per convolution (kernel, batch
  # norm's scale and offset) of the encoder (3) and postnet (5); 3 per LSTM
  # (2 encoder, 2 decoder); the prenet's 2 layers and the 2 projections, 2
  # each; the attention's 6 (query, memory, location filters, location
  # projection, v, b).
  assert len(updates) == 1 + 3 * 8 + 3 * 4 + 2 * 4 + 6
  assert all(len(u) == 1 for u in updates.values())
  assert set(updates) == read_forward - data - moving
  # Each update follows the loss's gradient, clipped by the global norm of
  # all of them; Adam's two slots are assigned once per weight.
  for v, (update,) in updates.items():
    upstream = _ancestors(graph, [update])
    assert "global_norm/global_norm" in upstream, v
    assert any(n.startswith("clip_by_global_norm/") for n in upstream), v
    assert any(n.startswith("gradient_tape/loss/") for n in upstream), v
  assert _count(graph, "AssignVariableOp") == 2 * len(updates)
  # Every shape is known but the character table's gradient rows.
  assert graph.metadata["unknown_shape_nodes"] == 1


def _tiny_mamba(**changes):
  # Widths differ (model 6, inner 12, states 3, delta rank 2), so each shape
  # names its tensor; 5 positions, an odd length, take both of the scan's
  # cases.
  args = dict(layers=2, d_model=6, seq=5, batch=2, vocab=11, d_state=3,
              dt_rank=2)
  return _variant("tiny_mamba", families.MAMBA, **{**args, **changes})


def _assert_layers_are_stages(graph, layers, *, min_ops: int, step: float,
                              stem: str = "layer_"):
  """`layers` are the graph's only numbered `stem` scopes, and every op of
  layer i, forward and backward, sits at stage i x `step`."""
  names = graph.node_names
  numbered = {found[0] for found in map(scopes.numbered_scopes, names)
              if found}
  assert {s for s in numbered if stem in s} == set(layers)
  stage, known = scopes.stage_coordinates(names, graph.edge_src,
                                          graph.edge_dst, graph.topo_order)
  for i, layer in enumerate(layers):
    ops = [k for k, n in enumerate(names) if n.startswith(f"{layer}/")
           or n.startswith(f"gradient_tape/{layer}/")]
    assert len(ops) > min_ops, layer
    assert known[ops].all() and (stage[ops] == i * step).all(), layer


_MAMBA_LAYERS = ("layer_0", "layer_1")


def test_mamba_blocks_are_numbered_stages_with_residuals():
  graph = _tiny_graph(_tiny_mamba)
  forward, read = _model_ops(graph, "", constants=False)
  names = graph.node_names
  # One numbered stack, each block reading the one before: the stage rules
  # put every op of block i, forward and backward, at stage i.
  _assert_layers_are_stages(graph, _MAMBA_LAYERS, min_ops=150, step=1)
  stream = "token_embedding/embedding_lookup/Identity"
  assert forward[stream] == ("Identity", (2, 5, 6))
  for layer in _MAMBA_LAYERS:
    # RMSNorm, the input projection to 2 x 12, the block's output projected
    # back to 6 and added to its input.
    assert read(f"{layer}/norm/Square") == {stream}, layer
    assert read(f"{layer}/in_proj/Tensordot/Reshape") == {
        f"{layer}/norm/mul_1"}
    assert forward[f"{layer}/in_proj/Tensordot"][1] == (2, 5, 24)
    assert read(f"{layer}/residual") == {stream,
                                         f"{layer}/out_proj/Tensordot"}
    assert forward[f"{layer}/residual"] == ("AddV2", (2, 5, 6))
    stream = f"{layer}/residual"
  assert read("final_norm/Square") == {stream}
  with pytest.raises(ValueError, match="at least 1"):
    store.build_graph(_tiny_mamba(layers=0), DEVICES)


def test_mamba_convolution_is_causal_and_depthwise():
  graph = _tiny_graph(_tiny_mamba)
  forward, read = _model_ops(graph, "", constants=False)
  for layer in _MAMBA_LAYERS:
    # The stream half of the input projection gets 4 - 1 = 3 zero positions
    # before the first and none after, then a width-4 convolution without
    # padding (8 positions to 5): the output at t reads t - 3 .. t only.
    pad = f"{layer}/causal_pad"
    assert pad in forward, f"{layer} does not pad its convolution's input"
    assert forward[pad] == ("ConcatV2", (2, 8, 12)), layer
    (zeros, _), before, (axis, _) = _data_inputs(graph, pad)
    assert forward[zeros] == ("Const", (2, 3, 12)), layer
    assert before == (f"{layer}/x_z", 0) and forward[axis] == ("Const", ())
    # Depthwise: one width-4 filter per channel (multiplier 1), so no
    # channel reads another.
    conv = f"{layer}/conv/depthwise"
    assert forward[conv] == ("DepthwiseConv2dNative", (2, 1, 5, 12)), layer
    assert read(conv) == {f"{layer}/conv/ExpandDims",
                          f"{layer}/conv/ExpandDims_1"}
    assert read(f"{layer}/conv/ExpandDims") == {pad}
    assert forward[f"{layer}/conv/ExpandDims"][1] == (2, 1, 8, 12)
    assert forward[f"{layer}/conv/ExpandDims_1"][1] == (1, 4, 12, 1)
    # SiLU: the convolution times its sigmoid.
    out = f"{layer}/conv/Squeeze"
    assert read(f"{layer}/conv_silu") == {out, f"{layer}/Sigmoid"}
    assert read(f"{layer}/Sigmoid") == {out}
  # No other convolution and no padding op: the zeros are the only padding.
  assert _count(graph, "DepthwiseConv2dNative") == len(_MAMBA_LAYERS)
  assert not {"Conv2D", "Pad", "PadV2", "MirrorPad"} & set(graph.op_types)


def _symbolic_positions(graph, graph_def, sources, scope, output):
  """Which source positions each element of the op `output` reads.

  Each source op (name -> its label in the sets) is an array of its
  output's shape whose element [b, t, ...] is {(label, t)}; the ops under
  `scope` that `output` needs are then run on such arrays, reading their
  inputs along the graph's edges and their constants' values from
  `graph_def`: slices, concatenations, reversals and reshapes move the
  sets, products and sums join them. An op of another type, or a path to `output` from
  outside `scope` but the sources and constants, fails."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  tf, _ = training_steps.libraries()
  nodes = {n.name: n for n in graph_def.node}
  join = np.frompyfunc(lambda a, b: a | b, 2, 1)
  values = {}
  for name, label in sources.items():
    shape = graph.output_shapes[graph.node_index[name]][0]
    sets = np.empty(shape, object)
    for index in np.ndindex(*shape):
      sets[index] = frozenset({(label, index[1])})
    values[name] = sets

  def value(name):
    if name in values:
      return values[name]
    op = graph.op_types[graph.node_index[name]]
    if op == "Const":
      values[name] = tf.make_ndarray(nodes[name].attr["value"].tensor)
      return values[name]
    assert name.startswith(scope), f"{name} is outside {scope}"
    inputs = [value(n) for n, _ in _data_inputs(graph, name)]
    if op == "StridedSlice":
      attr = nodes[name].attr
      assert not (attr["ellipsis_mask"].i or attr["new_axis_mask"].i
                  or attr["shrink_axis_mask"].i), name
      begin, end, strides = inputs[1:]
      out = inputs[0][tuple(
          slice(None if attr["begin_mask"].i >> d & 1 else begin[d],
                None if attr["end_mask"].i >> d & 1 else end[d], strides[d])
          for d in range(len(begin)))]
    elif op == "ConcatV2":
      out = np.concatenate(inputs[:-1], axis=int(inputs[-1]))
    elif op == "ExpandDims":
      out = np.expand_dims(inputs[0], int(inputs[1]))
    elif op == "Reshape":
      out = inputs[0].reshape(inputs[1])
    elif op in ("Mul", "AddV2"):
      out = join(*inputs)
    elif op == "ReverseV2":
      out = np.flip(inputs[0], tuple(int(a) for a in inputs[1]))
    elif op == "Identity":
      out = inputs[0]
    else:
      raise AssertionError(f"{name}: {op} moves positions in unknown ways")
    assert out.shape == graph.output_shapes[graph.node_index[name]][0], name
    values[name] = out
    return out

  return value(output)


def test_mamba_scan_state_reads_its_position_and_every_earlier_one_only():
  graph = _tiny_graph(_tiny_mamba)
  forward, read = _model_ops(graph, "", constants=False)
  graph_def = store._extract(_tiny_mamba()).meta_graph.graph_def  # pylint: disable=protected-access
  for layer in _MAMBA_LAYERS:
    s = f"{layer}/ssm"
    # Selective: delta, B and C are projected from the convolved stream
    # (split 2, 3, 3); delta widened to 12 by the dt projection, softplus.
    assert read(f"{s}/x_proj/Tensordot/Reshape") == {f"{layer}/conv_silu"}
    assert read(f"{s}/delta_b_c") == {f"{s}/x_proj/Tensordot"}
    assert _data_inputs(graph, f"{s}/dt_proj/Tensordot/Reshape")[0] == (
        f"{s}/delta_b_c", 0)
    assert read(f"{s}/delta") == {f"{s}/dt_proj/BiasAdd"}
    assert forward[f"{s}/delta"] == ("Softplus", (2, 5, 12))
    # A = -exp(A_log), [12 channels, 3 states]; A_bar = exp(delta A);
    # B_bar x = delta B x, both [2, 5, 12, 3].
    assert read(f"{s}/A") == {f"{s}/Exp"}
    assert forward[f"{s}/Exp/ReadVariableOp"][1] == (12, 3)
    assert read(f"{s}/mul") == {f"{s}/ExpandDims", f"{s}/A"}
    assert read(f"{s}/ExpandDims") == {f"{s}/delta"}
    assert read(f"{s}/A_bar") == {f"{s}/mul"}
    assert read(f"{s}/mul_1") == {f"{s}/ExpandDims", f"{s}/ExpandDims_1"}
    assert _data_inputs(graph, f"{s}/ExpandDims_1")[0] == (
        f"{s}/delta_b_c", 1)
    assert read(f"{s}/B_bar_x") == {f"{s}/mul_1", f"{s}/ExpandDims_2"}
    assert read(f"{s}/ExpandDims_2") == {f"{layer}/conv_silu"}
    for tensor in ("A_bar", "B_bar_x", "h"):
      assert forward[f"{s}/{tensor}"][1] == (2, 5, 12, 3), tensor
    # The scan: h_t = A_bar_t h_{t-1} + B_bar_t x_t from h_{-1} = 0, so the
    # state at t reads B_bar x at every position up to t and A_bar at 1 .. t,
    # and nothing after t: run on sets of positions, the scan's ops give
    # exactly those.
    (state,) = read(f"{s}/h")
    h = _symbolic_positions(
        graph, graph_def, {f"{s}/A_bar": "A", f"{s}/B_bar_x": "Bx"},
        f"{s}/scan/", state)
    for t in range(5):
      expected = ({("A", r) for r in range(1, t + 1)}
                  | {("Bx", r) for r in range(t + 1)})
      assert all(cell == expected for cell in h[:, t].flat), (layer, t)
    # Parallel, not a loop: log-depth combines, no while loop or unstack.
    assert 2 <= sum(n.startswith(f"{s}/scan/fn") and n.endswith("/state")
                    for n in forward) < 5
    # The readout y = C . h + D x, C the last split.
    assert read(f"{s}/mul_2") == {f"{s}/h", f"{s}/ExpandDims_3"}
    assert _data_inputs(graph, f"{s}/ExpandDims_3")[0] == (
        f"{s}/delta_b_c", 2)
    assert read(f"{s}/C_h") == {f"{s}/mul_2"}
    assert forward[f"{s}/C_h"] == ("Sum", (2, 5, 12))
  assert not {"While", "StatelessWhile", "Unpack", "Enter"} & set(
      graph.op_types)


def test_mamba_gate_multiplies_the_scan_output():
  graph = _tiny_graph(_tiny_mamba)
  forward, read = _model_ops(graph, "", constants=False)
  for layer in _MAMBA_LAYERS:
    s = f"{layer}/ssm"
    # y = C . h + D x, with D a weight per channel times the scan's input.
    assert read(f"{s}/y") == {f"{s}/C_h", f"{s}/mul_3"}
    assert read(f"{s}/mul_3") == {f"{layer}/conv_silu",
                                  f"{s}/mul_3/ReadVariableOp"}
    assert forward[f"{s}/mul_3/ReadVariableOp"][1] == (12,)
    # The gate: SiLU of the input projection's second half, z * sigmoid(z),
    # multiplies y; the product is what the output projection reads.
    gated, z_silu = f"{layer}/gated", f"{layer}/z_silu"
    assert gated in forward, f"{layer} does not gate its scan"
    assert forward[gated] == ("Mul", (2, 5, 12))
    assert read(gated) == {f"{s}/y", z_silu}, layer
    assert set(_data_inputs(graph, z_silu)) == {(f"{layer}/x_z", 1),
                                                (f"{layer}/Sigmoid_1", 0)}
    assert _data_inputs(graph, f"{layer}/Sigmoid_1") == [(f"{layer}/x_z", 1)]
    assert read(f"{layer}/out_proj/Tensordot/Reshape") == {gated}
    assert forward[f"{layer}/out_proj/Tensordot"][1] == (2, 5, 6)


def test_mamba_tied_head_and_clipped_adamw_update_every_trainable_variable():
  graph = _tiny_graph(_tiny_mamba)
  forward, read = _model_ops(graph, "", constants=False)
  names, types_ = graph.node_names, graph.op_types
  loss = "/".join(["SparseSoftmaxCrossEntropyWithLogits"] * 2)
  norm = "global_norm/global_norm"
  assert forward.get(norm) == ("Sqrt", ()), "no global norm to clip by"
  # Tied: the logits read the final norm's output and the embedding table
  # the lookup reads; next-token cross-entropy on them.
  assert forward["logits"] == ("MatMul", (10, 11))
  assert read("logits") == {"Reshape", "logits/ReadVariableOp"}
  assert read("Reshape") == {"final_norm/mul_1"}
  (table,) = _variables(graph, "logits/ReadVariableOp")
  assert table in read("token_embedding/embedding_lookup")
  assert read(loss) == {"logits", "Reshape_1"}
  updates = {}
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in _variables(graph, n):
        updates.setdefault(v, []).append(n)
  # Every variable the forward pass reads is updated, but the tokens.
  read_forward = {v for n, t in zip(names, types_)
                  if t in ("ReadVariableOp", "ResourceGather")
                  and not n.startswith(("gradient_tape/", "adamw/"))
                  for v in _variables(graph, n)}
  (tokens,) = read_forward - set(updates)
  assert {forward[n][1] for n in names if tokens in read(n)} == {(2, 6)}
  # 22 weights: the embedding, the final gain and 10 per block (norm gain,
  # input projection, convolution kernel and bias, x projection, dt
  # projection kernel and bias, A_log, D, output projection).
  assert set(updates) == read_forward - {tokens}
  assert len(updates) == 1 + 1 + 10 * len(_MAMBA_LAYERS)
  # AdamW: each weight's Adam step follows the loss's gradient clipped by
  # the global norm; the 11 weights of rank 2 or more but A_log also shrink
  # by a step the loss does not reach (decoupled decay).
  shapes = {v: forward[n][1] for n, (t, _) in forward.items()
            if t == "ReadVariableOp" and not n.startswith("adamw/")
            for v in _variables(graph, n)}
  decayed = 0
  for v, steps in updates.items():
    reached = sorted(loss in _ancestors(graph, [u]) for u in steps)
    rank = len(shapes[v])
    a_log = shapes[v] == (12, 3)
    assert reached == ([False, True] if rank >= 2 and not a_log
                       else [True]), (v, shapes[v])
    decayed += len(steps) - 1
    (step,) = [u for u in steps if loss in _ancestors(graph, [u])]
    assert norm in _ancestors(graph, [step]), v
  assert decayed == 1 + 5 * len(_MAMBA_LAYERS)
  assert _count(graph, "AssignVariableOp") == 2 * len(updates)
  assert graph.metadata["unknown_shape_nodes"] == 0


def _tiny_vqvae(**changes):
  # Sizes differ (image 12, half width 4, width 8, 7 codes of 5), so each
  # shape names its tensor: the 3 x 3 code map of 2 images is 18 vectors.
  args = dict(image_size=12, hidden=8, blocks=2, codes=7, batch=2,
              code_dim=5)
  return _variant("tiny_vqvae", families.VQVAE, **{**args, **changes})


def _run_vqvae(fetch: str, feeds: dict):
  """The value of the op `fetch` of the tiny step, the ops named in `feeds`
  (name -> array) replaced by those values, so none upstream of them runs."""
  tf, _ = training_steps.libraries()
  graph = tf.Graph()
  with graph.as_default():
    tf.graph_util.import_graph_def(_tiny_graph_def(_tiny_vqvae), name="")
  with tf.compat.v1.Session(graph=graph) as session:
    return session.run(f"{fetch}:0",
                       {f"{name}:0": value for name, value in feeds.items()})


def test_vqvae_strided_convolutions_and_numbered_residual_stages():
  graph = store.build_graph(_tiny_vqvae(blocks=10), DEVICES)
  forward, read = _model_ops(graph, "", constants=False)
  names = graph.node_names
  nodes = {n.name: n for n in _tiny_graph_def(_tiny_vqvae).node}
  # Two numbered stacks, `block_` in `encoder/` and `decoder/`: the stage
  # rules rank each template's numbers, so every op of encoder block i,
  # forward and backward, sits at stage i / 9 and every op of decoder block
  # j at j / 9. Adam's updates are numbered too (`adam/mul_7/...`); from 8
  # blocks a stack on, the blocks hold more ops.
  encoder = tuple(f"encoder/block_{i}" for i in range(10))
  decoder = tuple(f"decoder/block_{j}" for j in range(10))
  numbered = {found[0] for found in map(scopes.numbered_scopes, names)
              if found}
  assert {s for s in numbered if "block_" in s} == set(encoder + decoder)
  stage, known = scopes.stage_coordinates(names, graph.edge_src,
                                          graph.edge_dst, graph.topo_order)
  for stack in (encoder, decoder):
    for i, block in enumerate(stack):
      ops = [k for k, n in enumerate(names) if n.startswith(f"{block}/")
             or n.startswith(f"gradient_tape/{block}/")]
      assert len(ops) > 20, block
      assert known[ops].all() and (stage[ops] == i / 9).all(), block
  # Down: two 4x4 convolutions of stride 2 and ReLU, 12 -> 6 -> 3, to half
  # the width, then the width; a 3x3 convolution.
  (images,) = [n for n in read("encoder/down/first/conv/Conv2D")
               if forward[n][1] == (2, 12, 12, 3)]
  assert forward[images][0] == "ReadVariableOp"
  stream = images
  for step, side, width, channels in (("first", 6, 4, 3),
                                      ("second", 3, 8, 4)):
    conv = f"encoder/down/{step}/conv/Conv2D"
    assert stream in read(conv), step
    assert list(nodes[conv].attr["strides"].list.i) == [1, 2, 2, 1], step
    (kernel,) = read(conv) - {stream}
    assert forward[kernel][1] == (4, 4, channels, width), step
    stream = f"encoder/down/{step}/relu"
    assert read(stream) == {f"encoder/down/{step}/conv/BiasAdd"}
    assert forward[stream] == ("Relu", (2, side, side, width))
  assert stream in read("encoder/conv/Conv2D")
  # Each residual block: ReLU, 3x3 convolution, ReLU, 1x1 convolution,
  # added to the block's input; no normalization.
  for start, stack in (("encoder/conv/BiasAdd", encoder),
                       ("decoder/conv/BiasAdd", decoder)):
    stream = start
    for block in stack:
      assert read(f"{block}/relu_in") == {stream}, block
      assert f"{block}/relu_in" in read(f"{block}/conv/Conv2D")
      assert read(f"{block}/relu_out") == {f"{block}/conv/BiasAdd"}
      assert f"{block}/relu_out" in read(f"{block}/project/Conv2D")
      assert read(f"{block}/residual") == {stream,
                                           f"{block}/project/BiasAdd"}, block
      assert forward[f"{block}/residual"] == ("AddV2", (2, 3, 3, 8))
      stream = f"{block}/residual"
    scope = start.split("/")[0]
    assert read(f"{scope}/relu") == {stream}
  for block in encoder + decoder:
    kernels = {forward[k][1] for k in read(f"{block}/conv/Conv2D")
               | read(f"{block}/project/Conv2D")
               if forward[k][0] == "ReadVariableOp"}
    assert kernels == {(3, 3, 8, 8), (1, 1, 8, 8)}, block
  assert not any(t.startswith("FusedBatchNorm") for t in graph.op_types)
  # A 1x1 convolution to the 5-wide vectors the quantizer reads.
  assert "encoder/relu" in read("encoder/to_codes/Conv2D")
  assert forward["encoder/to_codes/BiasAdd"][1] == (2, 3, 3, 5)
  # Up: a 3x3 convolution from the codes, the blocks, then two 4x4
  # transposed convolutions of stride 2, 3 -> 6 -> 12, ReLU between, to RGB.
  assert "quantizer/straight_through" in read("decoder/conv/Conv2D")
  up = sorted((n, s) for n, (t, s) in forward.items()
              if t == "Conv2DBackpropInput" and not n.startswith("gradient"))
  assert up == [("decoder/up/first/conv/conv2d_transpose", (2, 6, 6, 4)),
                ("decoder/up/second/conv/conv2d_transpose", (2, 12, 12, 3))]
  assert "decoder/relu" in read("decoder/up/first/conv/conv2d_transpose")
  assert read("decoder/up/first/relu") == {"decoder/up/first/conv/BiasAdd"}
  assert "decoder/up/first/relu" in read(
      "decoder/up/second/conv/conv2d_transpose")
  for step, kernel in (("first", (4, 4, 4, 8)), ("second", (4, 4, 3, 4))):
    conv = f"decoder/up/{step}/conv/conv2d_transpose"
    assert list(nodes[conv].attr["strides"].list.i) == [1, 2, 2, 1], step
    assert kernel in {forward[k][1] for k in read(conv)}, step
  with pytest.raises(ValueError, match="at least 1"):
    store.build_graph(_tiny_vqvae(blocks=0), DEVICES)
  with pytest.raises(ValueError, match="multiple of 4"):
    store.build_graph(_tiny_vqvae(image_size=10), DEVICES)


def test_vqvae_quantizer_replaces_each_vector_by_its_nearest_code():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_vqvae)
  forward, read = _model_ops(graph, "", constants=False)
  # The encoder's map as 18 vectors of 5; squared distances to the 7 codes,
  # from one matrix product; the argmin over the codes.
  z = "encoder/to_codes/BiasAdd"
  assert read("quantizer/flat") == {z}
  assert forward["quantizer/flat"] == ("Reshape", (18, 5))
  assert forward["quantizer/distances"] == ("AddV2", (18, 7))
  assert forward["quantizer/nearest"] == ("ArgMin", (18,))
  assert read("quantizer/nearest") == {"quantizer/distances"}
  assert _count(graph, "MatMul") == 1
  (product,) = [n for n, (t, _) in forward.items() if t == "MatMul"]
  assert forward[product][1] == (18, 7)
  # The codebook: one variable [7, 5], read by the distances and gathered
  # by the lookup at the argmin's indices, back to the encoder's map.
  (table,) = _variables(graph, "quantizer/lookup")
  assert forward["quantizer/lookup"] == ("ResourceGather", (18, 5))
  assert read("quantizer/lookup") == {table, "quantizer/nearest"}
  assert read("quantizer/quantized") == {"quantizer/lookup/Identity"}
  assert forward["quantizer/quantized"][1] == (2, 3, 3, 5)
  codebook_reads = [n for n, (t, _) in forward.items()
                    if t == "ReadVariableOp" and table in read(n)]
  assert codebook_reads and all(forward[n][1] == (7, 5)
                                for n in codebook_reads)
  # Run on vectors and codes of our own: the argmin is each vector's
  # nearest code by Euclidean distance, for codes of different norms too.
  rng = np.random.default_rng(0)
  vectors = rng.normal(size=(18, 5)).astype(np.float32)
  codes = (rng.normal(size=(7, 5))
           * rng.uniform(0.2, 3.0, size=(7, 1))).astype(np.float32)
  nearest = _run_vqvae("quantizer/nearest", {
      "quantizer/flat": vectors, **{n: codes for n in codebook_reads}})
  expected = ((vectors[:, None] - codes[None]) ** 2).sum(-1).argmin(1)
  assert len(set(expected)) > 3
  np.testing.assert_array_equal(nearest, expected)


def _raw_gradient(graph, shape) -> str:
  """The gradient of the one weight of `shape` as the tape gives it, before
  the global norm's clipping scales it."""
  forward, read = _model_ops(graph, "", constants=False)
  (clipped,) = [n for n, (t, s) in forward.items()
                if n.startswith("clip_by_global_norm/mul_") and s == shape]
  (raw,) = [n for n in read(clipped) if forward[n][1] == shape]
  return raw


def test_vqvae_straight_through_and_stop_gradients_route_each_loss():
  graph = _tiny_graph(_tiny_vqvae)
  forward, read = _model_ops(graph, "", constants=False)
  z, q = "encoder/to_codes/BiasAdd", "quantizer/quantized"
  # The decoder reads z + stop_gradient(q - z): the codes' values.
  assert read("quantizer/straight_through") == {z, "quantizer/fixed_offset"}
  assert forward["quantizer/fixed_offset"][0] == "StopGradient"
  assert read("quantizer/fixed_offset") == {"quantizer/offset"}
  assert read("quantizer/offset") == {q, z}
  # The codebook loss |stop_gradient(z) - q|^2, the commitment loss
  # |z - stop_gradient(q)|^2.
  assert read("quantizer/codebook_error") == {q, "quantizer/fixed_z"}
  assert read("quantizer/fixed_z") == {z}
  assert read("quantizer/commitment_error") == {z, "quantizer/fixed_q"}
  assert read("quantizer/fixed_q") == {q}
  for name in ("fixed_z", "fixed_q", "fixed_offset"):
    assert forward[f"quantizer/{name}"] == ("StopGradient", (2, 3, 3, 5))
  # Backward, before clipping: the codebook's gradient is the codebook
  # loss's only (no decoder gradient, no commitment); the encoder's is the
  # decoder's gradient passed straight through plus the commitment loss's,
  # not the codebook loss's.
  codebook = _ancestors(graph, [_raw_gradient(graph, (7, 5))])
  encoder = _ancestors(graph, [_raw_gradient(graph, (1, 1, 8, 5))])
  decoder_gradient = "gradient_tape/decoder/conv/Conv2D/Conv2DBackpropInput"
  assert decoder_gradient in forward
  assert "quantizer/codebook_error" in codebook
  assert "quantizer/commitment_error" not in codebook
  assert not any(n.startswith(("decoder/", "gradient_tape/decoder/"))
                 for n in codebook)
  assert decoder_gradient in encoder, "no gradient passes straight through"
  assert "quantizer/commitment_error" in encoder
  assert "quantizer/codebook_error" not in encoder
  # Nothing differentiates the search: no backward op reads the vectors
  # the distances were computed from.
  assert not [n for n in graph.node_names if n.startswith("gradient_tape/")
              and "quantizer/flat" in read(n)]


def test_vqvae_loss_is_reconstruction_plus_codebook_plus_quarter_commitment():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_vqvae)
  forward, read = _model_ops(graph, "", constants=False)
  # The target is the input image itself.
  (target,) = read("loss/error") - {"decoder/up/second/conv/BiasAdd"}
  (source,) = [n for n in read("encoder/down/first/conv/Conv2D")
               if forward[n][1] == (2, 12, 12, 3)]
  assert _variables(graph, target) == _variables(graph, source)
  assert forward["loss/reconstruction"][0] == "Mean"
  assert read("loss/total") == {"loss/reconstruction",
                                "quantizer/codebook_loss", "loss/commitment"}
  assert read("loss/commitment") == {"quantizer/commitment_loss"}
  # Run on values of our own: with image x, reconstruction y, map z and
  # codes q = the nearest codes, the forward values are q itself where the
  # decoder reads, and the loss is mean (y - x)^2 + mean (z - q)^2 + 0.25
  # mean (z - q)^2.
  rng = np.random.default_rng(1)
  image = rng.uniform(size=(2, 12, 12, 3)).astype(np.float32)
  restored = rng.uniform(size=(2, 12, 12, 3)).astype(np.float32)
  z = rng.normal(size=(2, 3, 3, 5)).astype(np.float32)
  codes = rng.normal(size=(7, 5)).astype(np.float32)
  (table,) = _variables(graph, "quantizer/lookup")
  codebook_reads = {n: codes for n, (t, _) in forward.items()
                    if t == "ReadVariableOp" and table in read(n)}
  feeds = {"encoder/to_codes/BiasAdd": z, **codebook_reads}
  nearest = _run_vqvae("quantizer/nearest", feeds)
  feeds["quantizer/lookup"] = codes[nearest]
  q = codes[nearest].reshape(z.shape)
  np.testing.assert_allclose(
      _run_vqvae("quantizer/straight_through", feeds), q, atol=1e-5)
  feeds.update({target: image, "decoder/up/second/conv/BiasAdd": restored})
  distance = np.mean((z - q) ** 2)
  expected = np.mean((restored - image) ** 2) + distance + 0.25 * distance
  for name, value in (("quantizer/codebook_loss", distance),
                      ("quantizer/commitment_loss", distance),
                      ("loss/total", expected)):
    np.testing.assert_allclose(_run_vqvae(name, feeds), value, rtol=1e-5,
                               err_msg=name)


def test_vqvae_clipped_adam_update_touches_every_trainable_variable():
  graph = _tiny_graph(_tiny_vqvae)
  forward, read = _model_ops(graph, "", constants=False)
  names, types_ = graph.node_names, graph.op_types
  norm = "global_norm/global_norm"
  assert forward.get(norm) == ("Sqrt", ()), "no global norm to clip by"
  updates = {}
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in _variables(graph, n):
        updates.setdefault(v, []).append(n)
  # Every variable the forward pass reads is updated once, but the images.
  read_forward = {v for n, t in zip(names, types_)
                  if t in ("ReadVariableOp", "ResourceGather")
                  and not n.startswith(("gradient_tape/", "adam/"))
                  for v in _variables(graph, n)}
  (images,) = read_forward - set(updates)
  assert {forward[n][1] for n in names if images in read(n)} == {
      (2, 12, 12, 3)}
  # 31 weights: a kernel and a bias for each convolution (2 downsampling,
  # the encoder's first, 2 in each of its 2 blocks, the one to the codes,
  # the decoder's first, 2 in each of its 2 blocks, 2 upsampling); the
  # codebook.
  assert set(updates) == read_forward - {images}
  assert len(updates) == 2 * (2 + 1 + 4 + 1 + 1 + 4 + 2) + 1
  # Each weight's one Adam step follows the loss's gradient, clipped by the
  # global norm of all of them; the codebook's gathered rows are summed
  # into its shape first, so the norm reads static shapes.
  for v, steps in updates.items():
    assert len(steps) == 1, v
    upstream = _ancestors(graph, steps)
    assert norm in upstream and "loss/error" in upstream, v
    assert any(n.startswith("clip_by_global_norm/") for n in upstream), v
  assert forward[_raw_gradient(graph, (7, 5))][0] == "UnsortedSegmentSum"
  assert forward["global_norm/stack"][1] == (len(updates),)
  assert _count(graph, "AssignVariableOp") == 2 * len(updates)
  # Every shape is known but the codebook's gradient rows before the sum.
  assert graph.metadata["unknown_shape_nodes"] == 1


def _tiny_pixelcnn(**changes):
  # Sizes differ (side 7, 3 channels, 4 maps per stack and so 8 before each
  # gate, a head of 6, 5 classes), so each shape names its tensor; masks of
  # 5 in the first layer, 3 after.
  args = dict(image_size=7, channels=3, filters=4, layers=3, batch=2,
              classes=5, first_kernel=5, kernel=3, head=6)
  return _variant("tiny_pixelcnn", families.PIXELCNN, **{**args, **changes})


def _run_op(graph_def, fetch: str, feeds: dict):
  """The value of the op `fetch` of `graph_def`, the ops named in `feeds`
  (name -> array) replaced by those values, so none upstream of them runs."""
  tf, _ = training_steps.libraries()
  graph = tf.Graph()
  with graph.as_default():
    tf.graph_util.import_graph_def(graph_def, name="")
  with tf.compat.v1.Session(graph=graph) as session:
    return session.run(f"{fetch}:0",
                       {f"{name}:0": value for name, value in feeds.items()})


def _run_pixelcnn(fetch: str, feeds: dict):
  """`_run_op` on the tiny Gated PixelCNN step."""
  return _run_op(_tiny_graph_def(_tiny_pixelcnn), fetch, feeds)


_PIXELCNN_LAYERS = ("layer_0", "layer_1", "layer_2")
_STACKS = ("vertical", "horizontal")


def test_pixelcnn_layers_are_numbered_stages_of_two_linked_stacks():
  graph = _tiny_graph(_tiny_pixelcnn)
  forward, read = _model_ops(graph, "", constants=False)
  names = graph.node_names
  # One numbered stack of layers: every op of layer i, forward and backward,
  # sits at stage i / 2.
  _assert_layers_are_stages(graph, _PIXELCNN_LAYERS, min_ops=50, step=0.5)
  # Both stacks start from the scaled image; the vertical one reads only
  # itself, the horizontal one itself and the 1x1 link from the vertical
  # one's pre-activations; a residual on the horizontal stack after the
  # first layer.
  vertical = horizontal = "inputs/scaled"
  for i, layer in enumerate(_PIXELCNN_LAYERS):
    for stack, stream in (("vertical", vertical), ("horizontal", horizontal)):
      conv = f"{layer}/{stack}/conv/MaskedConv2D"
      assert read(conv) == {stream, f"{layer}/{stack}/conv/masked_kernel"}
      assert forward[conv] == ("Conv2D", (2, 7, 7, 8)), conv
    link = f"{layer}/link/Conv2D"
    (kernel,) = read(link) - {f"{layer}/vertical/conv/BiasAdd"}
    assert forward[kernel] == ("ReadVariableOp", (1, 1, 8, 8)), layer
    assert read(f"{layer}/horizontal/linked") == {
        f"{layer}/horizontal/conv/BiasAdd", f"{layer}/link/BiasAdd"}
    out = f"{layer}/horizontal/out/BiasAdd"
    assert forward[out][1] == (2, 7, 7, 4)
    if i == 0:
      assert f"{layer}/horizontal/residual" not in forward
      horizontal = out
    else:
      assert read(f"{layer}/horizontal/residual") == {horizontal, out}
      horizontal = f"{layer}/horizontal/residual"
    vertical = f"{layer}/vertical/gate/gated"
  # The last layer's vertical gate would feed nothing.
  assert vertical not in forward
  assert read("output/relu_in") == {horizontal}
  # Nothing flows from the horizontal stack into the vertical one.
  upstream = _ancestors(graph, ["layer_2/vertical/conv/BiasAdd"])
  assert not [n for n in upstream if "/horizontal/" in n]
  assert "layer_1/horizontal/linked" in _ancestors(graph, [horizontal])
  with pytest.raises(ValueError, match="at least 1"):
    store.build_graph(_tiny_pixelcnn(layers=0), DEVICES)
  with pytest.raises(ValueError, match="odd"):
    store.build_graph(_tiny_pixelcnn(kernel=4), DEVICES)


def test_pixelcnn_masks_are_type_a_in_the_first_layer_and_b_after():
  import numpy as np  # pylint: disable=g-import-not-at-top
  tf, _ = training_steps.libraries()
  graph = _tiny_graph(_tiny_pixelcnn)
  forward, read = _model_ops(graph, "")
  nodes = {n.name: n for n in _tiny_graph_def(_tiny_pixelcnn).node}
  # Vertical: the rows above the centre (A), the centre row too (B);
  # horizontal: the taps left of the centre (A), the centre too (B).
  first = {"vertical": np.array([[1] * 5] * 2 + [[0] * 5] * 3),
           "horizontal": np.array([[1, 1, 0, 0, 0]])}
  later = {"vertical": np.array([[1] * 3] * 2 + [[0] * 3]),
           "horizontal": np.array([[1, 1, 0]])}
  rng = np.random.default_rng(0)
  for i, layer in enumerate(_PIXELCNN_LAYERS):
    for stack in _STACKS:
      expected = (first if i == 0 else later)[stack]
      masked = f"{layer}/{stack}/conv/masked_kernel"
      (mask,) = [n for n in read(masked) if forward[n][0] == "Const"]
      (kernel,) = read(masked) - {mask}
      value = tf.make_ndarray(nodes[mask].attr["value"].tensor)
      np.testing.assert_array_equal(value[:, :, 0, 0], expected,
                                    err_msg=masked)
      assert forward[kernel][1][:2] == expected.shape
      # The masked taps get no gradient: the tape's filter gradient is
      # multiplied by the same mask on its way to the kernel.
      (gradient,) = [n for n, (t, _) in forward.items()
                     if t == "Mul" and n.startswith(
                         f"gradient_tape/{layer}/{stack}/conv/")]
      (backprop,) = read(gradient) - {mask}
      assert forward[backprop][0] == "Conv2DBackpropFilter"
      shape = forward[backprop][1]
      upstream = rng.normal(size=shape).astype(np.float32) + 3.0
      got = _run_pixelcnn(gradient, {backprop: upstream})
      np.testing.assert_array_equal(got == 0,
                                    np.broadcast_to(value == 0, shape))


def test_pixelcnn_each_pixels_logits_read_only_the_pixels_before_it():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_pixelcnn)
  forward, _ = _model_ops(graph, "", constants=False)
  # Random values for every weight and label the forward pass reads.
  rng = np.random.default_rng(2)
  feeds = {n: rng.normal(size=shape).astype(np.float32)
           for n, (t, shape) in forward.items()
           if t == "ReadVariableOp" and n.startswith(("layer_", "output/"))}
  feeds["inputs/classes/ReadVariableOp"] = np.array([1, 4], np.int32)
  image = rng.integers(0, 256, size=(2, 7, 7, 3)).astype(np.int32)
  changed = image.copy()
  changed[:, 3, 3] = 255 - image[:, 3, 3]
  logits = [_run_pixelcnn("output/per_channel",
                          {**feeds, "inputs/Cast/ReadVariableOp": x})
            for x in (image, changed)]
  moved = np.abs(logits[0] - logits[1]).max(axis=(0, 3, 4))
  scale = np.abs(logits[0]).max()
  # Changing pixel (3, 3) moves no logits of it or before it in raster
  # order; it moves those right of it, and below it on both sides, which
  # the vertical stack's rows above reach (no blind spot).
  for row in range(7):
    for col in range(7):
      if (row, col) <= (3, 3):
        assert moved[row, col] <= 1e-5 * scale, (row, col)
  for row, col in ((3, 4), (3, 5), (4, 0), (4, 2), (4, 3), (4, 5), (6, 6)):
    assert moved[row, col] > 1e-3 * scale, (row, col)


def test_pixelcnn_gated_activations_with_a_class_embedding_in_each_gate():
  graph = _tiny_graph(_tiny_pixelcnn)
  forward, read = _model_ops(graph, "", constants=False)
  gates = [(layer, stack) for layer in _PIXELCNN_LAYERS for stack in _STACKS
           if (layer, stack) != ("layer_2", "vertical")]
  assert _count(graph, "Tanh") == _count(graph, "Sigmoid") == len(gates) == 5
  assert forward["inputs/classes"] == ("OneHot", (2, 5))
  for layer, stack in gates:
    scope = f"{layer}/{stack}"
    # The 8 pre-activation maps plus the class embedding, split in two:
    # tanh of the first 4 times sigmoid of the other 4.
    assert forward[f"{scope}/gate/halves"] == ("Split", (2, 7, 7, 4))
    assert read(f"{scope}/gate/halves") == {f"{scope}/conditioned"}
    assert _data_inputs(graph, f"{scope}/gate/tanh") == [
        (f"{scope}/gate/halves", 0)]
    assert _data_inputs(graph, f"{scope}/gate/sigmoid") == [
        (f"{scope}/gate/halves", 1)]
    assert forward[f"{scope}/gate/gated"] == ("Mul", (2, 7, 7, 4))
    assert read(f"{scope}/gate/gated") == {f"{scope}/gate/tanh",
                                           f"{scope}/gate/sigmoid"}
    pre = (f"{scope}/conv/BiasAdd" if stack == "vertical"
           else f"{scope}/linked")
    assert read(f"{scope}/conditioned") == {pre, f"{scope}/class_map"}
    assert forward[f"{scope}/class_map"] == ("Reshape", (2, 1, 1, 8))
    assert read(f"{scope}/class_map") == {f"{scope}/class_bias/MatMul"}
    (table,) = read(f"{scope}/class_bias/MatMul") - {"inputs/classes"}
    assert forward[table] == ("ReadVariableOp", (5, 8)), scope
  assert not [n for n in forward if n.startswith("layer_2/vertical/class")]
  # Unconditional: the same gates without the embedding.
  plain = store.build_graph(_tiny_pixelcnn(classes=0), DEVICES)
  forward, read = _model_ops(plain, "", constants=False)
  assert _count(plain, "Tanh") == _count(plain, "Sigmoid") == 5
  assert not {"OneHot", "MatMul"} & set(plain.op_types)
  assert read("layer_1/horizontal/gate/halves") == {
      "layer_1/horizontal/linked"}


def test_pixelcnn_loss_is_a_256_way_cross_entropy_against_the_input_pixels():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_pixelcnn)
  forward, read = _model_ops(graph, "", constants=False)
  # ReLU, a 1x1 convolution to the head's 6, ReLU, a 1x1 convolution to
  # 3 x 256 logits per pixel, one softmax of 256 per pixel and channel.
  assert forward["output/hidden/BiasAdd"][1] == (2, 7, 7, 6)
  assert forward["output/logits/BiasAdd"][1] == (2, 7, 7, 768)
  assert forward["output/per_channel"] == ("Reshape", (2, 7, 7, 3, 256))
  (xent,) = [n for n, (t, _) in forward.items()
             if t == "SparseSoftmaxCrossEntropyWithLogits"]
  assert forward[xent][1] == (2 * 7 * 7 * 3,)
  (logits, _), (labels, _) = _data_inputs(graph, xent)
  assert forward[logits] == ("Reshape", (294, 256))
  assert "output/per_channel" in read(logits)
  # The targets are the input image's own integer values.
  (pixels,) = read(labels)
  assert forward[pixels] == ("ReadVariableOp", (2, 7, 7, 3))
  assert _variables(graph, pixels) == _variables(
      graph, "inputs/Cast/ReadVariableOp")
  assert forward["loss/mean"][0] == "Mean"
  # Run on values of our own: the mean over every sub-pixel of minus the
  # log-softmax at its value.
  rng = np.random.default_rng(3)
  values = rng.normal(size=(2, 7, 7, 3, 256)).astype(np.float32) * 3
  image = rng.integers(0, 256, size=(2, 7, 7, 3)).astype(np.int32)
  shifted = values - values.max(-1, keepdims=True)
  log_softmax = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  expected = -np.take_along_axis(log_softmax, image[..., None], -1).mean()
  got = _run_pixelcnn("loss/mean", {"output/per_channel": values,
                                    pixels: image})
  np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_pixelcnn_adam_updates_every_trainable_variable():
  graph = _tiny_graph(_tiny_pixelcnn)
  forward, read = _model_ops(graph, "", constants=False)
  names, types_ = graph.node_names, graph.op_types
  updates = {}
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in _variables(graph, n):
        updates.setdefault(v, []).append(n)
  read_forward = {v for n, t in zip(names, types_) if t == "ReadVariableOp"
                  and n.startswith(("inputs/", "layer_", "output/", "loss/"))
                  for v in _variables(graph, n)}
  # Every variable the forward pass reads is updated once, but the images
  # and the labels.
  fixed = read_forward - set(updates)
  assert sorted(forward[n][1] for n in names
                if forward.get(n, ("",))[0] == "ReadVariableOp"
                and read(n) & fixed) == [(2,), (2, 7, 7, 3), (2, 7, 7, 3)]
  assert set(updates) == read_forward - fixed
  # 33 weights: a kernel and a bias for each convolution (per layer the two
  # masked ones, the link and the horizontal stack's 1x1; two in the head),
  # a class embedding in each of the 5 gates.
  assert len(updates) == 2 * (4 * 3 + 2) + 5
  for v, steps in updates.items():
    assert len(steps) == 1, v
    upstream = _ancestors(graph, steps)
    assert "loss/cross_entropy/cross_entropy" in upstream, v
  assert _count(graph, "AssignVariableOp") == 2 * len(updates)
  assert graph.metadata["unknown_shape_nodes"] == 0


def _ancestors(graph, starts) -> set:
  """Names of every op upstream of the ops named `starts`."""
  inputs = [[] for _ in graph.node_names]
  for src, dst in zip(graph.edge_src, graph.edge_dst):
    inputs[dst].append(src)
  seen, todo = set(), [graph.node_index[n] for n in starts]
  while todo:
    for src in inputs[todo.pop()]:
      if src not in seen:
        seen.add(src)
        todo.append(src)
  return {graph.node_names[i] for i in seen}


def _tiny_hourglass(**changes):
  # Widths differ (the stem's first convolution 3, its first module 6,
  # features 8 with 4 inside the bottlenecks, 5 keypoints), so each shape
  # names its tensor; hourglasses of depth 2 on the 4x4 map of a 16x16
  # image pool to 2x2 and 1x1.
  args = dict(image_size=16, stacks=3, features=8, keypoints=5, batch=2,
              stem_width=3, depth=2)
  return _variant("tiny_hourglass", families.HOURGLASS, **{**args, **changes})


def _run_hourglass(fetch: str, feeds: dict):
  """`_run_op` on the tiny Stacked Hourglass step."""
  return _run_op(_tiny_graph_def(_tiny_hourglass), fetch, feeds)


_HOURGLASS_STACKS = ("stack_0", "stack_1", "stack_2")


def test_hourglass_stacks_are_numbered_stages_joined_by_reinjection():
  graph = _tiny_graph(_tiny_hourglass)
  forward, read = _model_ops(graph, "", constants=False)
  # Every op of stack i, forward and backward, sits at stage i / 2; inside
  # a stack its levels are numbered siblings.
  _assert_layers_are_stages(graph, _HOURGLASS_STACKS, min_ops=500, step=0.5,
                            stem="stack_")
  inner = {found[1] for found in map(scopes.numbered_scopes, graph.node_names)
           if len(found) > 1 and "/level_" in found[1]}
  assert inner == {f"{stack}/level_{d}" for stack in _HOURGLASS_STACKS
                   for d in range(2)}
  # The stem: a 7x7 stride-2 convolution (16 -> 8), batch norm and ReLU, a
  # residual module to 6, a 2x2 max pool (8 -> 4), a residual module and
  # one to the features.
  conv = "stem/conv/Conv2D"
  assert forward[conv][1] == (2, 8, 8, 3)
  assert {forward[n][1] for n in read(conv)} == {(2, 16, 16, 3), (7, 7, 3, 3)}
  assert read("stem/relu") == {"stem/norm/FusedBatchNormV3"}
  assert forward["stem/first/residual"][1] == (2, 8, 8, 6)
  assert forward["stem/pool"] == ("MaxPool", (2, 4, 4, 6))
  assert read("stem/pool") == {"stem/first/residual"}
  assert "stem/pool" in read("stem/second/reduce/norm/FusedBatchNormV3")
  assert forward["stem/third/residual"] == ("AddV2", (2, 4, 4, 8))
  # Each stack: the hourglass on its input, a residual module, a 1x1
  # convolution (batch norm, ReLU) and a 1x1 convolution to 5 heatmaps at
  # a quarter of the image. Not the last: 1x1 convolutions of the
  # features and of the heatmaps added to its input give the next input.
  stream = "stem/third/residual"
  for i, stack in enumerate(_HOURGLASS_STACKS):
    assert read(f"{stack}/level_0/pool") == {stream}, stack
    assert read(f"{stack}/level_0/upper/residual") == {
        stream, f"{stack}/level_0/upper/expand/conv/Conv2D"}, stack
    assert f"{stack}/level_0/merge" in read(
        f"{stack}/refine/reduce/norm/FusedBatchNormV3")
    linear = f"{stack}/linear/conv/Conv2D"
    (kernel,) = read(linear) - {f"{stack}/refine/residual"}
    assert forward[kernel] == ("ReadVariableOp", (1, 1, 8, 8))
    assert f"{stack}/linear/conv/Conv2D" in read(
        f"{stack}/linear/norm/FusedBatchNormV3")
    assert read(f"{stack}/features") == {
        f"{stack}/linear/norm/FusedBatchNormV3"}
    assert f"{stack}/features" in read(f"{stack}/heatmaps/Conv2D")
    assert forward[f"{stack}/heatmaps/BiasAdd"] == ("BiasAdd", (2, 4, 4, 5))
    if i == len(_HOURGLASS_STACKS) - 1:
      assert not [n for n in forward if n.startswith(
          (f"{stack}/remap", f"{stack}/reinjected"))]
      continue
    remaps = {f"{stack}/remap_features/Conv2D": (f"{stack}/features",
                                                 (1, 1, 8, 8)),
              f"{stack}/remap_heatmaps/Conv2D": (f"{stack}/heatmaps/BiasAdd",
                                                 (1, 1, 5, 8))}
    for remap, (source, shape) in remaps.items():
      (kernel,) = read(remap) - {source}
      assert forward[kernel] == ("ReadVariableOp", shape), remap
    assert forward[f"{stack}/reinjected"] == ("AddN", (2, 4, 4, 8))
    assert read(f"{stack}/reinjected") == {stream, *remaps}
    stream = f"{stack}/reinjected"
  with pytest.raises(ValueError, match="at least 1"):
    store.build_graph(_tiny_hourglass(stacks=0), DEVICES)
  with pytest.raises(ValueError, match="multiple of 16"):
    store.build_graph(_tiny_hourglass(image_size=24), DEVICES)


def _pools_and_upsamplings(forward, stack):
  """(name, shape) of the stack's forward max pools and upsamplings."""
  return [sorted((n, s) for n, (t, s) in forward.items()
                 if t == op and n.startswith(f"{stack}/"))
          for op in ("MaxPool", "ResizeNearestNeighbor")]


def test_hourglass_recursion_pools_and_upsamples_once_per_level():
  graph = _tiny_graph(_tiny_hourglass)
  forward, read = _model_ops(graph, "", constants=False)
  for i, stack in enumerate(_HOURGLASS_STACKS):
    # Depth 2: two max pools (4 -> 2 -> 1), two upsamplings back, and
    # their gradients.
    pools, ups = _pools_and_upsamplings(forward, stack)
    assert pools == [(f"{stack}/level_0/pool", (2, 2, 2, 8)),
                     (f"{stack}/level_1/pool", (2, 1, 1, 8))]
    assert ups == [
        (f"{stack}/level_0/upsample/ResizeNearestNeighbor", (2, 4, 4, 8)),
        (f"{stack}/level_1/upsample/ResizeNearestNeighbor", (2, 2, 2, 8))]
    backward = [t for n, t in zip(graph.node_names, graph.op_types)
                if n.startswith(f"gradient_tape/{stack}/")]
    assert backward.count("MaxPoolGrad") == 2
    assert backward.count("ResizeNearestNeighborGrad") == 2
    # Level d: the upper branch, a residual module on the level's input,
    # plus the lower one: a pool, a residual module, the next level (the
    # last level: a residual module), a residual module and the upsampling.
    entry = (f"{_HOURGLASS_STACKS[i - 1]}/reinjected" if i
             else "stem/third/residual")
    for d in range(2):
      level = f"{stack}/level_{d}"
      assert read(f"{level}/pool") == {entry}, level
      assert entry in read(f"{level}/upper/residual"), level
      assert f"{level}/pool" in read(f"{level}/before/residual"), level
      deeper = (f"{stack}/level_{d + 1}/merge" if d == 0
                else f"{level}/bottom/residual")
      assert deeper in read(f"{level}/after/residual"), level
      upsample = f"{level}/upsample/ResizeNearestNeighbor"
      assert read(upsample) == {f"{level}/after/residual"}, level
      assert read(f"{level}/merge") == {f"{level}/upper/residual", upsample}
      entry = f"{level}/before/residual"
    assert read(f"{stack}/level_1/bottom/reduce/norm/FusedBatchNormV3") >= {
        f"{stack}/level_1/before/residual"}
    assert {n.split("/")[1] for n in forward
            if n.startswith(f"{stack}/") and "/bottom/" in n} == {"level_1"}
  # The family's depth, 4: a 64x64 image's 16x16 map pools to 8, 4, 2, 1.
  assert not [v for v in families.FAMILIES["hourglass"].variants
              if "depth" in v.args]
  args = dict(_tiny_hourglass().args, image_size=64, stacks=1)
  del args["depth"]
  deep = store.build_graph(
      _variant("tiny_hourglass", families.HOURGLASS, **args), DEVICES)
  forward, _ = _model_ops(deep, "", constants=False)
  pools, ups = _pools_and_upsamplings(forward, "stack_0")
  assert [(n.split("/")[1], s[1]) for n, s in pools] == [
      ("level_0", 8), ("level_1", 4), ("level_2", 2), ("level_3", 1)]
  assert [(n.split("/")[1], s[1]) for n, s in ups] == [
      ("level_0", 16), ("level_1", 8), ("level_2", 4), ("level_3", 2)]
  assert {n.split("/")[1] for n in forward
          if n.startswith("stack_0/") and "/bottom/" in n} == {"level_3"}


def test_hourglass_residual_modules_are_preactivation_bottlenecks():
  graph = _tiny_graph(_tiny_hourglass)
  forward, read = _model_ops(graph, "", constants=False)
  modules = sorted(n[:-len("/residual")] for n, (t, _) in forward.items()
                   if t == "AddV2" and n.endswith("/residual")
                   and not n.startswith("gradient_tape/"))
  # 3 in the stem; per stack 3 per level, 1 at the bottom, 1 after.
  assert len(modules) == 3 + 3 * (3 * 2 + 1 + 1)
  for module in modules:
    (source,) = {n for n in read(f"{module}/reduce/norm/FusedBatchNormV3")
                 if forward[n][0] != "ReadVariableOp"}
    channels = forward[source][1][-1]
    width = forward[f"{module}/residual"][1][-1]
    half = width // 2
    # Batch norm, ReLU and a convolution, three times: 1x1 to half the
    # width, 3x3, 1x1 to the width.
    stream = source
    for unit, kernel in (("reduce", (1, 1, channels, half)),
                         ("spatial", (3, 3, half, half)),
                         ("expand", (1, 1, half, width))):
      norm = f"{module}/{unit}/norm/FusedBatchNormV3"
      assert stream in read(norm), (module, unit)
      assert read(f"{module}/{unit}/relu") == {norm}, (module, unit)
      conv = f"{module}/{unit}/conv/Conv2D"
      (weights,) = read(conv) - {f"{module}/{unit}/relu"}
      assert forward[weights] == ("ReadVariableOp", kernel), (module, unit)
      stream = conv
    # Added to the input, through a 1x1 projection where the width changes.
    skip = source
    if channels != width:
      skip = f"{module}/project/Conv2D"
      (weights,) = read(skip) - {source}
      assert forward[weights][1] == (1, 1, channels, width), module
    assert read(f"{module}/residual") == {skip, stream}, module
  assert {m for m in modules if f"{m}/project/Conv2D" in forward} == {
      "stem/first", "stem/third"}
  # Every convolution but the heatmaps' feeds a batch norm: no other bias.
  assert sorted(n for n, (t, _) in forward.items() if t == "BiasAdd") == [
      f"{stack}/heatmaps/BiasAdd" for stack in _HOURGLASS_STACKS]


def _assert_loss_sums_squared_errors(graph, stages, prediction, shape, run):
  """Asserts that `loss/total` sums one mean squared error per stage, of
  `prediction(stage)` against one target variable of `shape` shared by all,
  and runs it on values of our own (`run` is the family's `_run_op`).
  Returns the target's variables."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  forward, read = _model_ops(graph, "", constants=False)
  assert forward["loss/total"][0] == "AddN"
  assert read("loss/total") == {f"{stage}/loss/mean" for stage in stages}
  targets, feeds, expected = set(), {}, 0.0
  rng = np.random.default_rng(4)
  truth = rng.uniform(size=shape).astype(np.float32)
  for stage in stages:
    error = f"{stage}/loss/error"
    assert read(f"{stage}/loss/mean") == {f"{stage}/loss/Square"}
    assert read(f"{stage}/loss/Square") == {error}
    (target,) = read(error) - {prediction(stage)}
    assert forward[target] == ("ReadVariableOp", shape)
    targets |= _variables(graph, target)
    predicted = rng.normal(size=shape).astype(np.float32)
    feeds.update({prediction(stage): predicted, target: truth})
    expected += np.mean((predicted - truth) ** 2)
  assert len(targets) == 1
  np.testing.assert_allclose(run("loss/total", feeds), expected, rtol=1e-5)
  return targets


def test_hourglass_every_stack_is_supervised_against_the_target_heatmaps():
  graph = _tiny_graph(_tiny_hourglass)
  targets = _assert_loss_sums_squared_errors(
      graph, _HOURGLASS_STACKS, lambda stack: f"{stack}/heatmaps/BiasAdd",
      (2, 4, 4, 5), _run_hourglass)
  # The target is not the images.
  assert not targets & _variables(graph, "stem/conv/Conv2D")
  # Each stack's heatmaps get the gradient of their own term.
  for stack in _HOURGLASS_STACKS:
    upstream = _ancestors(
        graph, [f"gradient_tape/{stack}/heatmaps/BiasAdd/BiasAddGrad"])
    assert [n for n in upstream
            if n.startswith(f"gradient_tape/{stack}/loss/")], stack


def test_hourglass_adam_updates_every_weight_and_batch_norms_their_stats():
  graph = _tiny_graph(_tiny_hourglass)
  forward, read = _model_ops(graph, "", constants=False)
  names, types_ = graph.node_names, graph.op_types
  updates = {}
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in _variables(graph, n):
        updates.setdefault(v, []).append(n)
  read_forward = {v for n, t in zip(names, types_) if t == "ReadVariableOp"
                  and n.startswith(("stem/", "stack_"))
                  for v in _variables(graph, n)}
  # Every variable the forward pass reads is updated once, but the images,
  # the target heatmaps and each batch norm's moving mean and variance.
  norms = _count(graph, "FusedBatchNormV3")
  assert norms == 1 + 27 * 3 + 3
  fixed = read_forward - set(updates)
  assert len(fixed) == 2 + 2 * norms
  assert set(updates) == read_forward - fixed
  # 267 weights: the stem's convolution and batch norm (3); 27 residual
  # modules of 3 kernels and 3 batch norms (9 each) and 2 projections;
  # per stack the linear layer's kernel and batch norm and the heatmaps'
  # kernel and bias (5), and the first two stacks' re-injection kernels.
  assert len(updates) == 3 + 27 * 9 + 2 + 3 * 5 + 2 * 2
  # Each update follows the gradient of a stack's loss term.
  consumers = [[] for _ in names]
  for src, dst in zip(graph.edge_src, graph.edge_dst):
    consumers[src].append(dst)
  todo = [i for i, n in enumerate(names)
          if n.startswith("gradient_tape/stack_") and "/loss/" in n]
  after = set(todo)
  while todo:
    for dst in consumers[todo.pop()]:
      if dst not in after:
        after.add(dst)
        todo.append(dst)
  for v, steps in updates.items():
    assert len(steps) == 1, v
    assert graph.node_index[steps[0]] in after, v
  # Adam's two slots per weight, and each batch norm's two moving
  # statistics, assigned from the batch's.
  assert _count(graph, "AssignVariableOp") == 2 * len(updates) + 2 * norms
  moving = [n for n, t in zip(names, types_) if t == "AssignVariableOp"
            and n.startswith(("stem/", "stack_"))]
  assert len(moving) == 2 * norms
  assert all(_variables(graph, n) <= fixed for n in moving)


def _tiny_nerf(**changes):
  # Widths differ (2 rays, 5 coarse samples, 6 more per later level, 8
  # units, 4 with the direction), so each shape names its tensor; depth 4
  # puts the skip into layer_3.
  args = dict(rays=2, coarse_samples=5, fine_samples=6, width=8, depth=4,
              levels=3)
  return _variant("tiny_nerf", families.NERF, **{**args, **changes})


def _run_nerf(fetch: str, feeds: dict):
  """`_run_op` on the tiny NeRF step."""
  return _run_op(_tiny_graph_def(_tiny_nerf), fetch, feeds)


_NERF_LEVELS = ("level_0", "level_1", "level_2")
# Each level's depths: stratified at level 0, merged and sorted after.
_NERF_DEPTHS = ("level_0/sample/depths", "level_1/sample/sort/sorted",
                "level_2/sample/sort/sorted")


def test_nerf_levels_are_numbered_stages_each_with_its_own_mlp():
  graph = _tiny_graph(_tiny_nerf)
  forward, read = _model_ops(graph, "", constants=False)
  # Every op of level i, forward and backward, sits at stage i / 2; inside
  # a level its MLP's layers are numbered siblings.
  _assert_layers_are_stages(graph, _NERF_LEVELS, min_ops=100, step=0.5,
                            stem="level_")
  inner = {found[1] for found in map(scopes.numbered_scopes, graph.node_names)
           if len(found) > 1 and "/layer_" in found[1]}
  assert inner == {f"{level}/layer_{j}" for level in _NERF_LEVELS
                   for j in range(4)}
  kernels = {"layer_0": (63, 8), "layer_1": (8, 8), "layer_2": (8, 8),
             "layer_3": (8 + 63, 8), "density": (8, 1), "feature": (8, 8),
             "directional": (8 + 27, 4), "rgb": (4, 3)}
  for level, samples in zip(_NERF_LEVELS, (5, 11, 17)):
    n = 2 * samples
    position = f"{level}/encode_position/features"
    inputs = {"layer_0": position, "layer_1": f"{level}/layer_0/Relu",
              "layer_2": f"{level}/layer_1/Relu", "layer_3": f"{level}/skip",
              "density": f"{level}/layer_3/Relu",
              "feature": f"{level}/layer_3/Relu",
              "directional": f"{level}/with_direction",
              "rgb": f"{level}/directional/Relu"}
    for layer, source in inputs.items():
      matmul = f"{level}/{layer}/MatMul"
      (kernel,) = read(matmul) - {source}
      assert forward[kernel] == ("ReadVariableOp", kernels[layer]), matmul
      assert forward[matmul][1] == (n, kernels[layer][1]), matmul
    # The skip: the encoded position again, before layer depth / 2's
    # activations, into the next layer only.
    assert [s for s, _ in _data_inputs(graph, f"{level}/skip")
            if forward[s][0] != "Const"] == [position, f"{level}/layer_2/Relu"]
    assert sorted(n for n, (t, _) in forward.items() if t == "ConcatV2"
                  and n.startswith(f"{level}/") and position in read(n)) == [
                      f"{level}/skip"]
    # ReLU in the trunk and the directional layer, none on the density
    # and the features, a sigmoid on the colour.
    relus = sorted(n for n, (t, _) in forward.items()
                   if t == "Relu" and n.startswith(f"{level}/"))
    assert relus == sorted([f"{level}/layer_{j}/Relu" for j in range(4)]
                           + [f"{level}/directional/Relu",
                              f"{level}/render/nonnegative"])
    assert read(f"{level}/with_direction") == {
        f"{level}/feature/BiasAdd", f"{level}/encode_direction/features"}
    assert read(f"{level}/render/density") == {f"{level}/density/BiasAdd"}
    assert read(f"{level}/rgb/Sigmoid") == {f"{level}/rgb/BiasAdd"}
    assert read(f"{level}/render/colour") == {f"{level}/rgb/Sigmoid"}
  # Three MLPs of their own: no level reads another's weights.
  weights = [{v for n, (t, _) in forward.items() if t == "ReadVariableOp"
              and n.startswith(f"{level}/") and "/MatMul/" in n
              for v in _variables(graph, n)} for level in _NERF_LEVELS]
  assert [len(w) for w in weights] == [8, 8, 8]
  assert not (weights[0] & weights[1] or weights[1] & weights[2]
              or weights[0] & weights[2])
  assert graph.metadata["unknown_shape_nodes"] == 0
  with pytest.raises(ValueError, match="coarse_samples"):
    store.build_graph(_tiny_nerf(coarse_samples=2), DEVICES)
  with pytest.raises(ValueError, match="depth"):
    store.build_graph(_tiny_nerf(depth=1), DEVICES)


def test_nerf_encodes_positions_and_directions_by_sin_and_cos():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_nerf)
  forward, read = _model_ops(graph, "", constants=False)
  rng = np.random.default_rng(5)
  for level, samples, depths in zip(_NERF_LEVELS, (5, 11, 17), _NERF_DEPTHS):
    n = 2 * samples
    # The level's points on its own depths, the rays' unit directions.
    (points,) = read(f"{level}/encode_position/Reshape")
    assert points == f"{level}/points"
    assert depths in _ancestors(graph, [points]), level
    assert forward[f"{level}/encode_position/features"][1] == (n, 63)
    assert forward[f"{level}/encode_direction/features"][1] == (n, 27)
    assert "rays/views" in _ancestors(
        graph, [f"{level}/encode_direction/features"])
  # Run on values of our own: x, then sin and cos of 2^k x per frequency.
  for part, frequencies in (("position", 10), ("direction", 4)):
    x = rng.normal(size=(10, 3)).astype(np.float32)
    expected = [x]
    for k in range(frequencies):
      expected += [np.sin(2.0 ** k * x), np.cos(2.0 ** k * x)]
    got = _run_nerf(f"level_0/encode_{part}/features",
                    {f"level_0/encode_{part}/Reshape": x})
    np.testing.assert_allclose(got, np.concatenate(expected, -1), rtol=1e-5,
                               atol=1e-5)


def test_nerf_finer_levels_sample_the_previous_weights_and_sort():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_nerf)
  forward, read = _model_ops(graph, "", constants=False)
  for i, level in enumerate(_NERF_LEVELS[1:], 1):
    sample, previous = f"{level}/sample", _NERF_LEVELS[i - 1]
    # The PDF: the previous level's inner weights, frozen, plus 1e-5.
    frozen = f"{sample}/frozen_weights"
    assert forward[frozen][0] == "StopGradient"
    (inner,) = read(frozen)
    assert read(inner) == {f"{previous}/render/weights"}
    assert frozen in _ancestors(graph, [f"{sample}/pdf"])
    # Inverted by searchsorted (right) of 6 uniform draws per ray in the
    # CDF, interpolated in the bins between the previous depths.
    assert read(f"{sample}/index") == {f"{sample}/cdf",
                                       f"{sample}/uniform/RandomUniform"}
    assert forward[f"{sample}/index"] == ("UpperBound", (2, 6))
    assert f"{sample}/pdf" in _ancestors(graph, [f"{sample}/cdf"])
    assert _NERF_DEPTHS[i - 1] in _ancestors(graph, [f"{sample}/bins"])
    # Merged with the previous depths and sorted: the level's depths.
    assert read(f"{sample}/merged") == {_NERF_DEPTHS[i - 1],
                                        f"{sample}/depths"}
    assert forward[f"{sample}/sort/top_k"] == ("TopKV2", (2, 5 + 6 * i))
    assert read(f"{sample}/sort/negated") == {f"{sample}/merged"}
    # No gradient through the sampling.
    assert not [n for n in graph.node_names
                if n.startswith(f"gradient_tape/{sample}/")], level
  assert forward["level_0/sample/offsets/RandomUniform"][1] == (2, 5)
  # Run on values of our own. Level 0: one depth in each of 5 equal bins
  # of [2, 6] at the drawn offset.
  rng = np.random.default_rng(6)
  offsets = rng.uniform(size=(2, 5)).astype(np.float32)
  np.testing.assert_allclose(
      _run_nerf("level_0/sample/depths",
                {"level_0/sample/offsets/RandomUniform": offsets}),
      2.0 + 0.8 * (np.arange(5) + offsets), rtol=1e-5)
  # Level 1: the inverse of the piecewise-linear CDF over the mid-points,
  # merged and sorted.
  depths = np.sort(rng.uniform(2, 6, size=(2, 5)), -1).astype(np.float32)
  weights = rng.uniform(size=(2, 5)).astype(np.float32)
  u = rng.uniform(size=(2, 6)).astype(np.float32)
  bins = 0.5 * (depths[:, 1:] + depths[:, :-1])
  pdf = weights[:, 1:-1] + 1e-5
  pdf /= pdf.sum(-1, keepdims=True)
  cdf = np.concatenate([np.zeros((2, 1)), np.cumsum(pdf, -1)], -1)
  drawn = np.stack([np.interp(u[r], cdf[r], bins[r]) for r in range(2)])
  got = _run_nerf("level_1/sample/sort/sorted", {
      "level_0/sample/depths": depths, "level_0/render/weights": weights,
      "level_1/sample/uniform/RandomUniform": u})
  np.testing.assert_allclose(
      got, np.sort(np.concatenate([depths, drawn], -1), -1), rtol=1e-5)


def test_nerf_renders_by_an_exclusive_product_of_transmittance():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_nerf)
  forward, read = _model_ops(graph, "", constants=False)
  for level, samples, depths in zip(_NERF_LEVELS, (5, 11, 17), _NERF_DEPTHS):
    render = f"{level}/render"
    assert forward[f"{render}/transmittance"] == ("Cumprod", (2, samples))
    assert read(f"{render}/weights") == {f"{render}/alpha",
                                         f"{render}/transmittance"}
    assert forward[f"{render}/rgb"] == ("Sum", (2, 3))
    assert depths in _ancestors(graph, [f"{render}/distances"])
    assert "rays/norms" in read(f"{render}/distances")
  # Run on values of our own: alpha from ReLU(density) times the distance
  # to the next sample (the last 1e10) times |d|; each weight alpha times
  # the product of (1 - alpha + 1e-10) over the samples before it.
  rng = np.random.default_rng(7)
  depths = np.sort(rng.uniform(2, 6, size=(2, 5)), -1).astype(np.float32)
  density = rng.normal(size=(2, 5)).astype(np.float32)
  colour = rng.uniform(size=(2, 5, 3)).astype(np.float32)
  norms = rng.uniform(0.5, 2, size=(2, 1)).astype(np.float32)
  distances = np.concatenate([np.diff(depths, axis=-1),
                              np.full((2, 1), 1e10)], -1) * norms
  alpha = 1 - np.exp(-np.maximum(density, 0) * distances)
  kept = np.cumprod(1 - alpha + 1e-10, -1)
  transmittance = np.concatenate([np.ones((2, 1)), kept[:, :-1]], -1)
  weights = alpha * transmittance
  feeds = {"level_0/sample/depths": depths, "level_0/render/density": density,
           "level_0/render/colour": colour, "rays/norms": norms}
  np.testing.assert_allclose(_run_nerf("level_0/render/weights", feeds),
                             weights, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(_run_nerf("level_0/render/rgb", feeds),
                             (weights[..., None] * colour).sum(-2),
                             rtol=1e-5, atol=1e-7)


def test_nerf_loss_sums_one_mean_squared_error_per_level():
  graph = _tiny_graph(_tiny_nerf)
  targets = _assert_loss_sums_squared_errors(
      graph, _NERF_LEVELS, lambda level: f"{level}/render/rgb", (2, 3),
      _run_nerf)
  # The target is neither the origins nor the directions.
  assert not targets & _variables(graph, "rays/views/ReadVariableOp")


def test_nerf_adam_updates_every_levels_weights_from_its_own_loss():
  graph = _tiny_graph(_tiny_nerf)
  names, types_ = graph.node_names, graph.op_types
  updates = {}
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in _variables(graph, n):
        updates.setdefault(v, []).append(n)
  read_by = {level: {v for n, t in zip(names, types_)
                     if t == "ReadVariableOp" and n.startswith(f"{level}/")
                     for v in _variables(graph, n)}
             for level in ("rays", *_NERF_LEVELS)}
  read_forward = set().union(*read_by.values())
  # Every variable the forward pass reads is updated once, but the
  # origins, the directions and the target colours.
  fixed = read_forward - set(updates)
  assert len(fixed) == 3 and fixed >= read_by["rays"]
  assert set(updates) == read_forward - fixed
  # Per level a kernel and a bias for each of 4 trunk layers, the density
  # head, the feature layer, the directional layer and the RGB head.
  for i, level in enumerate(_NERF_LEVELS):
    own = read_by[level] - fixed
    assert len(own) == 2 * (4 + 4), level
    # Each level's weights follow its own loss term only: the sampling
    # passes no gradient from a later level back.
    for v in own:
      (step,) = updates[v]
      upstream = _ancestors(graph, [step])
      reached = [j for j, other in enumerate(_NERF_LEVELS)
                 if any(n.startswith(f"gradient_tape/{other}/loss/")
                        for n in upstream)]
      assert reached == [i], (level, v)
  assert len(updates) == 3 * 16
  assert _count(graph, "AssignVariableOp") == 2 * len(updates)


def _tiny_glow(**changes):
  # Widths differ (2 images of 16x16, 7 channels in the couplings'
  # networks), so each shape names its tensor; 3 levels of 2 flow steps on
  # 12 channels at 8x8, 24 at 4x4 and 48 at 2x2.
  args = dict(image_size=16, levels=3, steps=2, width=7, batch=2)
  return _variant("tiny_glow", families.GLOW, **{**args, **changes})


def _run_glow(fetch: str, feeds: dict):
  """`_run_op` on the tiny Glow step."""
  return _run_op(_tiny_graph_def(_tiny_glow), fetch, feeds)


_GLOW_LEVELS = ("level_0", "level_1", "level_2")
# Each level's side and channels after its squeeze.
_GLOW_SHAPES = ((8, 12), (4, 24), (2, 48))
_GLOW_STEPS = tuple((f"{level}/step_{j}", side, channels)
                    for level, (side, channels) in zip(_GLOW_LEVELS,
                                                       _GLOW_SHAPES)
                    for j in range(2))


def _space_to_depth(x):
  """TF's space-to-depth by 2 in NumPy: channel (2 dy + dx) c + k of pixel
  (i, j) is channel k of pixel (2i + dy, 2j + dx)."""
  b, h, w, c = x.shape
  return (x.reshape(b, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 2, 4, 5)
          .reshape(b, h // 2, w // 2, 4 * c))


def _glow_lu(p, lower, upper, sign, log_s):
  """W = P (tril(L, -1) + I) (triu(U, 1) + diag(sign exp(log_s)))."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  c = len(log_s)
  return p @ (np.tril(lower, -1) + np.eye(c)) @ (
      np.triu(upper, 1) + np.diag(sign * np.exp(log_s)))


def _glow_log_normal(x, mean, log_std):
  """Each image's log-density of x under N(mean, exp(log_std)^2)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return -(0.5 * np.log(2 * np.pi) + log_std
           + 0.5 * ((x - mean) * np.exp(-log_std)) ** 2).sum((1, 2, 3))


def test_glow_levels_squeeze_then_run_their_numbered_flow_steps():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_glow)
  forward, _ = _model_ops(graph, "", constants=False)
  # Every op of level i, forward and backward, sits at stage i / 2; inside
  # a level its flow steps are numbered siblings.
  _assert_layers_are_stages(graph, _GLOW_LEVELS, min_ops=300, step=0.5,
                            stem="level_")
  inner = {found[1] for found in map(scopes.numbered_scopes, graph.node_names)
           if len(found) > 1 and "/step_" in found[1]}
  assert inner == {step for step, _, _ in _GLOW_STEPS}
  # Each level squeezes what the last one kept (the images first): half
  # the side, 4x the channels; then its steps in a chain, each on the
  # last one's output, then the split (the last level: the prior).
  assert forward["inputs/x"] == ("Sub", (2, 16, 16, 3))
  source = ("inputs/x", 0)
  for i, (level, (side, channels)) in enumerate(zip(_GLOW_LEVELS,
                                                    _GLOW_SHAPES)):
    squeeze = f"{level}/squeeze"
    assert forward[squeeze] == ("SpaceToDepth", (2, side, side, channels))
    assert _data_inputs(graph, squeeze) == [source], level
    assert forward[source[0]][1] == (2, 2 * side, 2 * side, channels // 4)
    stream = squeeze
    for j in range(2):
      step = f"{level}/step_{j}"
      assert _data_inputs(graph, f"{step}/actnorm/scaled")[0] == (stream, 0)
      stream = f"{step}/coupling/y"
      assert forward[stream] == ("ConcatV2", (2, side, side, channels))
    if i < len(_GLOW_LEVELS) - 1:
      split = f"{level}/split/halves"
      assert (stream, 0) in _data_inputs(graph, split)
      assert forward[split] == ("Split", (2, side, side, channels // 2))
      source = (split, 0)
    else:
      assert _data_inputs(graph, f"{level}/prior/centred")[0] == (stream, 0)
  # Run on values of our own: the squeeze is space-to-depth by 2.
  x = np.random.default_rng(9).uniform(-0.5, 0.5, (2, 16, 16, 3))
  np.testing.assert_array_equal(
      _run_glow("level_0/squeeze", {"inputs/x": x.astype(np.float32)}),
      _space_to_depth(x.astype(np.float32)))
  assert graph.metadata["unknown_shape_nodes"] == 0
  with pytest.raises(ValueError, match="multiple of 8"):
    store.build_graph(_tiny_glow(image_size=20), DEVICES)
  with pytest.raises(ValueError, match="at least 1"):
    store.build_graph(_tiny_glow(steps=0), DEVICES)


def test_glow_flow_steps_are_actnorm_then_lu_convolution_then_coupling():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_glow)
  forward, read = _model_ops(graph, "", constants=False)
  # The 1x1 convolution's log-det comes from log |s|: no op computes a
  # determinant, an inverse or a decomposition.
  assert not [t for t in set(graph.op_types) if "Determinant" in t
              or t in ("MatrixInverse", "MatrixSolve", "Svd", "Qr", "Lu")]
  for step, side, c in _GLOW_STEPS:
    actnorm, conv = f"{step}/actnorm", f"{step}/invertible_conv"
    # Actnorm, then the 1x1 convolution by W, then the coupling.
    assert forward[f"{actnorm}/y"] == ("AddV2", (2, side, side, c))
    assert _data_inputs(graph, f"{conv}/conv") == [(f"{actnorm}/y", 0),
                                                   (f"{conv}/kernel", 0)]
    assert forward[f"{conv}/kernel"] == ("Reshape", (1, 1, c, c))
    assert read(f"{conv}/kernel") == {f"{conv}/weight"}
    assert _data_inputs(graph, f"{step}/coupling/halves")[1] == (
        f"{conv}/conv", 0)
    # W = P (masked L + I) (masked U + diag(sign(s) exp(log |s|))); P, L,
    # U, sign(s) and log |s| five variables of their own.
    (p,) = read(f"{conv}/weight") - {f"{conv}/MatMul"}
    assert read(f"{conv}/MatMul") == {f"{conv}/unit_lower", f"{conv}/upper"}
    assert f"{conv}/masked_lower" in read(f"{conv}/unit_lower")
    assert read(f"{conv}/upper") == {f"{conv}/masked_upper",
                                     f"{conv}/diagonal"}
    assert read(f"{conv}/diagonal") == {f"{conv}/s"}
    reads = {"permutation": p,
             "lower": f"{conv}/masked_lower/ReadVariableOp",
             "upper": f"{conv}/masked_upper/ReadVariableOp",
             "sign": f"{conv}/s/ReadVariableOp",
             "log_s": f"{conv}/abs_s/ReadVariableOp"}
    shapes = {name: forward[r] for name, r in reads.items()}
    assert shapes == {name: ("ReadVariableOp", (c, c) if name in (
        "permutation", "lower", "upper") else (c,)) for name in reads}
    owned = [_variables(graph, r) for r in reads.values()]
    assert len(set().union(*owned)) == 5, step
    # Both log-dets read their own scale: H W sum(log |s|).
    assert _variables(graph, f"{conv}/sum_log_abs_s/ReadVariableOp") == (
        _variables(graph, reads["log_s"]))
    assert read(f"{conv}/log_det") == {f"{conv}/sum_log_abs_s"}
    assert _variables(graph, f"{actnorm}/abs_scale/ReadVariableOp") == (
        _variables(graph, f"{actnorm}/scaled/ReadVariableOp"))
  # Run on values of our own (level 0's first step, 12 channels at 8x8).
  rng = np.random.default_rng(10)
  f32 = lambda *shape: rng.normal(size=shape).astype(np.float32)
  actnorm, conv = "level_0/step_0/actnorm", "level_0/step_0/invertible_conv"
  x, scale, bias = f32(2, 8, 8, 12), f32(12), f32(12)
  np.testing.assert_allclose(_run_glow(f"{actnorm}/y", {
      "level_0/squeeze": x, f"{actnorm}/scaled/ReadVariableOp": scale,
      f"{actnorm}/y/ReadVariableOp": bias}), x * scale + bias, rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(_run_glow(f"{actnorm}/log_det", {
      f"{actnorm}/abs_scale/ReadVariableOp": scale}),
                             64 * np.log(np.abs(scale)).sum(), rtol=1e-5)
  p = np.eye(12, dtype=np.float32)[rng.permutation(12)]
  lower, upper, log_s = f32(12, 12), f32(12, 12), 0.3 * f32(12)
  sign = np.sign(f32(12))
  w = _run_glow(f"{conv}/weight", {
      f"{conv}/weight/ReadVariableOp": p,
      f"{conv}/masked_lower/ReadVariableOp": lower,
      f"{conv}/masked_upper/ReadVariableOp": upper,
      f"{conv}/s/ReadVariableOp": sign, f"{conv}/abs_s/ReadVariableOp": log_s})
  np.testing.assert_allclose(w, _glow_lu(p, lower, upper, sign, log_s),
                             rtol=1e-4, atol=1e-5)
  # Its log-det, 64 sum(log |s|), is 64 log |det W|.
  log_det = _run_glow(f"{conv}/log_det", {
      f"{conv}/sum_log_abs_s/ReadVariableOp": log_s})
  np.testing.assert_allclose(log_det, 64 * np.linalg.slogdet(w)[1],
                             rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(_run_glow(f"{conv}/conv", {
      f"{actnorm}/y": x, f"{conv}/kernel": w.reshape(1, 1, 12, 12)}), x @ w,
                             rtol=1e-4, atol=1e-5)


def test_glow_coupling_shifts_and_scales_half_by_sigmoid_of_raw_plus_2():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_glow)
  forward, read = _model_ops(graph, "", constants=False)
  for step, side, c in _GLOW_STEPS:
    coupling = f"{step}/coupling"
    # The network reads the first half: a 3x3 convolution to 7, ReLU, a
    # 1x1 convolution, ReLU and a 3x3 convolution to c, its halves the
    # shift and the raw scale.
    kernels = {"conv_in": (3, 3, c // 2, 7), "conv_hidden": (1, 1, 7, 7),
               "conv_out": (3, 3, 7, c)}
    inputs = {"conv_in": (f"{coupling}/halves", 0),
              "conv_hidden": (f"{coupling}/conv_in/Relu", 0),
              "conv_out": (f"{coupling}/conv_hidden/Relu", 0)}
    for layer, source in inputs.items():
      (data, kernel) = _data_inputs(graph, f"{coupling}/{layer}/Conv2D")
      assert data == source, (step, layer)
      assert forward[kernel[0]] == ("ReadVariableOp", kernels[layer])
    assert forward[f"{coupling}/conv_out/BiasAdd"][1] == (2, side, side, c)
    assert read(f"{coupling}/shift_and_scale") == {
        f"{coupling}/conv_out/BiasAdd"}
    # The second half: (b + shift) x sigmoid(raw + 2), after the first.
    assert _data_inputs(graph, f"{coupling}/shifted") == [
        (f"{coupling}/halves", 1), (f"{coupling}/shift_and_scale", 0)]
    assert _data_inputs(graph, f"{coupling}/raised")[0] == (
        f"{coupling}/shift_and_scale", 1)
    assert forward[f"{coupling}/scale"][0] == "Sigmoid"
    assert read(f"{coupling}/coupled") == {f"{coupling}/shifted",
                                           f"{coupling}/scale"}
    assert _data_inputs(graph, f"{coupling}/y")[:2] == [
        (f"{coupling}/halves", 0), (f"{coupling}/coupled", 0)]
    assert forward[f"{coupling}/log_det"] == ("Sum", (2,))
  # Run on values of our own: the step's input and the network's output.
  rng = np.random.default_rng(11)
  x, h = (rng.normal(size=(2, 8, 8, 12)).astype(np.float32)
          for _ in range(2))
  coupling = "level_0/step_0/coupling"
  feeds = {"level_0/step_0/invertible_conv/conv": x,
           f"{coupling}/conv_out/BiasAdd": h}
  scale = 1 / (1 + np.exp(-(h[..., 6:] + 2)))
  np.testing.assert_allclose(
      _run_glow(f"{coupling}/y", feeds),
      np.concatenate([x[..., :6], (x[..., 6:] + h[..., :6]) * scale], -1),
      rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(_run_glow(f"{coupling}/log_det", feeds),
                             np.log(scale).sum((1, 2, 3)), rtol=1e-5)


def test_glow_splits_score_the_factored_half_given_the_kept_half():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_glow)
  forward, read = _model_ops(graph, "", constants=False)
  for level, (side, c) in zip(_GLOW_LEVELS[:-1], _GLOW_SHAPES):
    split = f"{level}/split"
    # A 3x3 convolution of the kept half gives the mean and log-std of the
    # factored half's Gaussian.
    data, kernel = _data_inputs(graph, f"{split}/conv_prior/Conv2D")
    assert data == (f"{split}/halves", 0)
    assert forward[kernel[0]] == ("ReadVariableOp", (3, 3, c // 2, c))
    assert read(f"{split}/gaussian") == {f"{split}/conv_prior/BiasAdd"}
    assert _data_inputs(graph, f"{split}/centred") == [
        (f"{split}/halves", 1), (f"{split}/gaussian", 0)]
    assert (f"{split}/gaussian", 1) in _data_inputs(graph,
                                                    f"{split}/normaliser")
    assert (f"{split}/gaussian", 1) in _data_inputs(
        graph, f"{split}/negative_log_std")
    assert forward[f"{split}/log_prob"] == ("Neg", (2,))
  # The last level's output under a Gaussian of learned per-channel mean
  # and log-std.
  prior = "level_2/prior"
  mean = _variables(graph, f"{prior}/centred/ReadVariableOp")
  log_std = _variables(graph, f"{prior}/normaliser/ReadVariableOp")
  assert forward[f"{prior}/centred/ReadVariableOp"][1] == (48,)
  assert log_std == _variables(graph,
                               f"{prior}/negative_log_std/ReadVariableOp")
  assert len(mean | log_std) == 2
  # Run on values of our own: level 0's last output and the prior's
  # convolution.
  rng = np.random.default_rng(12)
  y, h = (rng.normal(size=(2, 8, 8, 12)).astype(np.float32)
          for _ in range(2))
  np.testing.assert_allclose(_run_glow("level_0/split/log_prob", {
      "level_0/step_1/coupling/y": y, "level_0/split/conv_prior/BiasAdd": h}),
                             _glow_log_normal(y[..., 6:], h[..., :6],
                                              h[..., 6:]), rtol=1e-5)


def test_glow_loss_is_the_bits_per_dimension_of_every_term():
  import numpy as np  # pylint: disable=g-import-not-at-top
  graph = _tiny_graph(_tiny_glow)
  forward, read = _model_ops(graph, "", constants=False)
  # Every actnorm's and 1x1 convolution's log-det, every coupling's, every
  # split's and the last prior's log-probability.
  steps = [step for step, _, _ in _GLOW_STEPS]
  assert read("loss/weight_log_dets") == {
      f"{step}/{part}/log_det" for step in steps
      for part in ("actnorm", "invertible_conv")}
  assert read("loss/coupling_log_dets") == {f"{step}/coupling/log_det"
                                            for step in steps}
  assert read("loss/prior_log_probs") == {
      "level_0/split/log_prob", "level_1/split/log_prob",
      "level_2/prior/log_prob"}
  assert forward["loss/mean"] == ("Mean", ())
  # Dequantisation: (the integer values + uniform noise) / 256 - 0.5.
  rng = np.random.default_rng(13)
  images = rng.integers(0, 256, (2, 16, 16, 3)).astype(np.int32)
  noise = rng.uniform(size=(2, 16, 16, 3)).astype(np.float32)
  np.testing.assert_allclose(_run_glow("inputs/x", {
      "inputs/Cast/ReadVariableOp": images,
      "inputs/noise/RandomUniform": noise}), (images + noise) / 256 - 0.5,
                             rtol=1e-6, atol=1e-6)
  # Run the whole flow on values of our own: the weights, the couplings'
  # networks' outputs and the priors' parameters, against the same flow
  # written in NumPy.
  f32 = lambda *shape, s=1.0: (s * rng.normal(size=shape)).astype(np.float32)
  x = rng.uniform(-0.5, 0.5, (2, 16, 16, 3)).astype(np.float32)
  feeds = {"inputs/x": x}
  log_likelihood = np.full(2, -768 * np.log(256))
  for i, level in enumerate(_GLOW_LEVELS):
    x = _space_to_depth(x)
    side, c = x.shape[1], x.shape[3]
    for j in range(2):
      step = f"{level}/step_{j}"
      actnorm, conv = f"{step}/actnorm", f"{step}/invertible_conv"
      scale, bias = 1 + f32(c, s=0.1), f32(c, s=0.1)
      p = np.eye(c, dtype=np.float32)[rng.permutation(c)]
      lower, upper, log_s = f32(c, c, s=0.1), f32(c, c, s=0.1), f32(c, s=0.1)
      sign = np.sign(f32(c))
      h = f32(2, side, side, c, s=0.5)
      feeds.update({
          f"{actnorm}/scaled/ReadVariableOp": scale,
          f"{actnorm}/abs_scale/ReadVariableOp": scale,
          f"{actnorm}/y/ReadVariableOp": bias,
          f"{conv}/weight/ReadVariableOp": p,
          f"{conv}/masked_lower/ReadVariableOp": lower,
          f"{conv}/masked_upper/ReadVariableOp": upper,
          f"{conv}/s/ReadVariableOp": sign,
          f"{conv}/abs_s/ReadVariableOp": log_s,
          f"{conv}/sum_log_abs_s/ReadVariableOp": log_s,
          f"{step}/coupling/conv_out/BiasAdd": h})
      x = x * scale + bias
      x = x @ _glow_lu(p, lower, upper, sign, log_s)
      coupling_scale = 1 / (1 + np.exp(-(h[..., c // 2:] + 2)))
      x = np.concatenate([x[..., :c // 2],
                          (x[..., c // 2:] + h[..., :c // 2]) * coupling_scale],
                         -1)
      log_likelihood += side * side * (np.log(np.abs(scale)).sum()
                                       + log_s.sum())
      log_likelihood += np.log(coupling_scale).sum((1, 2, 3))
    if i < len(_GLOW_LEVELS) - 1:
      h = f32(2, side, side, c, s=0.3)
      feeds[f"{level}/split/conv_prior/BiasAdd"] = h
      log_likelihood += _glow_log_normal(x[..., c // 2:], h[..., :c // 2],
                                         h[..., c // 2:])
      x = x[..., :c // 2]
    else:
      mean, log_std = f32(c, s=0.3), f32(c, s=0.3)
      feeds.update({f"{level}/prior/centred/ReadVariableOp": mean,
                    f"{level}/prior/normaliser/ReadVariableOp": log_std,
                    f"{level}/prior/negative_log_std/ReadVariableOp": log_std})
      log_likelihood += _glow_log_normal(x, mean, log_std)
  expected = np.mean(-log_likelihood / (768 * np.log(2)))
  np.testing.assert_allclose(_run_glow("loss/mean", feeds), expected,
                             rtol=1e-4)


def test_glow_starts_from_rotations_and_zero_couplings_and_priors(
    monkeypatch):
  import numpy as np  # pylint: disable=g-import-not-at-top
  from grappler_bridge import unallocated_variables  # pylint: disable=g-import-not-at-top
  from tf_gdp.corpus import glow  # pylint: disable=g-import-not-at-top
  tf, _ = training_steps.libraries()
  made = {}

  def record(next_creator, **kwargs):
    variable = next_creator(**kwargs)
    made.setdefault(variable.name.split(":")[0], []).append(variable)
    return variable

  # The model's variables made as real ones, recorded, to read their
  # starting values.
  monkeypatch.setattr(unallocated_variables, "scope",
                      lambda: tf.variable_creator_scope(record))
  glow.glow(**_tiny_glow().args)
  value = lambda name, k=0: made[name][k].numpy()
  for step, _, c in _GLOW_STEPS:
    # Actnorm: the identity.
    np.testing.assert_array_equal(value(f"{step}/actnorm/scale"), np.ones(c))
    np.testing.assert_array_equal(value(f"{step}/actnorm/bias"), np.zeros(c))
    # The 1x1 convolution: a rotation, so its log-det starts at 0; P and
    # sign(s) are not trained.
    conv = f"{step}/invertible_conv"
    factors = [value(f"{conv}/{name}") for name in (
        "permutation", "lower", "upper", "sign", "log_scale")]
    w = _glow_lu(*factors)
    np.testing.assert_allclose(w @ w.T, np.eye(c), atol=1e-5)
    assert abs(factors[-1].sum()) < 1e-4
    assert sorted(factors[0].sum(0)) == sorted(factors[0].sum(1)) == [1] * c
    assert not made[f"{conv}/permutation"][0].trainable
    assert not made[f"{conv}/sign"][0].trainable
    # The coupling: the network's last convolution (kernel and bias) at
    # zero, the others not: the step starts as b x sigmoid(2).
    kernels, biases = made[f"{step}/coupling/kernel"], made[
        f"{step}/coupling/bias"]
    assert [k.shape for k in kernels] == [(3, 3, c // 2, 7), (1, 1, 7, 7),
                                          (3, 3, 7, c)]
    assert np.abs(kernels[0].numpy()).sum() > 0
    assert np.abs(kernels[1].numpy()).sum() > 0
    assert not np.abs(kernels[2].numpy()).any()
    assert not np.abs(biases[2].numpy()).any()
  # The priors: the splits' convolutions and the last Gaussian at zero, a
  # standard normal.
  for level in _GLOW_LEVELS[:-1]:
    assert not value(f"{level}/split/kernel").any()
    assert not value(f"{level}/split/bias").any()
  assert not value("level_2/prior/mean").any()
  assert not value("level_2/prior/log_std").any()


def test_glow_adam_updates_every_weight_but_p_and_the_signs():
  graph = _tiny_graph(_tiny_glow)
  names, types_ = graph.node_names, graph.op_types
  updates = {}
  for n, t in zip(names, types_):
    if t == "AssignSubVariableOp":
      for v in _variables(graph, n):
        updates.setdefault(v, []).append(n)
  read_forward = {v for n, t in zip(names, types_) if t == "ReadVariableOp"
                  and n.startswith(("inputs/", "level_"))
                  for v in _variables(graph, n)}
  # The images, and in each step P and sign(s), are read but not trained.
  fixed = read_forward - set(updates)
  expected_fixed = _variables(graph, "inputs/Cast/ReadVariableOp")
  for step, _, _ in _GLOW_STEPS:
    conv = f"{step}/invertible_conv"
    expected_fixed |= _variables(graph, f"{conv}/weight/ReadVariableOp")
    expected_fixed |= _variables(graph, f"{conv}/s/ReadVariableOp")
  assert fixed == expected_fixed and len(fixed) == 1 + 2 * 6
  # Everything else once: per step actnorm's scale and bias, L, U and
  # log |s|, and the three convolutions' kernels and biases; the splits'
  # convolutions; the last prior's mean and log-std.
  assert set(updates) == read_forward - fixed
  assert all(len(u) == 1 for u in updates.values())
  assert len(updates) == 6 * 11 + 2 * 2 + 2
  assert _count(graph, "AssignVariableOp") == 2 * len(updates)
