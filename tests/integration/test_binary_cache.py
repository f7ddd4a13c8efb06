"""autotuner.launch.binary_cache with Triton's real compiler: no GPU is needed to compile a kernel for a named target, so
each step compiles for sm_90 on the CPU in a process of its own (tests/support/compile_probe.py), as launching processes
do, and these check what a later process loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import triton

from autotuner.launch import binary_cache

ROOT = Path(__file__).resolve().parents[2]
KERNEL = """
import triton.language as tl
from triton.runtime.jit import JITFunction as jit


@jit
def scale(x):
    return x * {factor}


@jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, scale(tl.load(x_ptr + i, mask=i < n)), mask=i < n)
"""


def kernel_file(tmp_path: Path, name: str, factor: int = 2) -> Path:
    path = tmp_path / name / "kernel.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(KERNEL.format(factor=factor))
    return path


def probe(kept: Path, kernel: Path, block: int = 128, warps: int = 4, *flags: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "compile_probe.py"), str(kept), str(kernel), str(block),
                          str(warps), *flags], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_kept_kernel_is_loaded_in_another_process_without_compiling_and_equals_tritons(tmp_path):
    kernel = kernel_file(tmp_path, "a")
    first = probe(tmp_path / "kept", kernel)
    assert first["calls"] == 1
    entries = list((tmp_path / "kept").glob("*/*/entry.json"))
    assert len(entries) == 1

    again = probe(tmp_path / "kept", kernel)
    assert again["calls"] == 0
    for field in ("hash", "name", "cubin", "ptx", "metadata"):
        assert again[field] == first[field], field
    # the same text in another file is the same kernel; nothing is kept with the kept binaries switched off
    assert probe(tmp_path / "kept", kernel_file(tmp_path, "b"))["calls"] == 0
    assert probe(tmp_path / "kept", kernel, 128, 4, "off")["calls"] == 1


def test_what_changes_the_binary_changes_the_key(tmp_path):
    kept, kernel = tmp_path / "kept", kernel_file(tmp_path, "a")
    base = probe(kept, kernel)
    other_block, other_warps = probe(kept, kernel, 256), probe(kept, kernel, 128, 8)
    # a JIT function the kernel calls changes: the kernel's own text is the same, its binary is not
    other_callee = probe(kept, kernel_file(tmp_path, "c", factor=3))
    for changed in (other_block, other_warps, other_callee):
        assert changed["calls"] == 1 and changed["cubin"] != base["cubin"]
    assert len(list(kept.glob("*/*/entry.json"))) == 4


def test_a_damaged_entry_is_dropped_and_kept_again(tmp_path):
    kept, kernel = tmp_path / "kept", kernel_file(tmp_path, "a")
    first = probe(kept, kernel)
    entry = next(kept.glob("*/*/entry.json")).parent
    binary = entry / f"{first['name']}.cubin"
    for damage in (binary.unlink, lambda: binary.write_bytes(b"\x00" * 64)):  # gone; truncated
        contents = binary.read_bytes()
        binary.unlink()  # a hard link into Triton's cache: written anew, not through
        binary.write_bytes(contents)
        damage()
        again = probe(kept, kernel)
        assert again["calls"] == 1 and again["cubin"] == first["cubin"]
        assert binary.exists()
        assert probe(kept, kernel)["calls"] == 0


def test_a_compile_asked_as_async_compile_mode_asks_is_kept_too(tmp_path):
    """install() compiles a kernel's configs ahead on threads (Triton's AsyncCompileMode), whose compile call also
    hands over Triton's cache-invalidating variables: those binaries are kept, and loaded by the next process."""
    kept, kernel = tmp_path / "kept", kernel_file(tmp_path, "a")
    first = probe(kept, kernel, 128, 4, "async")
    assert first["calls"] == 1
    again = probe(kept, kernel, 128, 4)
    assert again["calls"] == 0 and again["cubin"] == first["cubin"]


def test_a_folder_that_cannot_be_written_keeps_nothing_and_compiles(tmp_path):
    blocker = tmp_path / "a file, not a folder"
    blocker.write_text("")
    kernel = kernel_file(tmp_path, "a")
    for _ in range(2):
        assert probe(blocker / "kept", kernel)["calls"] == 1


def test_asked_to_recompile_goes_to_triton(tmp_path):
    kept, kernel = tmp_path / "kept", kernel_file(tmp_path, "a")
    probe(kept, kernel)
    assert probe(kept, kernel, 128, 4, "always_compile")["calls"] == 1


def test_a_failing_directory_lookup_still_compiles():
    def broken():
        raise ValueError("bad settings")

    calls = []
    src = object()  # never looked at: the wrapper goes straight to Triton's compile
    out = binary_cache.cached_compile(lambda *a, **k: calls.append(1) or "compiled", broken)(src, target="t")
    assert out == "compiled" and calls == [1]


def test_install_wraps_the_compile_of_each_device_cache():
    from triton.runtime.jit import JITFunction

    def kernel(x):
        return x

    fn = JITFunction(kernel)

    def create_binder():  # what JITFunction.create_binder does to `compile`, without a GPU to ask for a target
        fn.compile = triton.compile
        return {}, {}, None, None, None

    fn.device_caches.default_factory = create_binder
    assert binary_cache.install(fn, lambda: None)
    fn.device_caches[0]
    assert getattr(fn.compile, "_autotuner_kept", False)
    fn.device_caches[1]  # a second device's cache: Triton's compile wrapped again, never the wrapper twice
    assert [c.cell_contents for c in fn.compile.__closure__ if c.cell_contents is triton.compile]
    factory = fn.device_caches.default_factory
    assert binary_cache.install(fn, lambda: None) and fn.device_caches.default_factory is factory  # once only
    assert not binary_cache.install(object(), lambda: None)
