"""What the website's browser tests share (test_site.py, test_decks.py): opening a page offline and collecting
what went wrong on the way."""
import http.server
import re


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder without logging every request."""

    def log_message(self, *args):
        pass


def visit(page, url):
    """Open ``url`` with every request to another host refused; return the console errors, page errors, failed
    requests and HTTP errors it caused (a resource the site does not serve itself shows up as a failed request)."""
    problems = []
    page.route(re.compile(r"^(?!http://127\.0\.0\.1:)"), lambda route: route.abort())
    page.on("console", lambda message: problems.append(f"console {message.type}: {message.text}")
            if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("requestfailed", lambda request: problems.append(f"request failed: {request.url}"))
    page.on("response", lambda response: problems.append(f"HTTP {response.status}: {response.url}")
            if response.status >= 400 else None)
    response = page.goto(url, wait_until="load")
    assert response and response.ok, f"{url}: HTTP {response and response.status}"
    return problems
