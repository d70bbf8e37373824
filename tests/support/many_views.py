"""A pipeline shaped like a dbt project, of any number of SQL views over seven small
sources, its data changed epoch by epoch, and every view evaluated by DuckDB over the
sources as they are now: shared by the test of a 200-view pipeline and the benchmark
of 10 to 500 views.

Customers, orders and order items are Delta tables with the change feed on; products
and stores are Delta tables without it, which dd_etl takes in by differencing;
payments are parquet files whose ``diff`` column lets a later file retract a payment;
support tickets are CSV files read with a declared schema. Staging views read each
source; then come blocks of the same intermediate and mart views, each block with its
own constants, so that no two views have the same definition (dd_etl shares the
traces of identical plans, which would hide the work of all but one). A block goes
seven levels deep from the sources. Money is integer cents, so both engines sum it
exactly, and the SQL is what Spark and DuckDB evaluate alike: window orders made total
by a unique column, no division, no dialect's own functions.
"""

from __future__ import annotations

import csv
import json
import random
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Literal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

SEGMENTS = ("consumer", "smb", "enterprise", None)
CATEGORIES = ("toys", "books", "garden", "food", "tools")
METHODS = ("card", "cash", "voucher", "transfer")
STATUSES = ("placed", "shipped", "completed", "returned", "cancelled")
CHANNELS = ("email", "phone", "chat")
REGIONS = 5
FIRST_DAY = date(2024, 1, 1)

CUSTOMERS = pa.schema(
    [
        ("customer_id", pa.int64()),
        ("name", pa.string()),
        ("segment", pa.string()),
        ("region_id", pa.int64()),
        ("signup_day", pa.int64()),
    ]
)
ORDERS = pa.schema(
    [
        ("order_id", pa.int64()),
        ("customer_id", pa.int64()),
        ("store_id", pa.int64()),
        ("status", pa.string()),
        ("amount_cents", pa.int64()),
        ("order_day", pa.int64()),
    ]
)
ORDER_ITEMS = pa.schema(
    [
        ("item_id", pa.int64()),
        ("order_id", pa.int64()),
        ("product_id", pa.int64()),
        ("quantity", pa.int64()),
        ("price_cents", pa.int64()),
    ]
)
PRODUCTS = pa.schema(
    [
        ("product_id", pa.int64()),
        ("category", pa.string()),
        ("price_cents", pa.int64()),
        ("active", pa.bool_()),
    ]
)
STORES = pa.schema(
    [("store_id", pa.int64()), ("store_name", pa.string()), ("region_id", pa.int64())]
)
PAYMENTS = pa.schema(
    [
        ("payment_id", pa.int64()),
        ("order_id", pa.int64()),
        ("method", pa.string()),
        ("amount_cents", pa.int64()),
        ("diff", pa.int64()),
    ]
)
TICKETS = {  # Spark's names of the types, which DuckDB knows too
    "ticket_id": "bigint",
    "customer_id": "bigint",
    "channel": "string",
    "priority": "int",
    "opened_on": "date",
}

CHANGE_FEED = ("customers", "orders", "order_items")
"""The Delta sources with the change feed on; the others are taken in by differencing."""
DELTA = {
    "customers": ("customer_id", CUSTOMERS),
    "orders": ("order_id", ORDERS),
    "order_items": ("item_id", ORDER_ITEMS),
    "products": ("product_id", PRODUCTS),
    "stores": ("store_id", STORES),
}

