"""`row_products`: ranking's matrix-vector products on the calling thread, block by block,
with the bits one BLAS thread gives for the whole matrix."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits  # with scikit-learn, under sentence-transformers

from memory.recent_vectors import RecentVectors
from memory.row_products import TAIL_ROWS, block_rows, row_products

BLOCK_ROWS = block_rows(384)


def test_blocks_give_the_one_thread_products_bit_for_bit() -> None:
    assert BLOCK_ROWS == 896 and block_rows(768) == 448 and block_rows(100_000) == 64
    assert all((block_rows(w) + TAIL_ROWS) * w < 460_000 for w in (128, 384, 768, 1024, 1536))
    rng = np.random.default_rng(11)
    vector = rng.normal(size=384).astype(np.float32)
    sizes = [0, 1, 63, BLOCK_ROWS, BLOCK_ROWS + 1, BLOCK_ROWS + TAIL_ROWS + 1, 2 * BLOCK_ROWS + 1]
    for rows in [*sizes, 3 * BLOCK_ROWS + 517, 4 * BLOCK_ROWS + TAIL_ROWS + 3]:
        matrix = rng.normal(size=(rows, 384)).astype(np.float32)
        with threadpool_limits(1, "blas"):
            expected = matrix @ vector
        found = row_products(matrix, vector)
        assert found.dtype == np.float32 and found.shape == (rows,)
        assert np.array_equal(found, expected), rows
    strided = rng.normal(size=(2 * BLOCK_ROWS + 9, 384)).astype(np.float32)[::2]  # a view
    with threadpool_limits(1, "blas"):
        assert np.array_equal(row_products(strided, vector), strided @ vector)


def test_thousands_of_recent_vectors_are_scored_without_blas_threads() -> None:
    """A chat's recent block grows to thousands of rows between merges: it is scored as one
    BLAS thread scores it."""
    rng = np.random.default_rng(12)
    matrix = rng.normal(size=(4 * BLOCK_ROWS, 384)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ids = np.arange(1, len(matrix) + 1, dtype=np.int64)
    recent = RecentVectors().changed(ids, matrix, set())
    vector = matrix[5]
    with threadpool_limits(1, "blas"):
        expected = matrix @ vector
    found_ids, sims = recent.similarities(vector)
    assert np.array_equal(found_ids, ids) and np.array_equal(sims, expected)
    assert int(np.argmax(sims)) == 5
