"""A dispatch service's log: routine lines, errors planted at given orders.

Run by tools.py as `python dispatch.py COUNT START MIDDLE END LEVEL`: COUNT
orders are logged at LEVEL (info or warning) with pool chatter at DEBUG; at
order START a credentials error, at MIDDLE a settlement traceback, at END a
critical pool exhaustion (-1: none).
"""

from __future__ import annotations

import logging
import random
import sys

RATES = {"ups": 7, "dhl": 9}


def settle(order: dict[str, object]) -> int:
    """Price an order by its carrier's rate (KeyError for an unknown carrier)."""
    return int(str(order["kg"])) * RATES[str(order["carrier"])]


def main(argv: list[str]) -> None:
    """Log COUNT orders with the planted errors."""
    count, start, middle, end = (int(a) for a in argv[:4])
    level = logging.getLevelName(argv[4].upper())
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.DEBUG,
        format="%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S",
    )
    rng = random.Random(20)  # noqa: S311 - reproducible noise, not secrets
    log, pool = logging.getLogger("dispatch"), logging.getLogger("db.pool")
    for i in range(count):
        carrier, stops, eta = (
            rng.choice(list(RATES)),
            rng.randint(1, 9),
            rng.randint(5, 90),
        )
        log.log(
            level,
            "order %d routed via %s, %d stops, eta %d min",
            i,
            carrier,
            stops,
            eta,
        )
        if i % 7 == 0:
            idle = rng.randint(0, 12)
            pool.debug(
                "connection %d returned to pool (idle %d)", rng.randint(1, 40), idle
            )
        if i == start:
            log.error(
                "carrier API rejected credentials for account acct-7731 (HTTP 401)"
            )
        if i == middle:
            try:
                settle({"kg": 3, "carrier": "fedex"})
            except KeyError:
                log.exception("settlement failed for order %d", i)
        if i == end:
            pool.critical(
                "pool exhausted: 40 of 40 connections busy for 30 s, giving up"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
