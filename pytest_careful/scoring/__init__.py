"""Effect-aware rules, per-turn credit and readable evidence."""
