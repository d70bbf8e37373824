"""A dbt project over a shop's customers, orders and payments, written by the tests:
staging views over three sources, an ephemeral model, a macro, ``vars``, a seed,
table and incremental marts, generic tests (one a warning) and a singular test.
Its data changes epoch by epoch (inserts, updates, deletes; a duplicate customer,
an unknown status, an order whose customer is gone, so that tests fail too), and
``dbt_reference`` runs the project with dbt itself (``seed``, ``run
--full-refresh``, ``test``) on plain Spark over the same data, for the tests to
compare with."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

PROJECT = {
    "dbt_project.yml": """
name: shop
version: "1.0"
config-version: 2
profile: shop
vars:
  large_order_cents: 10000
  final_statuses: ["completed", "returned"]
models:
  shop:
    staging:
      +materialized: view
    intermediate:
      +materialized: ephemeral
    marts:
      +materialized: table
""",
    "models/staging/sources.yml": """
version: 2
sources:
  - name: raw
    schema: raw
    tables:
      - name: customers
      - name: orders
      - name: payments
        meta:
          dd_etl: {format: parquet, path: ../data/payments}
""",
    "models/staging/schema.yml": """
version: 2
models:
  - name: stg_customers
    description: One row per customer, names cleaned.
    columns:
      - name: customer_id
        description: The customer's id.
        data_tests: [not_null, unique]
  - name: stg_orders
    columns:
      - name: order_id
        data_tests: [not_null, unique]
      - name: status
        data_tests:
          - accepted_values:
              arguments:
                values: ["placed", "shipped", "completed", "returned"]
      - name: customer_id
        data_tests:
          - relationships:
              arguments:
                to: ref('stg_customers')
                field: customer_id
              config:
                severity: warn
""",
    "models/staging/stg_customers.sql": """
select customer_id, lower(trim(name)) as name, coalesce(segment, 'unknown') as segment
from {{ source('raw', 'customers') }}
""",
    "models/staging/stg_orders.sql": """
select order_id, customer_id, status, amount_cents, order_day
from {{ source('raw', 'orders') }}
where status <> 'test'
""",
    "models/staging/stg_payments.sql": """
select payment_id, order_id, method, {{ cents_to_dollars('amount_cents') }} as amount
from {{ source('raw', 'payments') }}
""",
    "macros/cents_to_dollars.sql": """
{% macro cents_to_dollars(column) -%}
  cast({{ column }} as decimal(18, 2)) / 100
{%- endmacro %}
""",
    "models/intermediate/int_order_payments.sql": """
select order_id, sum(amount) as total_paid, count(*) as payments
from {{ ref('stg_payments') }}
group by order_id
""",
    "seeds/order_statuses.csv": """status,label,is_final
placed,Placed,false
shipped,Shipped,false
completed,Completed,true
returned,Returned,true
""",
    "models/marts/orders.sql": """
select o.order_id, o.customer_id, o.status, s.label as status_label, o.amount_cents,
       o.order_day, coalesce(p.total_paid, 0) as total_paid,
       o.amount_cents >= {{ var('large_order_cents') }} as is_large
from {{ ref('stg_orders') }} o
join {{ ref('order_statuses') }} s on s.status = o.status
left join {{ ref('int_order_payments') }} p on p.order_id = o.order_id
""",
    "models/marts/customer_orders.sql": """
{{ config(materialized='incremental', unique_key='customer_id') }}
select customer_id, count(*) as orders, sum(amount_cents) as spent_cents,
       max(order_day) as last_order_day
from {{ ref('orders') }}
{% if is_incremental() %}
where customer_id in (
  select customer_id from {{ ref('orders') }}
  where order_day >= (select max(last_order_day) from {{ this }}))
{% endif %}
group by customer_id
""",
    "models/marts/customers.sql": """
select c.customer_id, c.name, c.segment, coalesce(o.orders, 0) as orders,
       coalesce(o.spent_cents, 0) as spent_cents, o.last_order_day
from {{ ref('stg_customers') }} c
left join {{ ref('customer_orders') }} o on o.customer_id = c.customer_id
""",
    "models/marts/daily_revenue.sql": """
{{ config(materialized='view') }}
select order_day, count(*) as orders, sum(amount_cents) as revenue_cents,
       sum(case when status in (
         {%- for s in var('final_statuses') -%}
           '{{ s }}'{% if not loop.last %}, {% endif %}
         {%- endfor -%}
       ) then amount_cents else 0 end) as final_cents
from {{ ref('orders') }}
group by order_day
""",
    "models/marts/segment_summary.sql": """
