"""Safe decoding and execution: BFCL's decoders without eval, the call interpreter, the simulators, pristine process state, snapshots, walks and budgets."""
