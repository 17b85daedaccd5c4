#!/usr/bin/env python3
"""The Python engines of `prefetch-bench --suite peers`: Polars, DuckDB, PyArrow.

prefetch-bench starts this script once per measured run, so every run is a
fresh process whose peak RSS is its own:

    peers.py probe
        One JSON line: for each engine, whether it imports (and, for DuckDB,
        whether its httpfs extension loads offline), its version or the error.

    peers.py run --engine ENGINE --endpoint http://127.0.0.1:PORT --bucket B \
                 --table NAME=PREFIX [--table ...] --query NAME --sql SQL \
                 --access-key K --secret-key S --region R
        Runs one query, reading `s3://B/PREFIX*.parquet` for each table through
        the engine's own S3 client, and prints one JSON line: rows, checksum,
        wall_ms (from before the tables are opened to the last row in Python
        objects; process start and imports excluded), peak_rss_bytes
        (VmHWM of this process) — or {"error": ...}.

The checksum is engine-independent and matches the Rust side
(`peers::canonical_checksum`): every value as text (numbers as floats to five
significant digits, so that a decimal average rounded to six places and
a float average agree),
cells joined by U+001F, rows sorted, joined by newlines, FNV-1a 64.

Only the standard library is needed for `probe`; each engine imports its own
package, so a missing engine is reported, not fatal.
"""

import argparse
import datetime
import decimal
import glob
import json
import os
import resource
import sys
import time

ENGINES = ["polars", "duckdb", "pyarrow"]


# --- the engine-independent checksum ---------------------------------------


def canonical_number(x):
    x = float(x)
    if x == 0:
        return "0"
    mantissa, exponent = ("%.4e" % x).split("e")
    return f"{mantissa}e{int(exponent)}"


