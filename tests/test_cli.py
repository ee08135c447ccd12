"""The CLI's contract: exit 0 on success, 2 with one line for bad input."""

import json
import os
import subprocess
import sys

import pytest

_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


def _cli(*args, timeout=600):
  return subprocess.run([sys.executable, "-m", "tf_gdp", *args], env=_ENV,
                        text=True, capture_output=True, timeout=timeout,
                        check=False)


def _error_lines(result):
  """Every stderr line: TensorFlow's start-up notices must not be there."""
  return [line for line in result.stderr.splitlines() if line]


def _assert_bad_input(result, message):
  assert result.returncode == 2, result.stderr
  lines = _error_lines(result)
  assert len(lines) == 1, lines
  assert lines[0].startswith("error: ") and message in lines[0], lines[0]
  assert "Traceback" not in result.stderr


def _tiny_document(cyclic=False):
  edges = [{"src": 0, "dst": 1, "bytes": 64}]
  if cyclic:
    edges.append({"src": 1, "dst": 0, "bytes": 64})
  return {"format": "tf-gdp-opgraph", "version": 1, "name": "tiny",
          "nodes": [{"name": "a", "op": "MatMul", "cost": {"GPU": 5.0},
                     "output_bytes": 64, "memory_bytes": 0},
                    {"name": "b", "op": "Relu", "cost": {"GPU": 1.0},
                     "output_bytes": 64, "memory_bytes": 0}],
          "edges": edges}


def test_bad_inputs_exit_2_with_one_line(tmp_path):
  truncated = tmp_path / "truncated.json"
  truncated.write_text(json.dumps(_tiny_document())[:-20])
  cyclic = tmp_path / "cyclic.json"
  cyclic.write_text(json.dumps(_tiny_document(cyclic=True)))
  garbage = tmp_path / "garbage.pb"
  garbage.write_bytes(os.urandom(4096))
  cases = [
      (["inspect", f"--graph={tmp_path / 'missing.json'}"], "no such file"),
      (["inspect", f"--graph={truncated}"], "invalid JSON"),
      (["inspect", f"--graph={cyclic}"], "cycle"),
      (["inspect", f"--graph={garbage}"], "not a binary GraphDef or MetaGraphDef"),
      (["inspect", "--top=-1", f"--graph={cyclic}"], "top"),
      (["inspect"], "graph"),
      (["no-such-command"], "unknown command"),
      (["export-graph", "--model=no_such_model", f"--out={tmp_path / 'x.json'}"],
       "unknown model"),
      (["export-graph", "--model=gnmt", "--devices=tpu9000",
        f"--out={tmp_path / 'y.json'}"], "unknown devices 'tpu9000'"),
      (["place", f"--graphs={cyclic}", "--method=metis", "--robust_objective",
        f"--out={tmp_path / 'z'}"], "robust objective steers gdp"),
      (["place", "--graphs=layered:30", "--method=random", "--seed=-5",
        f"--out={tmp_path / 'z'}"], "--seed=-5"),
      (["calibrate", "--workers=65"], "--workers=65"),
      (["corpus", "build", "--select="], "--select names nothing to build"),
      # The file system's answer on a path the user gave, named once.
      (["place", "--graphs=layered:30", "--method=metis", "--compare=",
        f"--out={truncated}"], f"{truncated}: File exists"),
  ]
  for args, message in cases:
    _assert_bad_input(_cli(*args), message)
  assert not [p for p in os.listdir(tmp_path)
              if p.startswith(("x.", "y.", "z", ".tmp"))]


def test_inspect_json_prints_counts(tmp_path):
  path = tmp_path / "tiny.json"
  path.write_text(json.dumps(_tiny_document()))
  result = _cli("inspect", f"--graph={path}", "--json")
  assert result.returncode == 0, result.stderr
  info = json.loads(result.stdout)
  assert info["nodes"] == 2 and info["edges"] == 1
  assert info["total_cost_us"] == {"GPU": 6.0}
  assert info["largest_ops"][0]["name"] == "a"


def test_help_lists_commands():
  result = _cli("--help")
  assert result.returncode == 0
  assert "export-graph" in result.stdout and "inspect" in result.stdout


