"""The v2 produce answer's fast path says exactly what the general encoding says."""

import orjson
from hypothesis import given
from hypothesis import strategies as st

from laketail.api.routes.produce import _dense_v2_answer


@given(st.integers(0, 10_000), st.integers(0, 2**62), st.integers(1, 300))
def test_dense_answer_is_the_general_answer(partition: int, base: int, count: int) -> None:
    general = {
        "key_schema_id": None,
        "value_schema_id": None,
        "offsets": [
            {"partition": partition, "offset": base + i, "error_code": None, "error": None}
            for i in range(count)
        ],
    }
    assert orjson.loads(_dense_v2_answer(partition, base, count)) == general
