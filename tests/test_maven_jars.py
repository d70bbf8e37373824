"""Jars are named and found in a Maven repository as Maven lays them out, fetched
only when the cache lacks them, and only if their SHA-1 is the published one."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dd_etl import maven_jars, s3_jars
from dd_etl.errors import ConfigError
from dd_etl.maven_jars import JARS_ENV, REPOSITORY_ENV, Artifact

PLAIN = Artifact("org.apache.hadoop", "hadoop-aws", "3.5.0")
WITH_CLASSIFIER = Artifact("org.gaul", "s3proxy", "4.0.0", "jar-with-dependencies")


def test_an_artifact_is_named_as_maven_lays_it_out() -> None:
    assert PLAIN.jar == "hadoop-aws-3.5.0.jar"
    assert PLAIN.file == "org.apache.hadoop_hadoop-aws-3.5.0.jar"
    assert PLAIN.coordinates == "org.apache.hadoop:hadoop-aws:3.5.0"
    assert PLAIN.url("https://repo.example/maven2/") == (
        "https://repo.example/maven2/org/apache/hadoop/hadoop-aws/3.5.0/hadoop-aws-3.5.0.jar"
    )
    assert WITH_CLASSIFIER.jar == "s3proxy-4.0.0-jar-with-dependencies.jar"
    assert WITH_CLASSIFIER.file == "org.gaul_s3proxy-4.0.0-jar-with-dependencies.jar"
    assert WITH_CLASSIFIER.url(maven_jars.MAVEN_CENTRAL) == (
        "https://repo1.maven.org/maven2/org/gaul/s3proxy/4.0.0/"
        "s3proxy-4.0.0-jar-with-dependencies.jar"
    )


def test_only_what_the_cache_lacks_is_fetched_and_only_if_its_sha1_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = b"PK jar bytes"
    published = {"sha1": hashlib.sha1(jar).hexdigest()}
    asked: list[str] = []

    def download(url: str) -> bytes:
        asked.append(url)
        return f"{published['sha1']}  x.jar\n".encode() if url.endswith(".sha1") else jar

    monkeypatch.setattr(maven_jars, "cache", lambda: tmp_path)
    monkeypatch.setattr(maven_jars, "_download", download)
    monkeypatch.setenv(REPOSITORY_ENV, "https://mirror.example")
    (tmp_path / PLAIN.file).write_bytes(b"cached")

    paths = maven_jars.fetched([WITH_CLASSIFIER, PLAIN])
    assert paths == [tmp_path / WITH_CLASSIFIER.file, tmp_path / PLAIN.file]
    assert paths[0].read_bytes() == jar
    url = WITH_CLASSIFIER.url("https://mirror.example")
    assert asked == [url, url + ".sha1"]

    paths[0].unlink()
    published["sha1"] = "0" * 40
    with pytest.raises(ConfigError, match="SHA-1"):
        maven_jars.fetched([WITH_CLASSIFIER])
    assert not paths[0].exists() and not list(tmp_path.glob("*.tmp"))


def test_a_directory_of_jars_is_every_sets_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("delta-spark.jar", "hadoop-aws.jar"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setenv(JARS_ENV, str(tmp_path))
    both = [tmp_path / "delta-spark.jar", tmp_path / "hadoop-aws.jar"]
    assert s3_jars.jars() == both
    given = {"spark.jars": ",".join(str(j) for j in both), "other": "kept"}
    assert s3_jars.with_jars(given) == given  # named once
    assert s3_jars.with_jars({})["spark.jars"] == given["spark.jars"]
