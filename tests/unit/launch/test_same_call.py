"""The check a kept launch is tried with before a call's key is built (autotuner.launch.same_call): it passes a call
like the one it was made from, turns away every difference the key would see, keeps no tensor, and is tried for the
hit that follows the last one: a hit that repeats, or the next of a cycle of calls in a fixed order."""

from __future__ import annotations

import gc
import weakref

import torch

from autotuner.launch import same_call


def test_a_like_call_passes_with_new_tensors():
    x, out = torch.randn(8, 32), torch.empty(8, 32)
    same = same_call.check((x, out, 8, 1.5, "tanh", None), {"BLOCK": 64, "EVEN": True})
    assert same((torch.randn(8, 32), torch.empty(8, 32), 8, 1.5, "tanh", None), {"BLOCK": 64, "EVEN": True})
    one = same_call.check((x,))
    assert one((torch.randn(8, 32),))


def test_every_difference_the_key_sees_is_turned_away():
    buf = torch.randn(8 * 32 + 4)
    x = buf[:256].view(8, 32)
    same = same_call.check((x, 1), {"BLOCK": 64})
    assert same((x, 1), {"BLOCK": 64})
    others = {
        "shape": ((torch.randn(4, 32), 1), {"BLOCK": 64}),
        "strides": ((torch.randn(32, 8).t(), 1), {"BLOCK": 64}),
        "dtype": ((torch.randn(8, 32, dtype=torch.float64), 1), {"BLOCK": 64}),
        "device": ((torch.empty(8, 32, device="meta"), 1), {"BLOCK": 64}),
        "16-byte alignment": ((buf[1:257].view(8, 32), 1), {"BLOCK": 64}),
        "requires_grad": ((torch.randn(8, 32, requires_grad=True), 1), {"BLOCK": 64}),
        "a value": ((x, 16), {"BLOCK": 64}),
        "an int as a float": ((x, 1.0), {"BLOCK": 64}),  # equal values Triton specializes apart
        "an int as a bool": ((x, True), {"BLOCK": 64}),
        "a tensor for an int": ((x, torch.ones(())), {"BLOCK": 64}),
        "a keyword's value": ((x, 1), {"BLOCK": 128}),
        "a keyword's type": ((x, 1), {"BLOCK": 64.0}),
        "a keyword more": ((x, 1), {"BLOCK": 64, "num_warps": 4}),
        "no keywords": ((x, 1), {}),
        "an argument more": ((x, 1, 1), {"BLOCK": 64}),
    }
    passed = [what for what, (a, kw) in others.items() if same(a, kw)]
    assert passed == []


def test_keywords_moved_between_names_are_another_call():
    x = torch.randn(16)
    same = same_call.check((x,), {"A": 1, "B": True})
    assert same((x,), {"A": 1, "B": True})
    # equal as dictionaries (True == 1), and the types in the same order, but each name's type changed
    assert not same((x,), {"B": 1, "A": True})


def test_tensors_given_by_name_are_checked_as_tensors():
    x, out = torch.randn(16), torch.empty(16)
    same = same_call.check((x,), {"out": out, "n": 16})
    assert same((torch.randn(16),), {"out": torch.empty(16), "n": 16})
    assert not same((x,), {"out": torch.empty(8), "n": 16})
    assert not same((x,), {"out": torch.empty(16, dtype=torch.float64), "n": 16})
    assert not same((x,), {"n": 16, "out": out})


def test_arguments_it_cannot_check_are_never_passed():
    x = torch.randn(16)
    for args, kwargs in [((1, 2), {}), ((x, [1, 2]), {}), ((x,), {"y": [1]}), ((x, object()), {})]:
        same = same_call.check(args, kwargs)
        assert same is same_call.never and not same(args, kwargs)


def test_a_check_keeps_no_tensor():
    x = torch.randn(8, 32)
    ref = weakref.ref(x)
    same = same_call.check((x, 3), {"BLOCK": 32})
    del x
    gc.collect()
    assert ref() is None and same((torch.randn(8, 32), 3), {"BLOCK": 32})


class _Hit(same_call.Followed):
    def __init__(self) -> None:
        super().__init__(same_call.check((torch.randn(4),)))


def _call(state: list, *hits: _Hit) -> list[bool]:
    """Calls of these hits' keys in turn, as a launch makes them: the hit `state` holds is tried first (its check
    passes for a call of its own key), else the key is looked up. Whether each call's tried hit was its own."""
    tried = []
    for hit in hits:
        tried.append(state[0] is hit)
        if state[0] is hit:
            if state[1] is not hit:
                same_call.passed(state, hit)
        else:
            same_call.follow(state, hit, state[0])
    return tried


def test_a_hit_found_twice_in_a_row_is_tried_first():
    a, b = _Hit(), _Hit()
    state: list = [None, None]
    assert _call(state, a, a, a, a) == [False, False, True, True]
    assert state == [a, a]
    assert _call(state, b) == [False]  # a's check turned b's call away; b was found by its key
    assert state == [None, b] and a.same is not same_call.never


def test_a_cycle_of_calls_is_tried_in_its_order_once_each_step_was_seen_twice():
    a, b, c = _Hit(), _Hit(), _Hit()
    state: list = [None, None]
    assert _call(state, a, b, c, a, b, c) == [False] * 6
    assert _call(state, a, b, c, a, b, c) == [False] + [True] * 5  # from the third a: b, c, a ... each tried
    assert state == [a, c] and a.sure and b.sure and c.sure


def test_calls_in_no_fixed_order_are_tried_only_where_one_followed_another_twice_in_a_row():
    a, b, c = _Hit(), _Hit(), _Hit()
    state: list = [None, None]
    tried = _call(state, a, b, a, c, a, b, a, c, a, b)  # a is followed by b and c in turn: a's successor never sure
    assert not any(t for t, hit in zip(tried, (a, b, a, c, a, b, a, c, a, b), strict=True) if hit is not a)
    assert not a.sure and b.sure and c.sure  # b and c were followed by a every time: a is tried after them
    assert _call(state, a) == [True]
    assert state == [None, a]  # after a: nothing sure


def test_a_hit_whose_check_turned_away_its_own_key_is_not_tried_again():
    a = _Hit()
    state: list = [None, None]
    same_call.follow(state, a, None)
    same_call.follow(state, a, None)
    assert state[0] is a
    same_call.follow(state, a, a)  # tried, turned the call away, and the key found a itself
    assert a.same is same_call.never and state[0] is None
    same_call.follow(state, a, None)
    assert state[0] is None
