"""Atomic writes: a failed write leaves neither a partial file nor a temporary one."""

import json

import pytest

from gpstudy.io import atomic_path, write_json


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "out" / "result.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert list(target.parent.iterdir()) == []


def test_failed_write_keeps_the_previous_file(tmp_path):
    target = tmp_path / "result.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("{")
            raise RuntimeError("killed")
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
