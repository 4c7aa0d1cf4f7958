"""The manual's shell blocks (README.md, docs/**/*.md) are tests, marked `docs`: Sybil parses
the pages, tests/support/docs.py runs their blocks."""

from tests.support.docs import ROOT, manual_hooks

pytest_collect_file, pytest_runtest_makereport = manual_hooks(ROOT)
