# Shared fixtures of the Python module's tests (tests/python/CMakeLists.txt runs them through
# ctest with PYTHONPATH at build/python, COMMSCOPE_BIN at the built CLI and the source folder).
import json
import os
import subprocess

import pytest

SOURCE_DIR = os.environ.get(
    "COMMSCOPE_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def source_path(*parts):
    return os.path.join(SOURCE_DIR, *parts)


class Cli:
    """The built `commscope` program, run as a user would run it."""

    def __init__(self, path):
        self.path = path

    def run(self, *args):
        return subprocess.run([self.path, *args], capture_output=True, text=True, timeout=300)

    def json(self, *args):
        r = self.run(*args)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def error(self, *args):
        """The one line the CLI prints on stderr for bad arguments (exit status 2)."""
        r = self.run(*args)
        assert r.returncode == 2, (args, r.returncode, r.stdout, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("commscope: ")
        return lines[0][len("commscope: "):]


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("COMMSCOPE_BIN")
    if not path:
        pytest.skip("COMMSCOPE_BIN is not set (run through ctest)")
    return Cli(path)


@pytest.fixture(scope="session")
def commscope():
    import commscope as module
    return module
