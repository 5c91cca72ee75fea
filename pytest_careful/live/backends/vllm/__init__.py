"""A local model on vLLM: the adapter of the ``vllm`` backend.

* :mod:`.server`: the vLLM server the session starts, or the one it is pointed at, and its log;
* :mod:`.client`: each process's handler, pointed at its server;
* :mod:`.fleet`: several servers used as one (which server each conversation goes to, the ledger),
  :mod:`.fleet_client` its wiring into each process's handler;
* :mod:`.metrics`: what a server's ``/metrics`` says it runs;
* :mod:`.tokens`: BFCL's tokenizer, which sizes each request;
* :mod:`.hub`: the model's files, fetched from a Hugging Face hub.
"""
