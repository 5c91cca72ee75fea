"""Claude through bfcl-eval's own handler: the adapter of the ``claude`` backend.

* :mod:`.client`: the handler, with what stops real use fixed;
* :mod:`.budget`: the spend guard (``--careful-budget-usd``) and its prices (``prices.yaml``);
* :mod:`.ratelimit`: the API concurrency every xdist worker of a run shares.
"""
