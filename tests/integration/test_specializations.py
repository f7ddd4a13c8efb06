"""autotuner.launch.specializations against Triton's own binder: a kept specialization replays exactly what Triton's
binder gives for the same call, is never used for a call Triton would specialize otherwise, and spares a new
process Triton's native specialization (whose first use imports gluon). No GPU is needed: the binder is Triton's
real one, made for its base backend as `triton.runtime.jit.mangle_type` does, and called on CPU tensors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autotuner.launch import specializations

ROOT = Path(__file__).resolve().parents[2]
KERNEL = '''
import triton.language as tl
from triton.runtime.jit import JITFunction


def kernel(x_ptr, y_ptr: "const *fp32", n, m, scale, flag, maybe, s2: tl.int64, BLOCK: tl.constexpr,
           ACT: tl.constexpr = "relu"):
    pass


kernel = JITFunction(kernel, do_not_specialize=["m"])
'''


@pytest.fixture(autouse=True)
def replays(monkeypatch):
    """Each test starts with a new process's replay budget (and leaves the suite's process as it was)."""
    monkeypatch.setattr(specializations, "_replays_left", specializations.REPLAYS)
    monkeypatch.setattr(specializations, "_native_used", specializations._native_used)


@pytest.fixture
def kernel_module(tmp_path):
    """The kernel in a file of its own (Triton reads a JIT function's source)."""
    import importlib.util

    path = tmp_path / "spec_kernel.py"
    path.write_text(KERNEL)
    spec = importlib.util.spec_from_file_location("spec_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def native_binder(fn):
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import create_function_from_signature

    return create_function_from_signature(fn.signature, fn.params, BaseBackend)


def kept(fn, directory):
    return specializations.KeptSpecializations(fn, native_binder(fn), "identity", lambda: directory)


def same(a, b):
    """Two binder answers are equal: the same bound arguments (tensors by identity), specialization and options."""
    (pa, sa, oa), (pb, sb, ob) = a, b
    assert list(pa) == list(pb)
    assert all(pa[k] is pb[k] if isinstance(pa[k], torch.Tensor) else pa[k] == pb[k] and type(pa[k]) is type(pb[k])
               for k in pa)
    assert sa == sb and [type(e) for e in sa] == [type(e) for e in sb]
    assert oa == ob


x = torch.zeros(64)
CALLS = [
    ((x, x, 1, 32, 0.5, True, None, 16, 128), {"num_warps": 4}),
    ((x, x[1:], 2**40, 17, 1, False, 3, 7), {"BLOCK": 64, "ACT": "gelu", "num_stages": 2}),  # unaligned, i64
    ((x[4:], x, 16, 16, 2.0, True, 0, 2**33), {"BLOCK": 32}),
    ((x, x), {"n": 48, "m": 1, "scale": 1.0, "flag": 1, "maybe": None, "s2": 48, "BLOCK": 16}),  # by name
]


@pytest.mark.parametrize("call", range(len(CALLS)))
def test_a_kept_specialization_replays_tritons_binder_exactly(kernel_module, tmp_path, monkeypatch, call):
    args, kwargs = CALLS[call]
    fn = kernel_module.kernel
    kept(fn, tmp_path).remember(args, kwargs)
    assert len(list(tmp_path.glob("specializations/*/*.json"))) == 1

    monkeypatch.setattr(specializations, "_native_used", False)  # a new process: Triton's binder not yet run
    fresh = kept(fn, tmp_path)
    replayed = fresh(*args, **kwargs)
    assert not specializations._native_used, "the kept entry was not used"
    same(replayed, native_binder(fn)(*args, **kwargs))


def test_a_call_triton_would_specialize_otherwise_goes_to_triton(kernel_module, tmp_path, monkeypatch):
    fn = kernel_module.kernel
    base = (x, x, 16, 32, 0.5, True, None, 16, 128)
    kept(fn, tmp_path).remember(base, {})
    others = [
        (x, x[1:], *base[2:]),  # alignment
        (x.half(), *base[1:]),  # dtype
        (x, x, 17, *base[3:]),  # divisibility
        (x, x, 1, *base[3:]),  # one
        (x, x, 2**40, *base[3:]),  # width
        (x, x, 16, 32, 1, *base[5:]),  # an int where a float was (1 becomes a constexpr)
        (x, x, 16, 32, 0.5, True, 5, *base[7:]),  # a value where None was
    ]
    for args in others:
        monkeypatch.setattr(specializations, "_native_used", False)
        out = kept(fn, tmp_path)(*args)
        assert specializations._native_used, args
        same(out, native_binder(fn)(*args))


def test_a_damaged_or_foreign_entry_goes_to_triton_and_is_kept_again(kernel_module, tmp_path, monkeypatch):
    fn = kernel_module.kernel
    args = (x, x, 16, 32, 0.5, True, None, 16, 128)
    kept(fn, tmp_path).remember(args, {})
    (path,) = tmp_path.glob("specializations/*/*.json")
    good = json.loads(path.read_text())
    wrong_shape = {**good, "entries": [["*fp32", 16], *good["entries"][1:]]}  # an attribute that is no string
    for text in ("{not json", json.dumps({"key": [["int", 3]], "entries": []}), json.dumps(wrong_shape)):
        path.write_text(text)
        monkeypatch.setattr(specializations, "_native_used", False)
        binder = kept(fn, tmp_path)
        same(binder(*args), native_binder(fn)(*args))
        assert specializations._native_used
        binder.remember(args, {})  # what a Launcher does next: Triton's answer kept again
        assert json.loads(path.read_text()) == good


def test_a_process_keeps_a_few_calls_per_kernel(kernel_module, tmp_path):
    binder = kept(kernel_module.kernel, tmp_path)
    for n in range(specializations.REMEMBERED + 5):
        binder.remember((x, x, 1000 + n, 32, 0.5, True, None, 16, 128), {})
    assert len(list(tmp_path.glob("specializations/*/*.json"))) == specializations.REMEMBERED


def test_what_cannot_be_keyed_keeps_nothing_and_goes_to_triton(kernel_module, tmp_path, monkeypatch):
    fn = kernel_module.kernel

    class Pointer:  # an argument of a type this module does not key: Triton's binder answers
        dtype = torch.float32

        def data_ptr(self):
            return 0

    args = (Pointer(), x, 16, 32, 0.5, True, None, 16, 128)
    kept(fn, tmp_path).remember(args, {})
    # Triton specializes an annotated integer equal to 1 as ("i64", 1): an entry of a shape not kept
    kept(fn, tmp_path).remember((x, *args[1:7], 1, 128), {})
    assert not list(tmp_path.glob("specializations/*/*.json"))
    monkeypatch.setattr(specializations, "_native_used", False)
    out = kept(fn, tmp_path)(*args)
    assert specializations._native_used and out[1] == native_binder(fn)(*args)[1]
    kept(fn, None).remember((x, *args[1:]), {})  # kept kernels off: nothing written, nothing raised
    bad = kept(fn, tmp_path)
    with pytest.raises(TypeError):  # a wrong call gets Triton's own error
        bad(x)


def test_triton_binders_answer_after_its_first_call(kernel_module, tmp_path, monkeypatch):
    fn = kernel_module.kernel
    args = (x, x, 16, 32, 0.5, True, None, 16, 128)
    kept(fn, tmp_path).remember(args, {})
    calls = []
    native = native_binder(fn)

    def counting(*a, **k):
        calls.append(1)
        return native(*a, **k)

    monkeypatch.setattr(specializations, "_native_used", False)
    binder = specializations.KeptSpecializations(fn, counting, "identity", lambda: tmp_path)
    binder(*args)
    assert calls == []
    binder(x, x, 17, *args[3:])  # not kept: Triton's binder, which is now loaded
    binder(*args)  # kept, but Triton's binder is faster once loaded
    assert calls == [1, 1]


def test_a_process_replays_a_bounded_number_of_calls(kernel_module, tmp_path, monkeypatch):
    fn = kernel_module.kernel
    args = (x, x, 16, 32, 0.5, True, None, 16, 128)
    kept(fn, tmp_path).remember(args, {})
    monkeypatch.setattr(specializations, "_native_used", False)
    monkeypatch.setattr(specializations, "_replays_left", 3)
    binder = kept(fn, tmp_path)
    for _ in range(3):
        binder(*args)
    assert not specializations._native_used
    binder(*args)  # a launch path that binds every call: Triton's binder from now on
    assert specializations._native_used


def test_the_identity_and_declaration_are_in_the_key(kernel_module, tmp_path, monkeypatch):
    fn = kernel_module.kernel
    args = (x, x, 16, 32, 0.5, True, None, 16, 128)
    kept(fn, tmp_path).remember(args, {})
    monkeypatch.setattr(specializations, "_native_used", False)
    other = specializations.KeptSpecializations(fn, native_binder(fn), "another Triton", lambda: tmp_path)
    other(*args)
    assert specializations._native_used


PROCESS = """
import json, sys
import torch
sys.path.insert(0, sys.argv[2])
import spec_kernel
from autotuner.launch import specializations
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import create_function_from_signature

fn = spec_kernel.kernel
native = create_function_from_signature(fn.signature, fn.params, BaseBackend)
binder = specializations.wrap(fn, native, "identity", lambda: __import__("pathlib").Path(sys.argv[1]))
x = torch.zeros(64)
args = (x, x[1:], 2**40, 17, 1, False, 3, 7)
if sys.argv[3] == "remember":
    binder(*args, BLOCK=64)
    binder.remember(args, {"BLOCK": 64})
    print(json.dumps({"gluon": "triton.experimental.gluon" in sys.modules}))
else:
    replayed = binder(*args, BLOCK=64)
    gluon = "triton.experimental.gluon" in sys.modules
    print(json.dumps({"gluon": gluon, "same": repr(replayed[1]) == repr(native(*args, BLOCK=64)[1])}))
"""


def test_a_new_process_replays_without_importing_gluon(tmp_path):
    (tmp_path / "spec_kernel.py").write_text(KERNEL)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}

    def run(step):
        out = subprocess.run([sys.executable, "-c", PROCESS, str(tmp_path / "kept"), str(tmp_path), step],
                             capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert run("remember")["gluon"]  # Triton's binder ran: its native specialization imported gluon
    assert run("replay") == {"gluon": False, "same": True}


DESCRIPTOR_KERNEL = '''
import triton.language as tl
from triton.runtime.jit import JITFunction


def kernel(desc, x_ptr, n, BLOCK: tl.constexpr):
    pass


kernel = JITFunction(kernel)
'''


def test_a_host_tensor_descriptor_is_keyed_by_all_it_holds(tmp_path, monkeypatch):
    """A TensorDescriptor argument (the Triton tutorial's fused attention passes four): its kept specialization
    replays Triton's binder exactly, and a descriptor that differs in anything it holds goes to Triton."""
    import importlib.util

    from triton.tools.tensor_descriptor import TensorDescriptor

    (tmp_path / "desc_kernel.py").write_text(DESCRIPTOR_KERNEL)
    spec = importlib.util.spec_from_file_location("desc_kernel", tmp_path / "desc_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn, h = module.kernel, torch.zeros(64, 64, dtype=torch.float16)

    def desc(base=h, block=(16, 32), shape=(64, 64), strides=(64, 1)):
        return TensorDescriptor(base, shape=list(shape), strides=list(strides), block_shape=list(block))

    args = (desc(), h, 64)
    kept(fn, tmp_path).remember(args, {"BLOCK": 128})
    assert len(list(tmp_path.glob("specializations/*/*.json"))) == 1
    monkeypatch.setattr(specializations, "_native_used", False)
    same(kept(fn, tmp_path)(*args, BLOCK=128), native_binder(fn)(*args, BLOCK=128))
    assert not specializations._native_used, "the kept entry was not used"
    for other in (desc(block=(32, 32)), desc(base=h.float()), desc(shape=(32, 64)), desc(strides=(128, 1))):
        monkeypatch.setattr(specializations, "_native_used", False)
        out = kept(fn, tmp_path)(other, h, 64, BLOCK=128)
        assert specializations._native_used, other
        same(out, native_binder(fn)(other, h, 64, BLOCK=128))