def canonical_cell(value):
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        return canonical_number(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def canonical_checksum(rows):
    lines = sorted("\x1f".join(canonical_cell(v) for v in row) for row in rows)
    if os.environ.get("PEERS_PRINT_ROWS"):
        for line in lines:
            print(line.replace("\x1f", " | "), file=sys.stderr)
    return len(lines), "%016x" % fnv1a64("\n".join(lines).encode("utf-8"))


# --- engines ------------------------------------------------------------------


def duckdb_httpfs_path():
    """The httpfs extension shipped by the duckdb-extension-httpfs wheel."""
    import duckdb_extension_httpfs

    root = os.path.dirname(duckdb_extension_httpfs.__file__)
    found = glob.glob(os.path.join(root, "extensions", "*", "httpfs.duckdb_extension"))
    if not found:
        raise RuntimeError(f"no httpfs.duckdb_extension under {root}")
    return found[0]


def duckdb_connect():
    import duckdb

    # Never download: the extension comes from PyPI with the matching version.
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    con.execute(f"LOAD '{duckdb_httpfs_path()}'")
    return con


def probe():
    report = {}
    for engine in ENGINES:
        try:
            if engine == "polars":
                import polars

                version = polars.__version__
            elif engine == "duckdb":
                import duckdb

                duckdb_connect().close()
                version = f"{duckdb.__version__} + httpfs (duckdb-extension-httpfs)"
            else:
                import pyarrow
                import pyarrow.dataset  # noqa: F401
                import pyarrow.fs  # noqa: F401

                version = pyarrow.__version__
            report[engine] = {"ok": True, "version": version}
        except Exception as e:  # noqa: BLE001 - any failure means: skip the engine
            report[engine] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    return report


def host_port(endpoint):
    return endpoint.split("://", 1)[1].rstrip("/")


def run_polars(args, tables):
    import polars as pl

    options = {
        "aws_access_key_id": args.access_key,
        "aws_secret_access_key": args.secret_key,
        "aws_region": args.region,
        "aws_endpoint_url": args.endpoint,
        "aws_allow_http": "true",
        "aws_virtual_hosted_style_request": "false",
    }
    started = time.perf_counter()
    frames = {
        name: pl.scan_parquet(f"s3://{args.bucket}/{prefix}*.parquet", storage_options=options)
        for name, prefix in tables
    }
    rows = pl.SQLContext(frames=frames).execute(args.sql, eager=False).collect().rows()
    return started, rows


def run_duckdb(args, tables):
    con = duckdb_connect()
    con.execute(
        f"""CREATE SECRET peers (TYPE s3, KEY_ID '{args.access_key}', SECRET '{args.secret_key}',
            REGION '{args.region}', ENDPOINT '{host_port(args.endpoint)}',
            URL_STYLE 'path', USE_SSL false)"""
    )
    started = time.perf_counter()
    for name, prefix in tables:
        con.execute(
            f"CREATE VIEW {name} AS SELECT * FROM read_parquet('s3://{args.bucket}/{prefix}*.parquet')"
        )
    rows = con.execute(args.sql).fetchall()
    return started, rows


def pyarrow_queries():
    """PyArrow has no SQL: each query by hand, with the same meaning as its SQL."""
    from datetime import date
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    def sum_payload(d):
        t = d["t"].to_table(columns=["payload"])
        return [(pc.sum(pc.cast(t["payload"], pa.float64(), safe=False)).as_py(),)]

    def tpch_q1(d):
        t = d["lineitem"].to_table(
            columns=[
                "l_returnflag",
                "l_linestatus",
                "l_quantity",
                "l_extendedprice",
                "l_discount",
                "l_tax",
            ],
            filter=ds.field("l_shipdate") <= pa.scalar(date(1998, 9, 2)),
        )
        # 1 - discount and 1 + tax fit DECIMAL(4, 2); kept that narrow so the
        # products stay within DECIMAL(38) (exact, like the SQL engines).
        narrow = pa.decimal128(4, 2)
        one = pa.scalar(Decimal("1.00"), narrow)
        keep = pc.cast(pc.subtract(one, pc.cast(t["l_discount"], narrow)), narrow)
        tax = pc.cast(pc.add(one, pc.cast(t["l_tax"], narrow)), narrow)
        disc_price = pc.multiply(t["l_extendedprice"], keep)
        charge = pc.multiply(disc_price, tax)
        t = t.append_column("disc_price", disc_price).append_column("charge", charge)
        for column in ["l_quantity", "l_extendedprice", "l_discount"]:
            # The averages are over DOUBLE, as in the SQL.
            t = t.append_column(f"{column}_f", pc.cast(t[column], pa.float64()))
        g = t.group_by(["l_returnflag", "l_linestatus"]).aggregate(
            [
                ("l_quantity", "sum"),
                ("l_extendedprice", "sum"),
                ("disc_price", "sum"),
                ("charge", "sum"),
                ("l_quantity_f", "mean"),
                ("l_extendedprice_f", "mean"),
                ("l_discount_f", "mean"),
                ("l_quantity", "count"),
            ]
        )
        order = [
            "l_returnflag",
            "l_linestatus",
            "l_quantity_sum",
            "l_extendedprice_sum",
            "disc_price_sum",
            "charge_sum",
            "l_quantity_f_mean",
            "l_extendedprice_f_mean",
            "l_discount_f_mean",
            "l_quantity_count",
        ]
        g = g.select(order)
        return [tuple(r[c] for c in order) for r in g.to_pylist()]

    def tpch_q6(d):
        f = (
            (ds.field("l_shipdate") >= pa.scalar(date(1994, 1, 1)))
            & (ds.field("l_shipdate") < pa.scalar(date(1995, 1, 1)))
            & (ds.field("l_discount") >= pa.scalar(Decimal("0.05"), pa.decimal128(15, 2)))
            & (ds.field("l_discount") <= pa.scalar(Decimal("0.07"), pa.decimal128(15, 2)))
            & (ds.field("l_quantity") < pa.scalar(Decimal("24.00"), pa.decimal128(15, 2)))
        )
        t = d["lineitem"].to_table(columns=["l_extendedprice", "l_discount"], filter=f)
        return [(pc.sum(pc.multiply(t["l_extendedprice"], t["l_discount"])).as_py(),)]

    def hits_q1(d):
        t = d["hits"].to_table(columns=["AdvEngineID"], filter=ds.field("AdvEngineID") != 0)
        return [(t.num_rows,)]

    def hits_q2(d):
        t = d["hits"].to_table(columns=["AdvEngineID", "ResolutionWidth"])
        return [
            (
                pc.sum(t["AdvEngineID"]).as_py(),
                t.num_rows,
                pc.mean(t["ResolutionWidth"]).as_py(),
            )
        ]

    def hits_q7(d):
        t = d["hits"].to_table(columns=["AdvEngineID"], filter=ds.field("AdvEngineID") != 0)
        g = t.group_by("AdvEngineID").aggregate([("AdvEngineID", "count")])
        return [(r["AdvEngineID"], r["AdvEngineID_count"]) for r in g.to_pylist()]

    def hits_q20(d):
        t = d["hits"].to_table(
            columns=["URL"], filter=pc.match_substring(ds.field("URL"), "google")
        )
        return [(t.num_rows,)]

    return {
        "cross_file_sum": sum_payload,
        "tpch_q1": tpch_q1,
        "tpch_q6": tpch_q6,
        "hits_q1": hits_q1,
        "hits_q2": hits_q2,
        "hits_q7": hits_q7,
        "hits_q20": hits_q20,
    }


def run_pyarrow(args, tables):
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    query = pyarrow_queries().get(args.query)
    if query is None:
        raise NotImplementedError(f"no PyArrow version of {args.query}")
    fs = pafs.S3FileSystem(
        access_key=args.access_key,
        secret_key=args.secret_key,
        region=args.region,
        endpoint_override=host_port(args.endpoint),
        scheme="http",
    )
    parquet = ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True)
    )
    started = time.perf_counter()
    datasets = {}
    for name, prefix in tables:
        # Listed explicitly (one LIST): discovering a folder would first HEAD
        # it as an object, which s3s-fs answers with a 500 instead of a 404.
        listed = fs.get_file_info(pafs.FileSelector(f"{args.bucket}/{prefix}", recursive=True))
        paths = sorted(i.path for i in listed if i.path.endswith(".parquet"))
        dataset = ds.dataset(paths, filesystem=fs, format=parquet)
        # Files whose Arrow schema says string_view (tpchgen's) are read as
        # string: PyArrow's filter kernels do not take string_view.
        if any(f.type == pa.string_view() for f in dataset.schema):
            schema = pa.schema(
                pa.field(f.name, pa.string(), f.nullable) if f.type == pa.string_view() else f
                for f in dataset.schema
            )
            dataset = ds.dataset(paths, filesystem=fs, format=parquet, schema=schema)
        datasets[name] = dataset
    return started, query(datasets)