STAGING = {
    "stg_customers": "SELECT customer_id, name AS customer_name, "
    "COALESCE(segment, 'unknown') AS segment, region_id, signup_day FROM customers",
    "stg_orders": "SELECT order_id, customer_id, store_id, status AS order_status, "
    "amount_cents, order_day, CASE WHEN status IN ('shipped', 'completed') THEN 1 ELSE 0 END "
    "AS is_fulfilled FROM orders WHERE status <> 'cancelled'",
    "stg_order_items": "SELECT item_id, order_id, product_id, quantity, "
    "price_cents * quantity AS line_cents FROM order_items WHERE quantity > 0",
    "stg_products": "SELECT product_id, category, price_cents AS list_cents, active "
    "FROM products WHERE active",
    "stg_stores": "SELECT store_id, store_name, region_id, "
    "'r' || CAST(region_id AS STRING) AS region_code FROM stores",
    "stg_payments": "SELECT payment_id, order_id, method AS payment_method, "
    "amount_cents AS paid_cents FROM payments",
    "stg_tickets": "SELECT ticket_id, customer_id, channel, priority, opened_on, "
    "CASE WHEN priority >= 3 THEN 'high' ELSE 'normal' END AS urgency FROM tickets",
}


def block(b: int) -> list[tuple[str, str]]:
    """Block ``b``'s views, each reading only staging views and views before it in
    the block, with thresholds, segments and moduli of their own."""

    def v(kind: str) -> str:
        return f"{kind}_b{b}"

    low = 25 * b
    days = 2 + b % 5
    gold, silver = 90_000 + 1_500 * b, 45_000 + 700 * b
    opened = FIRST_DAY + timedelta(days=(7 * b) % 60)
    return [
        (
            v("int_orders_enriched"),
            "SELECT o.order_id, o.customer_id, c.segment, s.region_code, o.order_status, "
            "o.amount_cents, o.order_day, o.is_fulfilled FROM stg_orders o "
            "JOIN stg_customers c ON o.customer_id = c.customer_id "
            f"JOIN stg_stores s ON o.store_id = s.store_id WHERE o.amount_cents >= {low}",
        ),
        (
            v("int_order_lines"),
            "SELECT i.order_id, COUNT(*) AS lines, SUM(i.line_cents) AS items_cents, "
            "COUNT(DISTINCT p.category) AS categories, MIN(i.quantity) AS min_quantity, "
            "MAX(i.line_cents) AS max_line_cents FROM stg_order_items i "
            "JOIN stg_products p ON i.product_id = p.product_id "
            f"WHERE p.category <> '{CATEGORIES[b % 5]}' AND i.line_cents >= {10 * b} "
            "GROUP BY i.order_id",
        ),
        (
            v("int_order_payments"),
            "SELECT order_id, COUNT(*) AS payments, SUM(paid_cents) AS paid_cents, "
            "MAX(payment_method) AS last_method, COUNT(DISTINCT payment_method) AS methods "
            f"FROM stg_payments WHERE payment_method <> '{METHODS[b % 4]}' "
            f"GROUP BY order_id HAVING SUM(paid_cents) > {10 * b}",
        ),
        (
            v("int_orders_full"),
            "SELECT e.order_id, e.customer_id, e.segment, e.region_code, e.order_status, "
            "e.amount_cents, e.order_day, COALESCE(l.lines, 0) AS lines, "
            "COALESCE(l.items_cents, 0) AS items_cents, COALESCE(p.paid_cents, 0) AS paid_cents, "
            "CASE WHEN p.order_id IS NULL THEN 'unpaid' "
            "WHEN p.paid_cents >= e.amount_cents THEN 'paid' ELSE 'partial' END AS pay_state "
            f"FROM {v('int_orders_enriched')} e "
            f"LEFT JOIN {v('int_order_lines')} l ON e.order_id = l.order_id "
            f"LEFT JOIN {v('int_order_payments')} p ON e.order_id = p.order_id",
        ),
        (
            v("int_customer_orders"),
            "SELECT customer_id, segment, COUNT(*) AS orders, SUM(amount_cents) AS lifetime_cents, "
            "SUM(paid_cents) AS paid_cents, MIN(order_day) AS first_day, "
            "MAX(order_day) AS last_day, COUNT(DISTINCT order_status) AS statuses, "
            "SUM(CASE WHEN pay_state = 'paid' THEN 1 ELSE 0 END) AS paid_orders "
            f"FROM {v('int_orders_full')} WHERE order_status <> '{STATUSES[b % 4]}' "
            "GROUP BY customer_id, segment",
        ),
        (
            v("int_region_days"),
            f"SELECT region_code, order_day % {days} AS day_bucket, "
            "COUNT(DISTINCT customer_id) AS customers, COUNT(*) AS orders, "
            "SUM(amount_cents) AS amount_cents "
            f"FROM {v('int_orders_enriched')} WHERE is_fulfilled = {b % 2} "
            f"GROUP BY region_code, order_day % {days}",
        ),
        (
            v("mart_customer_value"),
            "SELECT c.customer_id, c.customer_name, c.segment, COALESCE(o.orders, 0) AS orders, "
            "COALESCE(o.lifetime_cents, 0) AS lifetime_cents, "
            f"CASE WHEN o.customer_id IS NULL THEN 'none' WHEN o.lifetime_cents >= {gold} "
            f"THEN 'gold' WHEN o.lifetime_cents >= {silver} THEN 'silver' ELSE 'bronze' END "
            f"AS tier FROM stg_customers c LEFT JOIN {v('int_customer_orders')} o "
            "ON c.customer_id = o.customer_id",
        ),
        (
            v("mart_first_order"),
            "SELECT customer_id, order_id, order_day, amount_cents FROM (SELECT customer_id, "
            "order_id, order_day, amount_cents, ROW_NUMBER() OVER (PARTITION BY customer_id "
            f"ORDER BY order_day, order_id) AS rn FROM {v('int_orders_enriched')} "
            f"WHERE amount_cents >= {low + 1_000}) t WHERE rn = 1",
        ),
        (
            v("mart_top_orders"),
            "SELECT segment, order_id, customer_id, amount_cents, rnk FROM (SELECT segment, "
            "order_id, customer_id, amount_cents, ROW_NUMBER() OVER (PARTITION BY segment "
            f"ORDER BY amount_cents DESC, order_id) AS rnk FROM {v('int_orders_full')} "
            f"WHERE pay_state <> 'unpaid') t WHERE rnk <= {3 + b % 5}",
        ),
        (
            v("mart_top_region_days"),
            "SELECT region_code, day_bucket, amount_cents FROM (SELECT region_code, day_bucket, "
            "amount_cents, ROW_NUMBER() OVER (PARTITION BY region_code "
            f"ORDER BY amount_cents DESC, day_bucket) AS rnk FROM {v('int_region_days')}) t "
            f"WHERE rnk <= {1 + b % 3}",
        ),
        (
            v("mart_running"),
            "SELECT customer_id, order_id, order_day, amount_cents, SUM(amount_cents) OVER "
            "(PARTITION BY customer_id ORDER BY order_day, order_id) AS running_cents, "
            "ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY order_day, order_id) "
            f"AS order_seq FROM {v('int_orders_full')} "
            f"WHERE region_code <> 'r{b % REGIONS + 1}'",
        ),
        (
            v("mart_running_threshold"),
            "SELECT customer_id, MIN(order_day) AS day_reached, MIN(order_seq) AS orders_needed "
            f"FROM {v('mart_running')} WHERE running_cents >= {20_000 + 500 * b} "
            "GROUP BY customer_id",
        ),
        (
            v("mart_rollup"),
            "SELECT segment, region_code, order_status, COUNT(*) AS orders, "
            "SUM(amount_cents) AS amount_cents, MAX(amount_cents) AS max_cents, "
            f"GROUPING(region_code) AS all_regions FROM {v('int_orders_full')} "
            f"WHERE order_day % {days} <> {b % days} GROUP BY GROUPING SETS "
            "((segment, region_code, order_status), (segment, region_code), (segment), ())",
        ),
        (
            v("mart_tier_summary"),
            "SELECT tier, segment, COUNT(*) AS customers, SUM(lifetime_cents) AS lifetime_cents, "
            "MIN(orders) AS min_orders, MAX(orders) AS max_orders "
            f"FROM {v('mart_customer_value')} WHERE orders >= {b % 3} GROUP BY tier, segment",
        ),
        (
            v("mart_quiet_customers"),
            "SELECT c.customer_id, c.tier, c.lifetime_cents "
            f"FROM {v('mart_customer_value')} c WHERE c.orders > 0 AND NOT EXISTS "
            "(SELECT 1 FROM stg_tickets t WHERE t.customer_id = c.customer_id "
            f"AND t.priority >= {2 + b % 3})",
        ),
        (
            v("mart_vip_tickets"),
            "SELECT t.ticket_id, t.customer_id, t.channel, t.urgency, t.opened_on "
            f"FROM stg_tickets t WHERE t.opened_on >= DATE '{opened.isoformat()}' "
            "AND t.customer_id IN (SELECT customer_id "
            f"FROM {v('mart_customer_value')} WHERE tier IN ('gold', 'silver'))",
        ),
        (
            v("report_segments"),
            "SELECT s.segment, s.tier, s.customers, s.lifetime_cents, "
            "r.orders AS segment_orders, r.amount_cents AS segment_cents "
            f"FROM {v('mart_tier_summary')} s JOIN {v('mart_rollup')} r "
            f"ON s.segment = r.segment WHERE r.all_regions = 1 AND s.customers >= {1 + b % 4}",
        ),
    ]


