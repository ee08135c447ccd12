"""Atomic writes: whole files only, with ordinary permissions."""

import os
import stat

from tf_gdp import fileio


def test_write_replaces_whole_file_with_umask_permissions(tmp_path):
  path = tmp_path / "out.json"
  path.write_text("old")
  previous = os.umask(0o022)
  try:
    fileio.write_atomically(str(path), "new")
  finally:
    os.umask(previous)
  assert path.read_text() == "new"
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # not mkstemp's 0600
  assert os.listdir(tmp_path) == ["out.json"]  # no temp file left
