"""A page number beyond the last (or beyond any database integer) shows the last page, on
both engines, instead of an error."""

from __future__ import annotations

import pytest

from tests.bots.web.conftest import ON_BOTH_ENGINES, Site

pytestmark = ON_BOTH_ENGINES


@pytest.mark.parametrize("page", ["999999999999999999", "99999999999999999999999", "0", "-3", "x"])
async def test_any_page_number_answers_a_page(site: Site, page: str) -> None:
    await site.login()
    chats = await site.client.get("/", params={"page": page})
    assert chats.status_code == 200, chats.text[:300]
    assert f'href="/chats/{site.ann.id}"' in chats.text  # the last (here: the only) page
    memories = await site.client.get(f"/chats/{site.ann.id}/memories", params={"page": page})
    assert memories.status_code == 200 and "my cat is called Miso" in memories.text
