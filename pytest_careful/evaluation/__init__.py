"""Replay of decoded calls and BFCL's verdict on it."""
