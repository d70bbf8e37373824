"""The jars Spark's ``s3a://`` filesystem needs, beside the Hadoop PySpark ships.

PySpark ships Hadoop's client (3.5.0 with PySpark 4.2) but not ``hadoop-aws``,
which holds the ``s3a`` filesystem, nor the AWS SDK v2 it calls. Hadoop pairs it
with the SDK's ``bundle`` jar, 690 MB of every AWS service; this set avoids it:
the SDK's modules S3 needs, 33 jars of 12 MB in all, fetched by ``maven_jars``.
Spark's jars already carry what they use beyond the SDK (netty, httpclient,
jackson, slf4j). Of the less obvious ones (each checked by leaving it out of a
parquet and a Delta write and read on ``s3a://``):

- ``analyticsaccelerator-s3``: Hadoop 3.5's default input stream
  (``fs.s3a.input.stream.type``): the filesystem does not start without it;
- ``reactive-streams``: the SDK's async interfaces: s3a does not start without it;
- ``netty-nio-client``: the async HTTP client of the SDK's transfer manager, which
  s3a copies (renames) large files with: committing a 168 MB file failed without it;
- ``apache-client``, ``aws-query-protocol``, ``arns``, ``json-utils``: the sync
  HTTP client, S3's error replies, bucket names and endpoint rules: nothing
  is written without them.

The SDK's event stream modules (``eventstream``, ``http-auth-aws-eventstream``)
serve S3 Select, which s3a no longer calls: all of the above worked without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dd_etl import maven_jars
from dd_etl.maven_jars import Artifact

HADOOP = "3.5.0"
"""The Hadoop of PySpark's jars (``hadoop-client-api``): ``hadoop-aws`` must match it."""
AWS_SDK = "2.35.4"
"""The AWS SDK version ``hadoop-aws`` is built against."""
SDK_MODULES = (
    "annotations",
    "arns",
    "auth",
    "aws-core",
    "aws-query-protocol",
    "aws-xml-protocol",
    "checksums",
    "checksums-spi",
    "crt-core",
    "endpoints-spi",
    "http-auth",
    "http-auth-aws",
    "http-auth-spi",
    "http-client-spi",
    "identity-spi",
    "json-utils",
    "metrics-spi",
    "profiles",
    "protocol-core",
    "regions",
    "retries",
    "retries-spi",
    "s3",
    "s3-transfer-manager",
    "sdk-core",
    "third-party-jackson-core",
    "utils",
    "utils-lite",
    "apache-client",
    "netty-nio-client",
)
OPTIONS = "spark.jars"


def artifacts() -> list[Artifact]:
    """``hadoop-aws`` and the modules of the AWS SDK it uses for S3."""
    return [
        Artifact("org.apache.hadoop", "hadoop-aws", HADOOP),
        *(Artifact("software.amazon.awssdk", module, AWS_SDK) for module in SDK_MODULES),
        Artifact("org.reactivestreams", "reactive-streams", "1.0.4"),
        Artifact("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", "1.3.1"),
    ]


def jars() -> list[Path]:
    """The jar files, fetched first if the cache does not hold them yet."""
    return maven_jars.spark_jars(artifacts())


def spark_options() -> dict[str, str]:
    """The option that gives a session ``s3a://``: its jars."""
    return {OPTIONS: ",".join(str(j) for j in jars())}


def with_jars(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with these jars added to their ``spark.jars`` (none named twice:
    ``DD_ETL_SPARK_JARS`` gives every set the same directory)."""
    given = [jar for jar in options.get(OPTIONS, "").split(",") if jar]
    both = dict.fromkeys([*given, *spark_options()[OPTIONS].split(",")])
    return {**options, OPTIONS: ",".join(both)}


if __name__ == "__main__":
    for jar in jars():
        print(jar)
