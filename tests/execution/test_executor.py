"""The safe executor gives bfcl-eval's executor's result strings, call for call.

bfcl-eval's executor evals; it runs here only on the call strings below, which
the test wrote.
"""

from __future__ import annotations

import uuid

import pytest

from pytest_careful.data import dataset
from pytest_careful.execution.executor import Simulators, instance_name

CALLS = {
    "multi_turn_base_0": [  # GorillaFileSystem + TwitterAPI
        "ls(a=True)",
        "cd(folder='document')",
        "cd(folder=document)",
        "cd('temp')",
        "mkdir(dir_name='temp')",
        "mkdir(dir_name='temp')",
        "mkdir()",
        "mkdir(dir_name='a', mode=1)",
        "touch(file_name='x.txt')",
        "echo(content='run ls() then pwd() now', file_name='x.txt')",
        "cat(file_name='x.txt')",
        "wc(file_name='x.txt', mode='w')",
        "foo(bar=1)",
        "exit()",
        "ls(a=True, a=False)",
        "cd(folder='temp'",
        "mv(source='final_report.pdf', destination='temp')",
        "find(path='.', name='report')",
        "du(human_readable=True)",
        "rm(file_name='nope')",
        "post_tweet(content='hi', tags=['#a'], mentions=[])",
        "authenticate_twitter(username='u', password='p')",
        "tail(file_name='x.txt', lines=-1)",
        "sort(file_name='x.txt')",
        "pwd()",
        "[ls(), pwd()]",
        "7",
        "mkdir(dir_name='n' + 'ew')",
        "cp(source='x.txt', destination='y.txt', extra=ls())",
    ],
    "multi_turn_base_15": [  # GorillaFileSystem + MathAPI
        "mean(numbers=[1, 2, 3.5])",
        "logarithm(value=-1, base=10)",
        "add(a=1, b=-2)",
        "divide(a=1, b=0)",
        "square_root(number=16, precision=2)",
        "mean(numbers=[])",
        "logarithm(value=20, base=10, precision=2)",
        "square_root(number=2, precision=40)",
        "logarithm(value=7, base=2, precision=30)",
    ],
}


def _bfcl_results(conversation, calls, model_name):
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    results = []
    for call in calls:
        out, instances = multi_turn_utils.execute_multi_turn_func_call(
            [call],
            conversation.initial_config,
            list(conversation.involved_classes),
            model_name,
            conversation.id,
            long_context=conversation.long_context,
            is_evaL_run=True,
        )
        results.extend(out)
    state = {name: {k: v for k, v in vars(inst).items() if not k.startswith("_")} for name, inst in instances.items()}
    for name in [g for g in vars(multi_turn_utils) if g.startswith(model_name)]:
        delattr(multi_turn_utils, name)
    return results, state


@pytest.mark.parametrize("conversation_id", list(CALLS))
def test_results_and_state_equal_bfcl_executor(conversation_id):
    conversation = dataset.get(conversation_id)
    model_name = f"exec_{uuid.uuid4().hex[:8]}"
    theirs, their_state = _bfcl_results(conversation, CALLS[conversation_id], model_name)
    sim = Simulators(
        conversation.involved_classes,
        conversation.initial_config,
        conversation.long_context,
        model_name + "_eval",
        conversation.id,
    )
    ours = [sim.execute(call).result for call in CALLS[conversation_id]]
    assert ours == theirs
    our_state = {
        name: {k: v for k, v in vars(inst).items() if not k.startswith("_")} for name, inst in sim.instances.items()
    }
    assert our_state == their_state


def test_rewrite_quirk_inside_string_literals_is_bfcls():
    # bfcl rewrites `ls(` even inside a string literal; the written content shows it.
    conversation = dataset.get("multi_turn_base_0")
    sim = Simulators(conversation.involved_classes, conversation.initial_config, False, "m", conversation.id)
    sim.execute("touch(file_name='q.txt')")
    sim.execute("echo(content='ls() here', file_name='q.txt')")
    expected = instance_name("m", conversation.id, "GorillaFileSystem") + ".ls() here"
    assert expected in sim.execute("cat(file_name='q.txt')").result


def test_instances_are_per_object_not_global():
    conversation = dataset.get("multi_turn_base_0")
    a = Simulators(conversation.involved_classes, conversation.initial_config, False, "same", conversation.id)
    b = Simulators(conversation.involved_classes, conversation.initial_config, False, "same", conversation.id)
    a.execute("mkdir(dir_name='only_in_a')")
    assert "only_in_a" in a.execute("ls()").result
    assert "only_in_a" not in b.execute("ls()").result
    # and the dataset's initial config was not mutated through them
    assert "only_in_a" not in str(conversation.initial_config)


@pytest.mark.parametrize(
    "call, reason",
    [
        ("__import__('os').system('true')", "calling a Attribute"),
        ("ls().__class__", "Attribute expressions"),
        ("ls(a=[x for x in range(3)])", "ListComp"),
        ("ls(**{'a': True})", "keyword unpacking"),
        ("ls(*[True])", "starred"),
        ("mkdir(dir_name=f'{1}')", "JoinedStr"),
        ("mkdir(dir_name='x' * 10**9)", "too long"),
        ("mkdir(dir_name='x' * 1000000)", "too long"),
        ("ls(a=(lambda: 1)())", "calling a Lambda"),
    ],
)
def test_constructs_outside_the_language_are_refused(call, reason):
    conversation = dataset.get("multi_turn_base_0")
    sim = Simulators(conversation.involved_classes, conversation.initial_config, False)
    execution = sim.execute(call)
    assert execution.refused and not execution.invocations
    assert execution.result.startswith("Error during execution: careful:")
    assert reason in execution.result


def test_unbounded_math_is_refused_and_process_precision_restored():
    import decimal

    conversation = dataset.get("multi_turn_base_15")  # involves MathAPI
    sim = Simulators(conversation.involved_classes, conversation.initial_config, False)
    assert sim.execute("power(base=10, exponent=10000000)").refused
    assert sim.execute("logarithm(value=2, base=10, precision=200000)").refused
    before = decimal.getcontext().prec
    assert "Decimal('1')" in sim.execute("square_root(number=2, precision=1)").result
    assert decimal.getcontext().prec == before  # the simulator set it to 1 process-wide
    assert sim.execute("power(base=2, exponent=10)").result == '{"result": 1024}'


def test_deeply_nested_input_fails_the_call_without_raising():
    conversation = dataset.get("multi_turn_base_0")
    sim = Simulators(conversation.involved_classes, conversation.initial_config, False)
    for call in ["cd(folder=" + "-" * 500 + "1)", "ls(a=" + "[" * 5000 + "]" * 5000 + ")"]:
        execution = sim.execute(call)
        assert not execution.invocations and execution.result.startswith("Error during execution: ")
