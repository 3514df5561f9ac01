"""The unit level stays unit: the socket guard of tests/unit/conftest.py refuses the network, and
no unit test module imports moto (checked in a fresh interpreter, where nothing else loaded it).

boto3 and its clients are fine here (creating a client opens no connection); so is opslake_local
as long as the modules imported stop short of the stack, which imports moto.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import SocketBlocked

ROOT = Path(__file__).resolve().parents[2]
UNIT = Path(__file__).resolve().parent

# Imports every module of tests/unit by its package name, one after the other, and names the
# module whose import first loaded moto.
PROBE = """
import importlib, json, pkgutil, sys
sys.path.insert(0, sys.argv[1])
import tests.unit
names = sorted(m.name for m in pkgutil.walk_packages(tests.unit.__path__, "tests.unit.") if not m.ispkg)
culprits = []
for name in names:
    importlib.import_module(name)
    if "moto" in sys.modules and not culprits:
        culprits.append(name)
print(json.dumps({"imported": names, "moto_imported_by": culprits}))
"""


def test_the_guard_refuses_connect_and_bind() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(SocketBlocked, match="unit tests open no sockets"):
            sock.connect(("127.0.0.1", 9))
        with pytest.raises(SocketBlocked):
            sock.connect_ex(("127.0.0.1", 9))
        with pytest.raises(SocketBlocked):
            sock.bind(("127.0.0.1", 0))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, pytest.raises(SocketBlocked):
        udp.sendto(b"x", ("127.0.0.1", 9))


def test_no_unit_module_imports_moto() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    expected = sorted(
        "tests.unit." + ".".join(p.relative_to(UNIT).with_suffix("").parts)
        for p in UNIT.rglob("*.py")
        if p.stem != "__init__"
    )
    assert found["imported"] == expected  # every module was checked, not an empty list
    assert found["moto_imported_by"] == [], "unit tests import no moto: move the test to tests/integration"
