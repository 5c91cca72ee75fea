"""Shared by every stage: the one import of bfcl-eval, text made safe to show, the paused garbage collector."""
