"""The pytest side: options, command line, markers, items, session hooks, JUnit properties, the end-of-session summary."""
