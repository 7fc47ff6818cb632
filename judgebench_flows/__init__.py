"""judgebench-flows: Prefect flows that benchmark LLM judges on JudgeBench."""

__version__ = "0.1.0"
