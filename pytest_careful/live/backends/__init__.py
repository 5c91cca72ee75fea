"""The backends a live model runs on: the protocol they share and each one's adapter.

* :mod:`.registry`: the ``Backend`` protocol, the four backends (vllm, claude, api, scripted) and
  ``backend(kind)``, which the source, the handles and the flight ask;
* :mod:`.vllm`: a local model on vLLM (its server, each process's client, a fleet of servers,
  the tokenizer that sizes requests, the model files' fetch);
* :mod:`.claude`: Claude through bfcl-eval's handler (its client, the spend guard, the rate limit
  every xdist worker shares);
* :mod:`.scripted`: the deterministic test models (``scripted:NAME``).
"""
