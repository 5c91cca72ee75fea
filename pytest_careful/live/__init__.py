"""Live model runs: BFCL's own multi-turn inference loop, driven per pytest item.

* :mod:`.bridge` puts each conversation's own simulators behind the loop's
  executor call (bfcl-eval's keeps instances in module globals and ``eval``s);
* :mod:`.confirm` patches the loop's two exit points for the confirm protocol;
* :mod:`.runner` runs one conversation and writes its BFCL result entry;
* :mod:`.source` runs the model for each item; :mod:`.filing`, where its results are filed
  and what is filed; :mod:`.stops`, the marks that stop a run in every process;
* :mod:`.handles` turns ``--careful-model`` into a handler;
* :mod:`.progress`: the run's progress line, what it says and when (the harness shows it);
* :mod:`.backends`: the model backends behind one protocol (:mod:`.backends.registry`), each
  adapter in a package of its own: :mod:`.backends.vllm` (the server, each process's client,
  several servers used as one), :mod:`.backends.claude` (the client, the spend guard, the API
  concurrency every xdist worker of a run shares), :mod:`.backends.scripted`;
* :mod:`.faults`: a server's faults told from the model's answers, each request bounded in time.
"""
