"""Reading BFCL's data: the 800 conversations, result files (bfcl generate's JSONL), crash-safe result files of live runs, how a run was made."""
