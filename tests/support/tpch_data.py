"""A tiny TPC-H database and its history: a handful of keys per table, value
domains picked so each query's predicates select rows (the dates, brands, types,
containers, segments, ship modes, nations and regions the queries name). Over
four epochs every table gets inserts, updates (a row deleted and a changed row
with the same key inserted), deletes, exact duplicates and rows inserted and
deleted in the same epoch; one epoch empties ``nation`` and the next fills it
again. Comments are sometimes NULL. Shared by the TPC-H view tests, in process,
over Spark Connect and on a cluster.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from collections.abc import Callable

from tests.support.sql_oracle import Row
from tests.support.tpch import queries

REGIONS = ["AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]
NATIONS = [  # (name, region key)
    ("BRAZIL", 0),
    ("CANADA", 0),
    ("CHINA", 1),
    ("FRANCE", 2),
    ("GERMANY", 2),
    ("SAUDI ARABIA", 3),
]
N_SUPPLIERS, N_CUSTOMERS, N_PARTS, N_ORDERS = 6, 8, 7, 21
SUPPLIER_NATIONS = [5, 4, 1, 3, 2, 0]  # supplier key - 1 -> nation key, most of the time
CUSTOMER_NATIONS = [4, 3, 2, 0, 2, 3, 1, 5]  # customer key - 1 -> nation key
COMMENTS = [None, "carefully final", "special requests wake", "Customer slyly Complaints"]
PHONE_PREFIXES = ["13", "31", "23", "29", "30", "18", "17", "11"]
PARTS = [  # (name, brand, type, size, container): one per part key, sometimes varied
    ("forest green lace", "Brand#23", "ECONOMY ANODIZED STEEL", 9, "MED BOX"),
    ("forest blush navy", "Brand#12", "STANDARD POLISHED BRASS", 15, "SM BOX"),
    ("lemon green misty", "Brand#34", "PROMO BURNISHED COPPER", 14, "LG CASE"),
    ("navy ivory khaki", "Brand#45", "ECONOMY ANODIZED STEEL", 3, "MED BAG"),
    ("green forest rose", "Brand#12", "SMALL PLATED BRASS", 3, "SM PACK"),
    ("ivory misty tan", "Brand#23", "PROMO ANODIZED NICKEL", 23, "MED BOX"),
    ("blush khaki navy", "Brand#45", "LARGE BRUSHED BRASS", 15, "JUMBO PKG"),
]
BRANDS = ["Brand#12", "Brand#23", "Brand#34", "Brand#45", "Brand#11"]
TYPES = sorted({p[2] for p in PARTS} | {"MEDIUM POLISHED TIN"})
CONTAINERS = ["SM CASE", "SM BOX", "MED BOX", "MED BAG", "LG CASE", "LG BOX", "JUMBO PKG"]
ORDER_DATES = [  # order key % 7 -> date: one in each range a query looks at
    dt.date(1993, 8, 15),
    dt.date(1993, 11, 20),
    dt.date(1994, 6, 10),
    dt.date(1995, 3, 1),
    dt.date(1995, 8, 20),
    dt.date(1996, 1, 10),
    dt.date(1996, 5, 5),
]
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
SHIP_MODES = ["AIR", "AIR REG", "MAIL", "SHIP", "TRUCK", "RAIL"]
INSTRUCTIONS = ["DELIVER IN PERSON", "NONE", "TAKE BACK RETURN"]


def usual(rng: random.Random, values: list[int], key: int, n: int) -> int:
    """``values[key - 1]`` mostly, else any of ``range(n)``."""
    if 1 <= key <= len(values) and rng.random() < 0.85:
        return values[key - 1]
    return rng.randrange(n)


def region(rng: random.Random, key: int) -> Row:
    return (key, REGIONS[key], rng.choice(COMMENTS))


def nation(rng: random.Random, key: int) -> Row:
    name, reg = NATIONS[key]
    return (key, name, reg if rng.random() < 0.9 else rng.randrange(4), rng.choice(COMMENTS))


def supplier(rng: random.Random, key: int) -> Row:
    return (
        key,
        f"Supplier#{key:03d}",
        rng.choice(["north st", "south st"]),
        usual(rng, SUPPLIER_NATIONS, key, len(NATIONS)),
        f"{rng.choice(PHONE_PREFIXES)}-555-{key:04d}",
        rng.choice([-150.5, 320.25, 4100.0, 9000.75]),
        rng.choice(COMMENTS),
    )


def customer(rng: random.Random, key: int) -> Row:
    return (
        key,
        f"Customer#{key:03d}",
        rng.choice(["elm rd", "oak rd"]),
        usual(rng, CUSTOMER_NATIONS, key, len(NATIONS)),
        f"{rng.choice(PHONE_PREFIXES)}-777-{key:04d}",
        rng.choice([-200.5, 0.0, 150.25, 900.75, 2500.0, 7000.5][0 if key <= 6 else 3 :]),
        rng.choice(["BUILDING", "BUILDING", "AUTOMOBILE", "MACHINERY"]),
        rng.choice(COMMENTS),
    )


def part(rng: random.Random, key: int) -> Row:
    name, brand, type_, size, container = PARTS[(key - 1) % len(PARTS)]
    if rng.random() < 0.2:
        brand, container = rng.choice(BRANDS), rng.choice(CONTAINERS)
    if rng.random() < 0.2:
        type_, size = rng.choice(TYPES), rng.choice([3, 9, 14, 15, 23, 45])
    return (
        key,
        name,
        f"Manufacturer#{key % 3 + 1}",
        brand,
        type_,
        size,
        container,
        rng.choice([901.0, 1205.5, 1530.25]),
        rng.choice(COMMENTS),
    )


def suppliers_of(part_key: int) -> list[int]:
    return [(part_key + i) % N_SUPPLIERS + 1 for i in (0, 1, 3)]


def partsupp(rng: random.Random, key: int) -> Row:
    part_key = key // N_SUPPLIERS + 1
    return (
        part_key,
        key % N_SUPPLIERS + 1,
        rng.choice([5, 40, 500, 3000]),
        rng.choice([10.5, 20.25, 35.0, 80.75]),
        rng.choice(COMMENTS),
    )


def order(rng: random.Random, key: int) -> Row:
    return (
        key,
        # customers 7 and 8 have no orders, and customer 9 does not exist
        key % 6 + 1 if rng.random() < 0.8 else rng.choice([1, 2, 3, 4, 5, 6, 9]),
        rng.choice(["F", "F", "O", "P"]),
        float(rng.randrange(1000, 400000)),
        ORDER_DATES[key % len(ORDER_DATES)] if rng.random() < 0.9 else dt.date(1997, 10, 10),
        rng.choice(PRIORITIES),
        f"Clerk#{rng.randrange(3):03d}",
        0,
        rng.choice([None, "quickly special requests", "special packages", "regular deposits"]),
    )


def lineitem(rng: random.Random, key: int) -> Row:
    order_key, line = key // 4 + 1, key % 4 + 1
    part_key = rng.randrange(1, N_PARTS + 1)
    ordered = ORDER_DATES[order_key % len(ORDER_DATES)]
    shipped = ordered + dt.timedelta(days=rng.choice([5, 10, 20, 40, 100]))
    return (
        order_key,
        part_key,
        rng.choice(suppliers_of(part_key)) if rng.random() < 0.9 else rng.randrange(1, 6),
        line,
        float(rng.choice([1, 2, 5, 10, 15, 20, 25, 30, 40, 50])),
        rng.randrange(4000, 400000) / 4,  # wide: sums of different orders never tie
        rng.choice([0.0, 0.02, 0.05, 0.06, 0.07, 0.1]),
        rng.choice([0.0, 0.04, 0.08]),
        rng.choice(["R", "A", "N"]),
        rng.choice(["O", "F"]),
        shipped,
        ordered + dt.timedelta(days=rng.choice([15, 30, 60])),
        shipped + dt.timedelta(days=rng.choice([1, 5, 30])),
        rng.choice(INSTRUCTIONS),
        rng.choice(SHIP_MODES),
        rng.choice([None, "furiously", "blithely regular"]),
    )


Make = Callable[[random.Random, int], Row]
# table -> (row maker, the keys it makes rows for at first, how many more keys changes may use)
TABLES: dict[str, tuple[Make, list[int], int]] = {
    "region": (region, list(range(len(REGIONS))), 0),
    "nation": (nation, list(range(len(NATIONS))), 0),
    "supplier": (supplier, list(range(1, N_SUPPLIERS + 1)), 1),
    "customer": (customer, list(range(1, N_CUSTOMERS + 1)), 1),
    "part": (part, list(range(1, N_PARTS + 1)), 1),
    "partsupp": (
        partsupp,
        [(p - 1) * N_SUPPLIERS + s - 1 for p in range(1, N_PARTS + 1) for s in suppliers_of(p)],
        4,
    ),
    "orders": (order, list(range(1, N_ORDERS + 1)), 2),
    "lineitem": (lineitem, [k for k in range(N_ORDERS * 4) if k % 4 < 1 + k // 4 % 4], 4),
}


def initial(rng: random.Random, table: str) -> list[tuple[Row, int]]:
    make, keys, _ = TABLES[table]
    rows = [make(rng, k) for k in keys]
    return [(r, 1) for r in rows] + [(rng.choice(rows), 1)]  # one duplicate row


def key_of(table: str, row: Row) -> int:
    """The key a row was made for (the inverse of the makers' key arithmetic)."""
    if table == "partsupp":
        return int((row[0] - 1) * N_SUPPLIERS + row[1] - 1)
    if table == "lineitem":
        return int((row[0] - 1) * 4 + row[3] - 1)
    return int(row[0])


def changes(rng: random.Random, table: str, live: Counter[Row]) -> list[tuple[Row, int]]:
    """Random inserts (new keys, existing keys, exact duplicates), updates and deletes."""
    make, keys, more = TABLES[table]
    rows = sorted((+live).elements(), key=repr)
    out: list[tuple[Row, int]] = []
    domain = keys + [max(keys) + i for i in range(1, more + 1)]
    for _ in range(rng.randrange(1, 3)):
        row = make(rng, rng.choice(domain))
        out.append((row, 1))
        if rng.random() < 0.2:  # inserted and deleted in the same epoch
            out.append((row, -1))
    if rows and rng.random() < 0.5:
        out.append((rng.choice(rows), 1))
    picked = rng.sample(rows, k=min(len(rows), rng.randrange(1, 4)))
    for i, row in enumerate(picked):
        out.append((row, -1))
        if i % 2 == 0:  # an update: the same key, other values
            out.append((make(rng, key_of(table, row)), 1))
    return out


# the specification's thresholds scaled down to this data
QUERIES = queries(q11_fraction=0.2, q18_quantity=60)

SEED = 18  # one whose data gives every query rows in at least two epochs
EPOCHS_PER_RUN = (2, 2)
EMPTIED = (2, "nation")
"""At this epoch, this table loses every row (and gets new ones the epoch after)."""


def history_of(rng: random.Random) -> list[dict[str, list[tuple[Row, int]]]]:
    """Each epoch's changes per table."""
    live = {t: Counter[Row]() for t in TABLES}
    epochs: list[dict[str, list[tuple[Row, int]]]] = []
    for epoch in range(sum(EPOCHS_PER_RUN)):
        now: dict[str, list[tuple[Row, int]]] = {}
        for table, bag in live.items():
            if epoch == 0:
                now[table] = initial(rng, table)
            elif (epoch, table) == EMPTIED:
                now[table] = [(r, -1) for r in (+bag).elements()]
            elif (epoch - 1, table) == EMPTIED:
                now[table] = initial(rng, table)
            else:
                now[table] = changes(rng, table, bag)
            for r, d in now[table]:
                bag[r] += d
        epochs.append(now)
    return epochs


def tables_after(epochs: list[dict[str, list[tuple[Row, int]]]]) -> list[dict[str, Counter[Row]]]:
    live = {t: Counter[Row]() for t in TABLES}
    out = []
    for now in epochs:
        for table, rows in now.items():
            for r, d in rows:
                live[table][r] += d
        out.append({t: +bag for t, bag in live.items()})
    return out
