"""The dashboard is closed by default: a token for every page, same-origin writes with the
session's CSRF token, nothing cached, one chat's pages never showing another's data."""

from __future__ import annotations

import pytest

from tests.bots.web.conftest import ON_BOTH_ENGINES, ORIGIN, TOKEN, Site


def pages_of(site: Site) -> list[str]:
    ann = site.ann.id
    memory = site.memory_id(site.ann, "Miso")
    return [
        "/",
        "/?q=ann",
        "/pictures",
        "/health",
        f"/chats/{ann}",
        f"/chats/{ann}/memories",
        f"/chats/{ann}/memories?q=what+is+my+cat+called",
        f"/chats/{ann}/memories?archived=1",
        f"/chats/{ann}/memories/{memory}",
        f"/chats/{ann}/notes",
        f"/chats/{ann}/strategies",
        f"/chats/{ann}/reflector",
        f"/chats/{ann}/subagents",
        f"/chats/{ann}/context",
    ]


async def test_every_page_wants_the_token(site: Site) -> None:
    for path in pages_of(site):
        answer = await site.client.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/login?next=")
        assert answer.headers["cache-control"] == "no-store"
    wrong = await site.client.get("/", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 303
    writes = await site.client.post(
        f"/chats/{site.ann.id}/notes", data={"content": "x"}, headers={"Origin": ORIGIN}
    )
    assert writes.status_code == 401
    assert site.keeper.files.read("chat", "terminal", "ann") == ""


async def test_login_sets_a_strict_httponly_cookie_and_every_page_answers(site: Site) -> None:
    refused = await site.client.post("/login", data={"token": "guess"}, headers={"Origin": ORIGIN})
    assert refused.status_code == 403 and "not the token of this dashboard" in refused.text
    assert "set-cookie" not in refused.headers
    answer = await site.client.post(
        "/login", data={"token": TOKEN, "next": "/health"}, headers={"Origin": ORIGIN}
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/health"
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    for path in pages_of(site):
        page = await site.client.get(path)
        assert page.status_code == 200, (path, page.text[:500])
        assert page.headers["cache-control"] == "no-store", path
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


async def test_a_bearer_token_opens_pages_without_a_session(site: Site) -> None:
    page = await site.client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert page.status_code == 200 and f'href="/chats/{site.ann.id}"' in page.text


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil"])
async def test_login_never_sends_you_off_the_site(site: Site, target: str) -> None:
    answer = await site.client.post(
        "/login", data={"token": TOKEN, "next": target}, headers={"Origin": ORIGIN}
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/"


async def test_a_login_from_another_site_is_refused(site: Site) -> None:
    answer = await site.client.post(
        "/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"}
    )
    assert answer.status_code == 403 and "set-cookie" not in answer.headers


async def test_writes_need_the_same_origin_and_the_sessions_csrf_token(site: Site) -> None:
    await site.login()
    memory = site.memory_id(site.ann, "Miso")
    path = f"/chats/{site.ann.id}/memories/{memory}/edit"
    data = {"content": "my cat is called Mochi", "csrf": site.csrf}
    cases = [
        ({"Origin": "http://evil.example"}, data, 403),
        ({"Origin": "null"}, data, 403),
        ({"Referer": "http://evil.example/page"}, data, 403),
        ({}, data, 403),  # neither Origin nor Referer
        ({"Origin": ORIGIN}, {"content": data["content"]}, 403),  # no CSRF token
        ({"Origin": ORIGIN}, {**data, "csrf": "stale"}, 403),
    ]
    for headers, form, status in cases:
        answer = await site.client.post(path, data=form, headers=headers)
        assert answer.status_code == status, (headers, form)
        assert site.keeper.store.get(memory).content == "my cat is called Miso"  # type: ignore[union-attr]
    done = await site.client.post(path, data=data, headers={"Referer": f"{ORIGIN}/chats/1"})
    assert done.status_code == 303
    assert site.keeper.store.get(memory).content == "my cat is called Mochi"  # type: ignore[union-attr]


async def test_logging_out_ends_the_session(site: Site) -> None:
    await site.login()
    answer = await site.post("/logout")
    assert answer.status_code == 303
    site.client.cookies.clear()
    assert (await site.client.get("/")).status_code == 303


@ON_BOTH_ENGINES
async def test_one_chats_pages_never_show_another_chats_data(site: Site) -> None:
    await site.login()
    for path in pages_of(site):
        page = await site.client.get(path)
        assert page.status_code == 200, path
        if path != "/" and not path.startswith(("/pictures", "/health", "/?")):
            assert "Felix" not in page.text and f"/chats/{site.bob.id}" not in page.text, path
    felix = site.memory_id(site.bob, "Felix")
    ann = site.ann.id
    shown = await site.client.get(f"/chats/{ann}/memories/{felix}")
    assert shown.status_code == 404 and "Felix" not in shown.text
    edited = await site.post(f"/chats/{ann}/memories/{felix}/edit", {"content": "cats are fine"})
    forgot = await site.post(f"/chats/{ann}/memories/{felix}/forget")
    assert edited.status_code == 404 and forgot.status_code == 404
    kept = site.keeper.store.get(felix)
    assert kept is not None and kept.content == "my cat is called Felix"
    assert site.keeper.store.tombstones(site.bob.id) == []
    bob = await site.client.get(f"/chats/{site.bob.id}/memories?q=cat")
    assert "Felix" in bob.text and "Miso" not in bob.text


async def test_unknown_or_malformed_ids_are_not_found(site: Site) -> None:
    await site.login()
    for path in [
        "/chats/999",
        "/chats/abc",
        f"/chats/{site.ann.id}/memories/99999999999999999999999",
        f"/chats/{site.ann.id}/memories/0",
    ]:
        answer = await site.client.get(path)
        assert answer.status_code == 404, path
        assert answer.headers["cache-control"] == "no-store"
