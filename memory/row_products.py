"""Matrix-vector products of ranking, kept on the calling thread.

numpy's wheels ship OpenBLAS, which splits a float32 matrix-vector product over its threads
once the matrix holds about 460,000 values (1,200 rows of 384). On a 2-core host that
shares its cores, waking the other thread cost far more than the product: a chat's 3,000
recent vectors took 22 ms (p50, other work between the calls) where one thread takes
0.3 ms, and `mnemo bench memory`'s hybrid query after a burst of new memories took twice a
plain one's time. `row_products` takes the product in blocks of `block_rows(width)` rows,
each below that size: one thread, and the bits one thread gives for the whole matrix. A
block starts on a multiple of 64 rows, so the kernel groups the rows as it would unblocked,
and the last one takes up to `TAIL_ROWS` more rather than leave a few rows alone (a lone
row goes to another kernel, with other bits).
"""

from __future__ import annotations

from typing import Any

import numpy as np

BLOCK_VALUES = 350_000  # a block's values, at most: OpenBLAS threads from ~460,000 ...
TAIL_ROWS = 64  # ... also with the last block's extra rows (896 + 64 rows of 384 dimensions)


def block_rows(width: int) -> int:
    """Rows of a block of vectors of `width` dimensions: a multiple of 64."""
    return max(64, BLOCK_VALUES // max(width, 1) // 64 * 64)


def row_products(matrix: Any, vector: Any) -> Any:
    """`matrix @ vector` (2-D by 1-D), block by block on this thread."""
    rows, block = len(matrix), block_rows(int(matrix.shape[1]))
    if rows <= block + TAIL_ROWS:
        return matrix @ vector
    products = np.empty(rows, np.result_type(matrix.dtype, vector.dtype))
    start = 0
    while start < rows:
        end = rows if rows - start <= block + TAIL_ROWS else start + block
        np.matmul(matrix[start:end], vector, out=products[start:end])
        start = end
    return products
