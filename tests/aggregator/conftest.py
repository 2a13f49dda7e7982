"""Makes this folder's helper module (streaming_input) importable under pytest's importlib mode."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
