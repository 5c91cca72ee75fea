"""Command-line tools: careful-declare."""
