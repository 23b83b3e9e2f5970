"""What the report and the labelling page share: one HTML head (assets/head.html) and one Host check
(editlens.core.hosts), so a fix to either reaches both."""

from __future__ import annotations

import re

import pytest

from editlens.core.hosts import host_refusal, own_hosts
from editlens.reporting.markup import FAVICON, asset, fill, page_head, render_page


def test_own_hosts_are_the_servers_address_and_the_loopback_names():
    assert own_hosts("127.0.0.1", 8123) == {"127.0.0.1:8123", "localhost:8123", "[::1]:8123"}
    # an IPv6 address is written in brackets, as a browser sends it in Host
    assert own_hosts("::1", 9) == {"127.0.0.1:9", "localhost:9", "[::1]:9"}
    assert "[fe80::1]:9" in own_hosts("fe80::1", 9)
    assert "myhost:9" in own_hosts("MyHost", 9)


@pytest.mark.parametrize("header", [None, "", "evil.example:8123", "127.0.0.1:8124", "localhost", "127.0.0.1"])
def test_a_foreign_or_missing_host_is_refused_with_the_servers_name(header):
    why = host_refusal(header, own_hosts("127.0.0.1", 8123), "this report")
    assert why is not None and why.startswith(f"Host {header!r} refused: this report answers only to 127.0.0.1:8123")


@pytest.mark.parametrize("header", ["127.0.0.1:8123", "LOCALHOST:8123", "[::1]:8123"])
def test_the_servers_own_names_pass(header):
    assert host_refusal(header, own_hosts("127.0.0.1", 8123), "this report") is None


def test_fill_is_one_pass_and_leaves_unknown_placeholders():
    assert fill("__A__|__B__|__C__", {"A": "__B__", "B": "b"}) == "__B__|b|__C__"


def test_the_head_escapes_the_title_and_carries_the_css_and_icon():
    head = page_head('<Edits & "more">', "body{color:red}")
    assert head.startswith("<!DOCTYPE html>") and head.rstrip().endswith("</head>")
    assert "<title>&lt;Edits &amp; &quot;more&quot;&gt;</title>" in head
    assert "body{color:red}" in head and f'href="{FAVICON}"' in head
    assert not re.search(r"__[A-Z]+__", head)


def test_the_report_page_starts_with_the_shared_head():
    page = render_page("Run <x>", "<h1>h</h1>", "<section>s</section>", {"a": 1})
    assert page.startswith(page_head("Run <x>", asset("report.css")))
    assert page.count("<head>") == 1 and page.count("<title>") == 1
    assert not re.search(r"__[A-Z]+__", page)


def test_the_labelling_page_starts_with_the_shared_head(tmp_path):
    from editlens.annotate.server import AnnotateServer
    from editlens.annotate.task import Task
    from editlens.testing.annotate_data import make_edit_set

    edits = make_edit_set(tmp_path / "edits", sources=1, editors=2, size=16)
    Task.create(tmp_path / "t", edits, "pairwise", annotators=["alice"], overlap=1, seed=0).close()
    server = AnnotateServer(tmp_path / "t")
    try:
        page = server.page("alice", "tok").decode()
        css = server._page_parts[1]  # the report's CSS, then the labelling page's own
        assert css.startswith(asset("report.css")) and page.startswith(page_head("Which edit is better?", css))
        assert page.count("<head>") == 1 and "<h1>Which edit is better?</h1>" in page
        assert not re.search(r"__[A-Z]+__", page)
        # the one Host check: a name a web page chose is refused, the server's own address passes
        assert server.refusal(f"evil.example:{server.port}").startswith("Host 'evil.example")
        assert server.refusal(f"localhost:{server.port}") is None
    finally:
        server.close()