# Ops that launch no kernel or only move metadata: a zero cost is right for them.
_FREE_OPS = {"Const", "Placeholder", "NoOp", "VarHandleOp", "Identity", "IdentityN",
             "Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond",
             "ReadVariableOp", "Shape", "Reshape", "StopGradient", "Empty"}


def test_export_inception_v3_training_step_then_inspect(tmp_path):
  """The foundation's acceptance check, on the real default-size graph."""
  out = tmp_path / "i.json"
  result = _cli("export-graph", "--model=inception_v3", f"--out={out}")
  assert result.returncode == 0, result.stderr
  document = json.loads(out.read_text())
  nodes = document["nodes"]
  assert len(nodes) > 4000
  assert document["metadata"]["cost_source"]["GPU"].startswith("roofline")
  fed = {edge["dst"] for edge in document["edges"]}
  compute = [(i, n) for i, n in enumerate(nodes) if n["op"] not in _FREE_OPS]
  assert len(compute) > 2000
  # Every op a fetch needs is priced; the ones none needs (gradients nobody
  # reads) are free and receive nothing.
  zero = [i for i, n in compute if n["cost"]["GPU"] <= 0]
  assert not [nodes[i]["name"] for i in zero if i in fed][:5]
  assert 0 < len(zero) <= document["metadata"]["unneeded_nodes"] < 1000
  ops = {n["op"] for n in nodes}
  assert {"Conv2D", "Conv2DBackpropFilter", "ResourceApplyGradientDescent"} <= ops
  inspected = _cli("inspect", f"--graph={out}")
  assert inspected.returncode == 0, inspected.stderr
  assert f"nodes {len(nodes):>14,}".replace(" ", "") in inspected.stdout.replace(" ", "")
  assert "colocation_groups" in inspected.stdout


def test_export_metagraph_pb_and_inspect_it(tmp_path):
  out = tmp_path / "g.pb"
  knobs = "hidden_size=8,vocab_size=20,batch=2,source_length=3,target_length=3"
  result = _cli("export-graph", "--model=gnmt", f"--knobs={knobs}", f"--out={out}")
  assert result.returncode == 0, result.stderr
  inspected = _cli("inspect", f"--graph={out}", "--json", "--devices=v100x8")
  assert inspected.returncode == 0, inspected.stderr
  info = json.loads(inspected.stdout)
  assert info["nodes"] > 500 and info["back_edges"] == 0
  assert info["total_cost_us"]["GPU"] > 0


@pytest.mark.parametrize("command,flag", [("place", "--graphs"),
                                          ("calibrate", "--workers"),
                                          ("measure", "--placement"),
                                          ("measure", "--allow_side_effects"),
                                          ("evaluate", "--json_out"),
                                          ("pretrain", "--budget_iterations")])
def test_command_help_lists_the_command_flags(command, flag):
  result = _cli(command, "--help")
  assert result.returncode == 0, result.stderr
  assert result.stdout.startswith(f"usage: tf-gdp {command}")
  assert flag in result.stdout


def test_verbosity_1_shows_tensorflow_startup_and_traceback(tmp_path):
  garbage = tmp_path / "garbage.pb"
  garbage.write_bytes(b"garbage")
  quiet = _cli("inspect", f"--graph={garbage}")
  loud = _cli("inspect", f"--graph={garbage}", "--verbosity=1")
  assert quiet.returncode == loud.returncode == 2
  assert len(_error_lines(quiet)) == 1, quiet.stderr
  assert "Traceback" in loud.stderr
  assert len(_error_lines(loud)) > 1


def test_place_a_train_step_saved_model_by_its_signature(
    train_step_saved_model, tmp_path):
  out = tmp_path / "out"
  result = _cli("place", f"--graphs={train_step_saved_model}",
                "--signature=train_step", "--devices=local-cpus:2",
                "--method=single_device", "--compare=", "--nopictures",
                f"--out={out}")
  assert result.returncode == 0, result.stderr
  assert "1 placed, 0 failed" in result.stdout
  document = json.loads(
      (out / "train_step_model" / "placement.json").read_text())
  assert document["placement"]
  _assert_bad_input(_cli("inspect", f"--graph={train_step_saved_model}",
                         "--signature=nope"), "no signature 'nope'")


