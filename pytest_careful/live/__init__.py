"""Live model runs: BFCL's own multi-turn inference loop, driven per pytest item.

* :mod:`.bridge` puts each conversation's own simulators behind the loop's
  executor call (bfcl-eval's keeps instances in module globals and ``eval``s);
* :mod:`.confirm` patches the loop's two exit points for the confirm protocol;
* :mod:`.runner` runs one conversation and writes its BFCL result entry;
* :mod:`.source` runs the model for each item; :mod:`.filing`, where its results are filed
  and what is filed; :mod:`.stops`, the marks that stop a run in every process;
* :mod:`.handles` turns ``--careful-model`` into a handler;
* :mod:`.scripted`, :mod:`.claude`, :mod:`.vllm_server`, :mod:`.vllm_client`, :mod:`.budget`: the
  model backends and the spend guard; :mod:`.fleet` and :mod:`.vllm_fleet`, several vLLM
  servers used as one (each conversation on one of them);
* :mod:`.ratelimit`: the API concurrency every xdist worker of a run shares;
* :mod:`.faults`: a server's faults told from the model's answers, each request bounded in time.
"""