select segment, count(*) as customers, sum(spent_cents) as spent_cents,
       max(spent_cents) as top_spent_cents
from {{ ref('customers') }}
group by segment
""",
    "models/marts/payment_methods.sql": """
select p.method, count(*) as payments, sum(p.amount) as amount,
       sum(case when o.is_large then 1 else 0 end) as large_orders
from {{ ref('stg_payments') }} p
join {{ ref('orders') }} o on o.order_id = p.order_id
group by p.method
""",
    "tests/assert_paid_at_most_twice_amount.sql": """
select order_id, total_paid, amount_cents
from {{ ref('orders') }}
where total_paid * 100 > 2 * amount_cents
""",
}
MODELS = (
    "stg_customers", "stg_orders", "stg_payments", "orders", "customer_orders",
    "customers", "daily_revenue", "segment_summary", "payment_methods",
)  # fmt: skip
"""The models that are views (``int_order_payments`` is ephemeral)."""
STORED = ("orders", "customer_orders", "customers", "segment_summary", "payment_methods")
SEGMENTS = ("consumer", "smb", "enterprise", None)
STATUSES = ("placed", "shipped", "completed", "returned")
METHODS = ("card", "cash", "voucher")
CUSTOMERS = pa.schema(
    [("customer_id", pa.int64()), ("name", pa.string()), ("segment", pa.string())]
)
ORDERS = pa.schema(
    [
        ("order_id", pa.int64()),
        ("customer_id", pa.int64()),
        ("status", pa.string()),
        ("amount_cents", pa.int64()),
        ("order_day", pa.int64()),
    ]
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
FEED = {"delta.enableChangeDataFeed": "true"}


def write_project(root: Path, files: dict[str, str] | None = None, only: bool = False) -> Path:
    """The project under ``root/project``: ``files`` over the shop's, or ``only`` them."""
    project = root / "project"
    for name, text in {**({} if only else PROJECT), **(files or {})}.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip("\n"))
    return project


def write_pipeline(root: Path, extra: str = "") -> Path:
    """``root/pipeline.yaml``: customers and orders from the file, payments from the
    project's source ``meta``, every model and test from the project."""
    path = root / "pipeline.yaml"
    path.write_text(
        "name: shop\nwarehouse: wh\n"
        'spark: {conf: {spark.sql.shuffle.partitions: "2"}}\n'
        "sources:\n"
        "  raw_customers: {format: delta, path: data/customers}\n"
        "  raw_orders: {format: delta, path: data/orders, key: [order_id]}\n"
        "dbt:\n  project: project\n" + extra
    )
    return path


