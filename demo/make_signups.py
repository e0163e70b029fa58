"""Write `demo/signups.csv`: 1,000 synthetic sign-ups, the same every time (no real people).

Names are strings of made-up syllables and every address is at a domain reserved for examples
(RFC 2606: example.com, example.org, example.net, and the `.example` top-level domain). Twelve
addresses are ones the demo's SMTP server refuses for good: six whose local part starts with
`bounce-`, six at `invalid.example`.

    .venv/bin/python -m demo.make_signups
"""

from __future__ import annotations

import csv
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROWS = 1_000
BOUNCING = 12
SYLLABLES = "ba do fe gu ha ji ka lo mi ne ru sa ti vo ze wa yo pe lu ma no ri su ta ke ni".split()  # noqa: SIM905
DOMAINS = ("example.com", "example.org", "example.net")
OUT = Path(__file__).with_name("signups.csv")


def word(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(low, high))).capitalize()


def rows(rng: random.Random) -> list[tuple[str, str, str]]:
    bouncing = sorted(rng.sample(range(ROWS), BOUNCING))
    seen: set[str] = set()
    out: list[tuple[str, str, str]] = []
    when = datetime(2024, 1, 1, tzinfo=UTC)
    for index in range(ROWS):
        first, last = word(rng, 2, 3), word(rng, 2, 4)
        local, domain = f"{first}.{last}".lower(), rng.choice(DOMAINS)
        if index in bouncing:
            if bouncing.index(index) % 2:
                local = f"bounce-{local}"
            else:
                domain = "invalid.example"
        email, n = f"{local}@{domain}", 1
        while email in seen:
            n += 1
            email = f"{local}{n}@{domain}"
        seen.add(email)
        when += timedelta(seconds=rng.randint(30, 10_800))
        out.append((email, f"{first} {last}", when.strftime("%Y-%m-%dT%H:%M:%SZ")))
    return out


def main() -> None:
    with OUT.open("w", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(("email", "name", "signed_up_at"))
        writer.writerows(rows(random.Random(1_000)))
    print(f"wrote {OUT} ({ROWS} rows)")


if __name__ == "__main__":
    main()
