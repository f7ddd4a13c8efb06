"""Every stored result of a built-in op is keyed by its kernel hash: a change that moves a hash makes every result of
that op in every user's database stale, to be tuned again. A result goes stale only when its kernel's binary or
launch would change, so the hashes are written down here and a change that moves one says so in this file."""

from __future__ import annotations

from autotuner.base.registry import get_op

# op -> kernel hash (search_spaces.contract.TunableOp.kernel_hash). Update an entry only together with a change to
# what that op's kernels compile to or how they are launched, and say in the commit that its results go stale.
PINNED = {
    "softmax": "9cdb1ef62c78fd39",  # SYNC=1: one word per chunk, a sense bit in place of a reset
    "layernorm": "2fee82ff9e977cf0",
    "gelu": "4a35b22f3d7c376d",
    "matmul": "22c7cd8ea1831bbf",  # the one-tile TMA kernel splits K (its arguments and binary changed)
    "attention": "e57829575e6ade2f",
}


def test_a_change_that_leaves_the_kernels_alone_leaves_their_results_exact():
    moved = {name: get_op(name).kernel_hash for name in PINNED if get_op(name).kernel_hash != PINNED[name]}
    assert moved == {}, (
        f"these ops' kernel hashes moved: {moved}. Every stored result of them would go stale and be tuned again. "
        "If their binaries or launches really changed, update PINNED; if not (launch plumbing, a helper added to a "
        "hashed module), move the change to a module their `sources` do not list (kernels/_direct.py, say)")
