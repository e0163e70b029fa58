"""What the dashboard's tests share: its secret and headers, the kinds their queues hold, an
httpx client on the app and a login, and readers of its pages' HTML (counts, rows, cells, charts,
the CSRF token, the flash)."""

import re
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

import nilo_job as job

S = 1_000_000  # microseconds in a second
MINUTE = 60 * S
SECRET = "correct horse battery staple"
ORIGIN = {"origin": "http://testserver"}
FORM = {"content-type": "application/x-www-form-urlencoded"}
CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


class Rejected(Exception):
    pass


class Bounced(Exception):
    pass


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str

    def run(self) -> dict[str, str]:
        if self.to.startswith("bad"):
            raise Rejected("no such address")
        if self.to.startswith("bounce"):
            raise Bounced("mailbox full")
        return {"sent": self.to}


@dataclass
class Resize:
    nilo_job = "resize"
    retry = job.Retry.NONE

    n: int

    def run(self) -> None:
        if self.n < 0:
            raise ValueError("negative")


@dataclass
class Nightly:
    nilo_job = "nightly"
    retry = job.Retry.NONE
    schedule = job.cron("0 3 * * *", tz="Asia/Jakarta")
    overlap = job.Overlap.SKIP
    missed = job.Missed.DROP

    def run(self) -> None:
        pass


@dataclass
class Pulse:
    nilo_job = "pulse"
    retry = job.Retry.NONE
    schedule = job.every(600_000)
    overlap = job.Overlap.QUEUE
    missed = job.Missed.CATCH_UP

    def run(self) -> None:
        pass


def utc(us: int) -> str:
    return datetime.fromtimestamp(us / S, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(us: int) -> str:
    """`us` (µs since the epoch) as the charts write a minute: "2026-12-01T13:05:00Z"."""
    return datetime.fromtimestamp(us / S, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_at(page: str) -> int:
    """The moment the page was read (µs since the epoch, whole seconds), from its header."""
    found = re.search(r'read <time datetime="([^"]+)">', page)
    assert found is not None, "no reading time in the header"
    moment = datetime.fromisoformat(found.group(1).replace("Z", "+00:00"))
    return int(moment.timestamp()) * S


def text(fragment: str) -> str:
    """The fragment without tags and entities, and without the relative hints."""
    plain = re.sub(r'\s*<span class="rel">\(.*?\)</span>', "", fragment)
    plain = re.sub(r"<[^>]+>", "", plain)
    return re.sub(r"\s+", " ", plain.replace("&quot;", '"')).strip()


def cells(page: str, row_id: int) -> list[str]:
    """The text of each cell of the table row `row-<id>`, but the last (the buttons) when the
    page is an operator's."""
    found = re.search(rf'<tr id="row-{row_id}">(.*?)</tr>', page)
    assert found is not None, f"no row {row_id} on the page"
    return [text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", found.group(1))]


def listed(page: str) -> list[int]:
    """The ids of the table rows on the page, in order."""
    return [int(n) for n in re.findall(r'<tr id="row-(\d+)">', page)]


def counts(page: str) -> dict[str, int]:
    """The totals row of the counts table."""
    found = re.findall(r'<td class="n" id="count-(\w+)"><a href="[^"]*">(\d+)</a></td>', page)
    return {state: int(n) for state, n in found}


def per_kind(page: str) -> dict[tuple[str, str], int]:
    found = re.findall(r'data-kind="([^"]+)" data-state="(\w+)"><a href="[^"]*">(\d+)</a>', page)
    return {(kind, state): int(n) for kind, state, n in found}


def minutes(page: str, kind: str) -> dict[str, tuple[int, int]]:
    """The chart of `kind`: each minute (ISO, UTC) with its done and died bars' numbers."""
    found = re.search(rf'<svg class="chart"[^>]*data-kind="{kind}".*?</svg>', page)
    assert found is not None, f"no chart of {kind}"
    bars = re.findall(
        r'<g class="minute" data-minute="([^"]+)" data-done="(\d+)" data-died="(\d+)">',
        found.group(0),
    )
    return {minute: (int(done), int(died)) for minute, done, died in bars}


def stats(page: str, kind: str) -> dict[str, str]:
    found = re.search(rf'<article class="flow" data-kind="{kind}">(.*?)</article>', page)
    assert found is not None, f"no flow card of {kind}"
    return dict(re.findall(r'<dd data-stat="(\w+)">(.*?)</dd>', found.group(1)))


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert found is not None, "no CSRF token on the page"
    return found.group(1)


def flash(page: str) -> str:
    found = re.search(r'<p class="flash[^"]*" id="flash" role="status">(.*?)</p>', page)
    assert found is not None, "no flash on the page"
    return found.group(1)


def client(app: object) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def login(http: httpx.AsyncClient, prefix: str = "") -> str:
    """Log in with the secret; the CSRF token of the new session."""
    answer = await http.post(f"{prefix}/login", data={"secret": SECRET}, headers=ORIGIN)
    assert (answer.status_code, answer.headers["location"]) == (303, f"{prefix}/?did=logged_in")
    page = await http.get(f"{prefix}/")
    return csrf(page.text)


async def dead_rows(jobs: job.Jobs, t: int, *addresses: str) -> list[int]:
    """Push a Mail to each address, due and dying one second apart from `t`; their ids."""
    ids = []
    for n, to in enumerate(addresses):
        ids.append(await jobs.push(Mail(to=to), at=t + n * S))
        assert await jobs.drain_at(t + n * S) == 1
    return ids