def test_evaluate_agrees_with_place_and_writes_its_json(tmp_path):
  out = tmp_path / "out"
  placed = _cli("place", "--graphs=layered:200", "--devices=p100x4",
                "--method=metis", "--nopictures", f"--out={out}")
  assert placed.returncode == 0, placed.stderr
  report = json.loads((out / "layered_200" / "report.json").read_text())
  placement = out / "layered_200" / "placement.json"
  json_out = tmp_path / "evaluation.json"
  evaluated = _cli("evaluate", "--graph=layered:200",
                   f"--placement={placement}", f"--json_out={json_out}")
  assert evaluated.returncode == 0, evaluated.stderr
  assert f"step time {report['step_time_us'] / 1e3:,.3f} ms" in evaluated.stdout
  result = json.loads(json_out.read_text())
  assert result["step_time_us"] == pytest.approx(report["step_time_us"],
                                                 rel=1e-12)
  assert (result["graph"], result["topology"]) == ("layered_200", "p100x4")
  assert result["valid"] and result["reason"] is None
  assert result["lower_bound_us"] == pytest.approx(report["lower_bound_us"])
  assert result["transfer_bytes"] == report["transfer_bytes"] > 0
  devices = result["devices"]
  assert [d["name"] for d in devices] == report["devices"]
  assert [d["busy_us"] for d in devices] == pytest.approx(report["busy_us"])
  assert [d["peak_memory_bytes"] for d in devices] == report[
      "peak_memory_bytes"]
  assert all(d["memory_bytes"] >= d["peak_memory_bytes"] for d in devices)
  assert sum(d["ops"] for d in devices) == 200
  assert (sum(d["bytes_sent"] for d in devices) ==
          sum(d["bytes_received"] for d in devices) == result["transfer_bytes"])
  assert result["critical_path_valid"]
  assert (result["lower_bound_us"] <= result["critical_path_step_time_us"]
          < 1.5 * result["step_time_us"])
  assert "in critical-path order" in evaluated.stdout
  # A baseline by name: the placement `place` compared with.
  single = _cli("evaluate", "--graph=layered:200", "--placement=single_device",
                "--devices=p100x4", f"--json_out={tmp_path / 'single.json'}")
  assert single.returncode == 0, single.stderr
  assert json.loads((tmp_path / "single.json").read_text())[
      "step_time_us"] == pytest.approx(
          report["compared"]["single_device"]["step_time_us"], rel=1e-12)
  # Bad input: one line, exit 2, no JSON written.
  document = json.loads(placement.read_text())
  document["placement"][next(iter(document["placement"]))] = "/device:GPU:9"
  elsewhere = tmp_path / "elsewhere.json"
  elsewhere.write_text(json.dumps(document))
  bad_out = tmp_path / "bad.json"
  for args, message in [
      ([f"--placement={tmp_path / 'missing.json'}"], "no such placement file"),
      (["--graph=layered:100", f"--placement={placement}"],
       "does not match graph 'layered_100'"),
      ([f"--placement={elsewhere}"],
       "places ops on '/device:GPU:9', which topology 'p100x4' does not have"),
      (["--placement=single_device"], "a baseline needs --devices"),
      ([f"--placement={placement}", "--devices=tpu9000"],
       "unknown devices 'tpu9000'")]:
    if not any(a.startswith("--graph=") for a in args):
      args = ["--graph=layered:200"] + args
    _assert_bad_input(_cli("evaluate", *args, f"--json_out={bad_out}"),
                      message)
  assert not bad_out.exists()


def test_imports_are_frozen_and_collection_comes_back_after_a_failed_one():
  import gc  # pylint: disable=g-import-not-at-top
  from tf_gdp.cli import main  # pylint: disable=g-import-not-at-top
  try:
    with pytest.raises(ImportError):
      with main.imports_frozen():
        assert not gc.isenabled()
        made_inside = [[] for _ in range(1000)]
        import tf_gdp.no_such_module  # pylint: disable=g-import-not-at-top,unused-import
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(made_inside)
  finally:
    gc.unfreeze()
