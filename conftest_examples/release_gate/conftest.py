"""Release gate for a model team (see pytest.ini in this folder).

Add a paired comparison with the last released model by keeping its scorecard:

    pytest --careful-results=result/new --careful-decoder=Qwen/Qwen3-8B \
        --careful-baseline=released/scorecard.json --careful-fail-on-regression=0.05
"""
