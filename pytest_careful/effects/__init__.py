"""Effect declarations: what each function does, inferred by state diff, the destructive boundary."""