def definitions(n: int) -> dict[str, str]:
    """The first ``n`` views: the staging ones, then as many blocks as it takes."""
    chosen = dict(list(STAGING.items())[:n])
    b = 0
    while len(chosen) < n:
        for name, sql in block(b)[: n - len(chosen)]:
            chosen[name] = sql
        b += 1
    return chosen


def bag(records: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True, default=str) for r in records)


class ManyViews:
    """The sources as written, the ids live in them (what a change may touch), and the
    views over them."""

    def __init__(self, root: Path, views: int, seed: int = 0) -> None:
        self.root = root
        self.data = root / "data"
        self.sql = definitions(views)
        self.view_names = list(self.sql)
        self.rng = random.Random(seed)
        self.epoch = 0
        self.next_id = dict.fromkeys(("customer", "order", "item", "payment", "ticket"), 1)
        """Ids are never reused, though the rows they named are deleted."""
        self.customers: list[int] = []
        self.stores = list(range(1, 13))
        self.prices = {p: self.rng.randrange(100, 5_000) for p in range(1, 61)}
        """Each product's price, which its new order items take."""
        self.orders: set[int] = set()
        self.items: dict[int, int] = {}
        """Each live item's order."""
        self.payments: dict[int, dict[str, Any]] = {}
        products = [
            {
                "product_id": p,
                "category": CATEGORIES[p % len(CATEGORIES)],
                "price_cents": price,
                "active": p % 11 != 0,
            }
            for p, price in self.prices.items()
        ]
        stores = [
            {"store_id": s, "store_name": f"s{s}", "region_id": 1 + s % REGIONS}
            for s in self.stores
        ]
        customers = self.new_customers(150, signup=(0, 100))
        orders, items = self.new_orders(900, days=(0, 100))
        for name, rows in (
            ("customers", customers),
            ("orders", orders),
            ("order_items", items),
            ("products", products),
            ("stores", stores),
        ):
            self.write_delta(name, rows, "error")
        (self.data / "payments").mkdir()
        (self.data / "tickets").mkdir()
        self.add_payments(self.new_payments(sorted(self.orders)))
        self.add_tickets(240)

    def write_delta(
        self, name: str, rows: list[dict[str, Any]], mode: Literal["error", "append"]
    ) -> None:
        feed = {"delta.enableChangeDataFeed": "true"} if name in CHANGE_FEED else None
        table = pa.Table.from_pylist(rows, DELTA[name][1])
        write_deltalake(str(self.data / name), table, mode=mode, configuration=feed)

    def table(self, name: str) -> DeltaTable:
        return DeltaTable(str(self.data / name))

    def ids(self, kind: str, count: int) -> range:
        first = self.next_id[kind]
        self.next_id[kind] += count
        return range(first, first + count)

    def new_customers(self, count: int, signup: tuple[int, int]) -> list[dict[str, Any]]:
        """``count`` customers, some of no known segment, recorded as live."""
        rows: list[dict[str, Any]] = [
            {
                "customer_id": c,
                "name": f"c{c}",
                "segment": self.rng.choice(SEGMENTS),
                "region_id": 1 + c % REGIONS,
                "signup_day": self.rng.randrange(*signup),
            }
            for c in self.ids("customer", count)
        ]
        self.customers += [r["customer_id"] for r in rows]
        return rows

    def new_orders(
        self, count: int, days: tuple[int, int]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``count`` orders on ``days`` with one to three items each (a few online,
        with no store), recorded as live."""
        rng = self.rng
        orders: list[dict[str, Any]] = []
        items: list[dict[str, Any]] = []
        for order_id in self.ids("order", count):
            orders.append(
                {
                    "order_id": order_id,
                    "customer_id": rng.choice(self.customers),
                    "store_id": None if rng.random() < 0.05 else rng.choice(self.stores),
                    "status": rng.choice(STATUSES),
                    "amount_cents": rng.randrange(100, 20_000),
                    "order_day": rng.randrange(*days),
                }
            )
            for item_id in self.ids("item", rng.randint(1, 3)):
                product = rng.choice(sorted(self.prices))
                items.append(
                    {
                        "item_id": item_id,
                        "order_id": order_id,
                        "product_id": product,
                        "quantity": rng.randrange(6),
                        "price_cents": self.prices[product],
                    }
                )
                self.items[item_id] = order_id
            self.orders.add(order_id)
        return orders, items

    def new_payments(self, orders: list[int]) -> list[dict[str, Any]]:
        """Payments of most of ``orders``, some split in two, recorded as live."""
        rows = []
        for order_id in orders:
            for payment_id in self.ids("payment", self.rng.choice((0, 1, 1, 1, 2))):
                self.payments[payment_id] = {
                    "payment_id": payment_id,
                    "order_id": order_id,
                    "method": self.rng.choice(METHODS),
                    "amount_cents": self.rng.randrange(50, 15_000),
                    "diff": 1,
                }
                rows.append(self.payments[payment_id])
        return rows

    def add_payments(self, rows: list[dict[str, Any]]) -> None:
        path = self.data / "payments" / f"p{self.epoch:03d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, PAYMENTS), path)

    def add_tickets(self, count: int) -> None:
        rng = self.rng
        with (self.data / "tickets" / f"t{self.epoch:03d}.csv").open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(TICKETS)
            for ticket_id in self.ids("ticket", count):
                opened = FIRST_DAY + timedelta(days=rng.randrange(60 + 3 * self.epoch))
                customer, channel = rng.choice(self.customers), rng.choice(CHANNELS)
                out.writerow([ticket_id, customer, channel, rng.randint(1, 4), opened])

    def pipeline(self, spark_conf: dict[str, str] | None = None, name: str = "many_views") -> Path:
        conf = spark_conf if spark_conf is not None else {"spark.sql.shuffle.partitions": "2"}
        lines = [
            f"name: {name}",
            "warehouse: wh",
            f"spark: {json.dumps({'master': 'local[2]', 'conf': conf})}",
            "sources:",
        ]
        for source, (key, _) in DELTA.items():
            lines.append(f"  {source}: {{format: delta, path: data/{source}, key: [{key}]}}")
        lines += [
            "  payments: {format: parquet, path: data/payments, key: [payment_id]}",
            "  tickets:",
            "    format: csv",
            "    path: data/tickets",
            "    key: [ticket_id]",
            f"    schema: {json.dumps(TICKETS)}",
            "views:",
        ]
        for view, sql in self.sql.items():
            escaped = sql.replace("'", "''")
            lines += [f"  {view}:", f"    sql: '{escaped}'"]
        path = self.root / "pipeline.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def change(self) -> None:
        """One epoch: new orders with their items and payments; orders changing status
        (cancelled ones leave the staging view) or amount, items their quantity; orders
        deleted with their items; customers moving segment, and new ones; product
        prices, a product withdrawn or back, a store renamed and moved (in the tables
        without a change feed); payments retracted; new tickets."""
        self.epoch += 1
        rng = self.rng
        day = 100 + 3 * self.epoch
        live = sorted(self.orders)
        orders, items = self.new_orders(12, days=(day, day + 3))
        self.write_delta("orders", orders, "append")
        self.write_delta("order_items", items, "append")
        for order_id in rng.sample(live, 3):
            self.table("orders").update(
                new_values={"status": rng.choice(STATUSES)}, predicate=f"order_id = {order_id}"
            )
        for order_id in rng.sample(live, 2):
            self.table("orders").update(
                new_values={"amount_cents": rng.randrange(100, 20_000)},
                predicate=f"order_id = {order_id}",
            )
        for item_id in rng.sample(sorted(self.items), 2):
            self.table("order_items").update(
                new_values={"quantity": rng.randrange(6)}, predicate=f"item_id = {item_id}"
            )
        gone = rng.sample(live, 2)
        doomed = ", ".join(map(str, gone))
        self.table("orders").delete(f"order_id IN ({doomed})")
        self.table("order_items").delete(f"order_id IN ({doomed})")
        self.orders -= set(gone)
        self.items = {i: o for i, o in self.items.items() if o not in gone}

        for customer_id in rng.sample(self.customers, 2):
            segment = rng.choice(SEGMENTS)
            self.table("customers").update(
                updates={"segment": "NULL" if segment is None else f"'{segment}'"},
                predicate=f"customer_id = {customer_id}",
            )
        self.write_delta("customers", self.new_customers(2, signup=(day, day + 1)), "append")

        for product_id in rng.sample(sorted(self.prices), 2):
            self.prices[product_id] = rng.randrange(100, 5_000)
            self.table("products").update(
                new_values={"price_cents": self.prices[product_id]},
                predicate=f"product_id = {product_id}",
            )
        self.table("products").update(
            updates={"active": "NOT active"},
            predicate=f"product_id = {rng.choice(sorted(self.prices))}",
        )
        store_id = rng.choice(self.stores)
        self.table("stores").update(
            new_values={
                "store_name": f"s{store_id}e{self.epoch}",
                "region_id": 1 + self.epoch % REGIONS,
            },
            predicate=f"store_id = {store_id}",
        )

        refunded = rng.sample(sorted(self.payments), 2)
        retracted = [{**self.payments.pop(p), "diff": -1} for p in refunded]
        paid = [o["order_id"] for o in orders] + [rng.choice(live)]
        self.add_payments(self.new_payments(paid) + retracted)
        self.add_tickets(8)

    def oracle(self) -> dict[str, Counter[str]]:
        """Every view evaluated by DuckDB over the sources as they are now: Delta
        tables as delta-rs reads them, payments with their diffs summed, tickets
        read with the declared types. Each view is kept as a table, so the views
        over it do not evaluate it again."""
        con = duckdb.connect()
        for name in DELTA:
            con.register(name, self.table(name).to_pyarrow_table())
        updates = pa.concat_tables(
            pq.read_table(f) for f in sorted((self.data / "payments").glob("*.parquet"))
        )
        con.register("payment_updates", updates)
        con.execute(
            "CREATE TABLE payments AS SELECT payment_id, order_id, method, amount_cents FROM "
            "(SELECT payment_id, order_id, method, amount_cents, SUM(diff) AS n "
            "FROM payment_updates GROUP BY ALL), range(CAST(n AS BIGINT))"
        )
        files = [str(f) for f in sorted((self.data / "tickets").glob("*.csv"))]
        con.execute(
            "CREATE TABLE tickets AS SELECT * FROM read_csv(?, header = true, columns = ?)",
            [files, TICKETS],
        )
        got = {}
        for name, sql in self.sql.items():
            con.execute(f"CREATE TABLE {name} AS {sql}")
            rows = con.execute(f"SELECT * FROM {name}").fetchall()
            names = [d[0] for d in con.description or []]
            got[name] = bag([dict(zip(names, r, strict=True)) for r in rows])
        con.close()
        return got
