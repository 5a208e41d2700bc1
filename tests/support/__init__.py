"""Shared test machinery (importable as `support` through pytest's pythonpath)."""

import atexit
import os
import shutil
import tempfile

# Compiled Hyperscan databases go to this test run's own cache, never the
# user's; set before anything imports `spillvault.adapters`, which reads it.
if "SPILLVAULT_CACHE" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="spillvault-test-cache-")
    os.environ["SPILLVAULT_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