class ShopData:
    """The sources as written, and the ids live in them."""

    def __init__(self, root: Path, seed: int = 7) -> None:
        self.data = root / "data"
        self.rng = random.Random(seed)
        self.epoch = 0
        self.customers = list(range(1, 41))
        self.orders: dict[int, int] = {}
        """Each live order's customer."""
        self.payments: dict[int, dict[str, Any]] = {}
        self.next_order, self.next_payment = 1, 1
        self.write("customers", [self.customer(c) for c in self.customers], "error")
        orders = self.new_orders(120, days=(0, 30))
        self.write("orders", orders, "error")
        (self.data / "payments").mkdir(parents=True)
        self.pay([o["order_id"] for o in orders])

    def customer(self, c: int) -> dict[str, Any]:
        return {"customer_id": c, "name": f"  Name{c} ", "segment": self.rng.choice(SEGMENTS)}

    def new_orders(self, count: int, days: tuple[int, int]) -> list[dict[str, Any]]:
        rows = []
        for _ in range(count):
            o, self.next_order = self.next_order, self.next_order + 1
            c = self.rng.choice(self.customers)
            self.orders[o] = c
            rows.append(
                {
                    "order_id": o,
                    "customer_id": c,
                    "status": self.rng.choice(STATUSES),
                    "amount_cents": self.rng.randrange(500, 20_000),
                    "order_day": self.rng.randrange(*days),
                }
            )
        return rows

    def pay(self, orders: list[int], retracted: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        rows = list(retracted)
        for o in orders:
            p, self.next_payment = self.next_payment, self.next_payment + 1
            row = {
                "payment_id": p,
                "order_id": o,
                "method": self.rng.choice(METHODS),
                "amount_cents": self.rng.randrange(100, 30_000),
                "diff": 1,
            }
            self.payments[p] = row
            rows.append(row)
        table = pa.Table.from_pylist(rows, PAYMENTS)
        pq.write_table(table, self.data / "payments" / f"{self.epoch:04d}.parquet")

    def write(self, name: str, rows: list[dict[str, Any]], mode: str) -> None:
        schema = CUSTOMERS if name == "customers" else ORDERS
        table = pa.Table.from_pylist(rows, schema)
        write_deltalake(str(self.data / name), table, mode=mode, configuration=FEED)  # type: ignore[arg-type]

    def table(self, name: str) -> DeltaTable:
        return DeltaTable(str(self.data / name))

    def change(self) -> None:
        """One epoch: new orders and payments; statuses and amounts changed (one to a
        status the tests do not accept); orders deleted; customers moving segment, one
        deleted (its orders stay: a relationship fails), one added twice (a key that
        is not unique); payments retracted."""
        self.epoch += 1
        rng = self.rng
        live = sorted(self.orders)
        day = 30 + 2 * self.epoch
        orders = self.new_orders(6, days=(day, day + 2))
        self.write("orders", orders, "append")
        for o in rng.sample(live, 3):
            status = "cancelled" if o % 5 == 0 else rng.choice(STATUSES)
            self.table("orders").update(new_values={"status": status}, predicate=f"order_id = {o}")
        for o in rng.sample(live, 2):
            amount = rng.randrange(500, 20_000)
            self.table("orders").update(
                new_values={"amount_cents": amount}, predicate=f"order_id = {o}"
            )
        gone = rng.sample(live, 2)
        self.table("orders").delete(f"order_id IN ({', '.join(map(str, gone))})")
        for o in gone:
            del self.orders[o]
        for c in rng.sample(self.customers, 2):
            segment = rng.choice(SEGMENTS)
            self.table("customers").update(
                updates={"segment": "NULL" if segment is None else f"'{segment}'"},
                predicate=f"customer_id = {c}",
            )
        leaving = rng.choice(self.customers)
        self.table("customers").delete(f"customer_id = {leaving}")
        self.customers.remove(leaving)
        new = max(self.customers) + 1
        self.customers.append(new)
        twice = [self.customer(new)] * (2 if self.epoch == 2 else 1)
        self.write("customers", twice, "append")
        refunded = rng.sample(sorted(self.payments), 2)
        retracted = [{**self.payments.pop(p), "diff": -1} for p in refunded]
        self.pay([o["order_id"] for o in orders] + [rng.choice(live)], retracted)

    def net_payments(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in p.items() if k != "diff"} for p in self.payments.values()]


def dbt_reference(
    spark: SparkSession, project: Path, data: ShopData, schema: str
) -> tuple[dict[str, Counter[str]], dict[str, int]]:
    """Every model's rows (as ``trace_rows.view_contents`` gives a view's) and each
    test's failures, as dbt-core computes them with dbt-spark on ``spark`` over the
    data now: ``dbt seed``, ``dbt run --full-refresh``, ``dbt test``."""
    from dbt.cli.main import dbtRunner

    spark.sql("CREATE SCHEMA IF NOT EXISTS raw")
    for name in ("customers", "orders"):
        spark.sql(f"DROP TABLE IF EXISTS raw.{name}")
        spark.sql(f"CREATE TABLE raw.{name} USING delta LOCATION '{data.data / name}'")
    payments = spark.createDataFrame(
        data.net_payments() or [],
        "payment_id bigint, order_id bigint, method string, amount_cents bigint",
    )
    payments.write.mode("overwrite").saveAsTable("raw.payments")
    profiles = project.parent / "reference-profiles"
    profiles.mkdir(exist_ok=True)
    target = {"type": "spark", "method": "session", "host": "localhost", "schema": schema}
    (profiles / "profiles.yml").write_text(
        json.dumps({"shop": {"target": "ref", "outputs": {"ref": target}}})
    )
    args = [
        "--project-dir", str(project), "--profiles-dir", str(profiles),
        "--target-path", str(project.parent / "reference-target"),
        "--log-path", str(project.parent / "reference-target"), "--quiet",
        "--no-send-anonymous-usage-stats", "--no-version-check",
    ]  # fmt: skip
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    try:
        runner = dbtRunner()
        for step in (["seed", "--full-refresh"], ["run", "--full-refresh"]):
            done = runner.invoke([*step, *args])
            assert done.success, (step, done.exception)
        tested = runner.invoke(["test", *args])
        assert tested.result is not None, tested.exception
    finally:
        spark.conf.set("spark.sql.ansi.enabled", ansi)
    failures = {r.node.name: int(r.failures or 0) for r in tested.result.results}
    models = {}
    for model in MODELS:
        rows = spark.table(f"{schema}.{model}").collect()
        models[model] = Counter(json.dumps(r.asDict(), sort_keys=True, default=str) for r in rows)
    return models, failures
