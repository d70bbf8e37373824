"""The dd_etl server: a Spark driver that outlives one ``dd-etl`` command.

A fresh ``dd-etl run`` of the demo spends most of its time starting Spark and on a
JVM that has compiled nothing yet; the same run in a process that ran one before
is two to three times faster. So ``dd-etl`` hands its command to a server process
that keeps its SparkSession between commands (``client``, ``server``), as Gradle
and sbt do with their JVMs. The server runs one command at a time on the caller's
own standard streams, working directory and environment; it is told apart by
everything its session was built from (``identity``), so changed code or settings
start a new one. Killing a command kills its server: a run is crash-safe, and the
next command starts a new server. ``DD_ETL_SERVER=off`` runs every command in its
own process.
"""