def run(args):
    tables = [tuple(t.split("=", 1)) for t in args.table]
    engine = {"polars": run_polars, "duckdb": run_duckdb, "pyarrow": run_pyarrow}[args.engine]
    started, rows = engine(args, tables)
    wall_ms = (time.perf_counter() - started) * 1e3
    count, checksum = canonical_checksum(rows)
    return {
        "rows": count,
        "checksum": checksum,
        "wall_ms": wall_ms,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def peak_rss_bytes():
    """This process's peak RSS since exec: VmHWM. (getrusage's ru_maxrss
    also counts the parent's memory before exec, when spawned by vfork.)"""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    # Credentials are explicit; never ask an instance-metadata endpoint.
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("probe")
    r = sub.add_parser("run")
    r.add_argument("--engine", choices=ENGINES, required=True)
    r.add_argument("--endpoint", required=True)
    r.add_argument("--bucket", required=True)
    r.add_argument("--table", action="append", required=True, help="NAME=PREFIX")
    r.add_argument("--query", required=True)
    r.add_argument("--sql", required=True)
    r.add_argument("--access-key", required=True)
    r.add_argument("--secret-key", required=True)
    r.add_argument("--region", required=True)
    args = parser.parse_args()
    if args.command == "probe":
        print(json.dumps(probe()))
        return 0
    try:
        print(json.dumps(run(args)))
        return 0
    except Exception as e:  # noqa: BLE001 - reported to prefetch-bench, which goes on
        print(json.dumps({"error": f"{type(e).__name__}: {e}".replace("\n", " ")}))
        return 1


if __name__ == "__main__":
    sys.exit(main())
