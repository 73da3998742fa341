"""pytest set-up for tccl's Python tests.

The package under test is the one built by CMake: <build>/python (CTest puts it on
PYTHONPATH; by hand: PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # ranks.py

try:
    import tccl  # noqa: F401
except ImportError as e:  # pragma: no cover - set-up error, not a test failure
    raise SystemExit(
        "tccl's Python tests need the built package on PYTHONPATH, e.g.\n"
        "  PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python\n"
        f"({e})")
