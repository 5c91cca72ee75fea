"""Where model output comes from: the references, a logged run (live runs: pytest_careful.live)."""
