# The notebook-style example of docs/examples/ runs and writes its plot (docs/python.md).
import os
import subprocess
import sys

import pytest

from conftest import source_path


def test_predict_and_analyze_example(tmp_path):
    pytest.importorskip("matplotlib")
    script = source_path("docs", "examples", "predict_and_analyze.py")
    r = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True,
                       timeout=240, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    png = tmp_path / "sweep.png"
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 1000
    out = r.stdout
    assert "15 predictions" in out
    assert "exposed communication, share of busy time: measured " in out
    assert "all-reduce busbw in the trace: median " in out
