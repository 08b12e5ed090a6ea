"""Starting Spark for the audits: a local Spark by default, any cluster by its master URL.

PySpark drives a JVM: without Java nothing starts, so that is checked first
and said plainly. The audits use DataFrame operations only (no Python UDFs),
so a cluster's workers need Java and Spark but no Python packages of ours.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAVA_MISSING = (
    "Java was not found: PySpark needs a Java 17 (or later) runtime. Install one "
    "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME."
)


class JavaMissing(RuntimeError):
    """No Java runtime to run Spark with."""


def java_command() -> str:
    """The java executable Spark will use (JAVA_HOME's, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("java")
    if found is None:
        raise JavaMissing(JAVA_MISSING)
    return found


def start_session(master: str, app_name: str, driver_memory: str) -> SparkSession:
    """A SparkSession on ``master`` (``local[*]``, ``local[2]``, ``spark://HOST:PORT``...)."""
    java_command()
    from pyspark.sql import SparkSession

    local = master.startswith("local")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # ours is on stderr (progress.py)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if local:
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    cores = session.sparkContext.defaultParallelism
    session.conf.set("spark.sql.shuffle.partitions", str(max(4, 4 * cores)))
    return session
