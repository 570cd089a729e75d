"""The Triton MaxSim kernel against the einsum reference.

Without CUDA the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``, which must be set before
Triton is imported, hence a subprocess) on CPU tensors, so the same kernel code is checked on every
machine; the compiled-GPU test skips cleanly without CUDA. Tolerances: 1e-4·d absolute in the
interpreter (fp32 accumulation of fp16/bf16 products), 2e-2·√d on a GPU (tf32 / tensor cores).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from unreal_demo.core.maxsim import maxsim_reference, normalize_chunks

pytest.importorskip("triton")

CASES = [  # (B, G, d, M, L_p, dtype): ragged sizes, G not a power of two, d not a multiple of the block
    (1, 4, 64, 100, 7, "float32"),
    (2, 3, 50, 77, 5, "float16"),
    (3, 8, 96, 1, 1, "float16"),
    (1, 1, 130, 65, 2, "bfloat16"),
    (16, 4, 64, 130, 7, "float16"),  # a batch: 16 queries share one read of each key block
    (40, 3, 50, 33, 3, "float32"),  # more queries than one program holds (21 per tile): two tiles
]

INTERPRETED = [c for c in CASES if c[-1] != "bfloat16"]  # the interpreter computes with NumPy: no bf16

SCRIPT = f"""
import torch
from unreal_demo.core.maxsim import inverse_norms, maxsim_reference, normalize_chunks
from unreal_demo.core.maxsim_triton import maxsim_scores

for b, g, d, m, lp, name in {INTERPRETED!r}:
    dtype = getattr(torch, name)
    gen = torch.Generator().manual_seed(m)
    q, k = torch.randn(b, g, d, generator=gen), torch.randn(m, lp, d, generator=gen).to(dtype)
    got = maxsim_scores(q, k)
    assert got.shape == (b, m) and got.dtype == torch.float32
    torch.testing.assert_close(got, maxsim_reference(q.to(dtype).float(), k.float()), atol=1e-4 * d, rtol=1e-4)
    got = maxsim_scores(q, k, inverse_norms(k))  # a normalised scan: 1/‖k‖ inside the kernel
    torch.testing.assert_close(got, maxsim_reference(q.to(dtype).float(), normalize_chunks(k.float())),
                               atol=1e-4 * d, rtol=1e-3)
assert maxsim_scores(torch.randn(1, 4, 8), torch.zeros(0, 7, 8)).shape == (1, 0)
assert maxsim_scores(torch.randn(0, 4, 8), torch.zeros(5, 7, 8)).shape == (0, 5)
print("ok", len({INTERPRETED!r}))
"""


def test_interpreted_kernel_equals_reference():
    env = os.environ | {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == f"ok {len(INTERPRETED)}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("b,g,d,m,lp,name", CASES)
def test_gpu_kernel_equals_reference(b, g, d, m, lp, name):
    from unreal_demo.core.maxsim import maxsim

    dtype = getattr(torch, name)
    q, k = torch.randn(b, g, d, device="cuda"), torch.randn(m, lp, d, device="cuda").to(dtype)
    torch.testing.assert_close(maxsim(q, k), maxsim_reference(q.to(dtype).float(), k.float()),
                               atol=2e-2 * d ** 0.5, rtol=1e-2)
    torch.testing.assert_close(maxsim(q, k, normalize=True),
                               maxsim_reference(q.to(dtype).float(), normalize_chunks(k.float())), atol=2e-2, rtol=1e-2)
