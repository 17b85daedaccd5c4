#!/usr/bin/env python3
"""The Python engines of `prefetch-bench --suite peers`: Polars, DuckDB, PyArrow,
and datafusion-python, stock and with this project's wheel.

prefetch-bench starts this script once per measured run, so every run is a
fresh process whose peak RSS is its own:

    peers.py probe [--store STORE]
        One JSON line: for each engine, whether it imports (and, for DuckDB,
        whether the extensions the store needs load offline; for PyArrow,
        whether it has the store's filesystem), its version or the error.

    peers.py run --engine ENGINE --store STORE --endpoint http://127.0.0.1:PORT \
                 --bucket B --table NAME=PREFIX [--table ...] [--file NAME=KEY ...] \
                 --query NAME --sql SQL --access-key K --secret-key S --region R \
                 --account A --account-key AK [--partitions N] [--setting K=V ...]
        Runs one query, reading `PREFIX*.parquet` of bucket B for each table
        through the engine's own client for STORE (s3, gcs, azure or http;
        `--endpoint` is the server's, or the proxy's in front of it), and
        prints one JSON line: rows, checksum,
        wall_ms (from before the tables are opened to the last row in Python
        objects; process start and imports excluded), peak_rss_bytes
        (VmHWM of this process) — or {"error": ...}.

        The clients per store:
          s3     Polars storage_options aws_*; DuckDB httpfs S3 secret;
                 PyArrow S3FileSystem.
          gcs    Polars google_service_account_key with gcs_base_url and
                 disable_oauth (object_store's way to fake-gcs-server); DuckDB
                 httpfs GCS secret (the S3-interoperable XML API, HMAC keys);
                 PyArrow GcsFileSystem (JSON API, anonymous).
          azure  Polars azure_* (account, key, endpoint); DuckDB azure
                 extension (connection string); PyArrow AzureFileSystem.
          http   Polars and DuckDB read the file URLs given by --file (HTTP has
                 no listing they use); PyArrow has no HTTP filesystem.
        datafusion-python (stock) registers the store's object_store client
        (datafusion.object_store) and `register_parquet`s each table;
        datafusion-python-prefetch registers a `datafusion_prefetch.ParquetTable`
        per table, its store from the same storage_options as Polars'. Both
        run the DataFusion dialect of the query (--sql is the Rust side's),
        on --partitions target partitions; the prefetching one takes the
        --setting prefetch.* values (SET through PrefetchConfig;
        memory_limit through set_memory_limit) as the Rust side's does.

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

ENGINES = ["polars", "duckdb", "pyarrow", "datafusion-python", "datafusion-python-prefetch"]
STORES = ["s3", "gcs", "azure", "http"]
# Each store's URL scheme, as object_store, Polars, DuckDB and DataFusion spell it.
SCHEMES = {"s3": "s3", "gcs": "gs", "azure": "az", "http": "http"}


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


def duckdb_extension_path(name):
    """The extension shipped by the duckdb-extension-NAME wheel."""
    import importlib

    module = importlib.import_module(f"duckdb_extension_{name}")
    root = os.path.dirname(module.__file__)
    found = glob.glob(os.path.join(root, "extensions", "*", f"{name}.duckdb_extension"))
    if not found:
        raise RuntimeError(f"no {name}.duckdb_extension under {root}")
    return found[0]


def duckdb_extensions(store):
    """The extensions DuckDB needs for `store`: httpfs, and azure for Azure."""
    return ["httpfs", "azure"] if store == "azure" else ["httpfs"]


def duckdb_connect(store="s3"):
    import duckdb

    # Never download: the extensions come from PyPI with the matching version.
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    for name in duckdb_extensions(store):
        con.execute(f"LOAD '{duckdb_extension_path(name)}'")
    return con


def probe(store):
    report = {}
    for engine in ENGINES:
        try:
            if engine == "polars":
                import polars

                version = polars.__version__
            elif engine == "duckdb":
                import duckdb

                duckdb_connect(store).close()
                extensions = " + ".join(
                    f"{name} (duckdb-extension-{name})" for name in duckdb_extensions(store)
                )
                version = f"{duckdb.__version__} + {extensions}"
            elif engine == "pyarrow":
                import pyarrow
                import pyarrow.dataset  # noqa: F401
                import pyarrow.fs

                filesystem = PYARROW_FILESYSTEMS.get(store)
                if filesystem and not hasattr(pyarrow.fs, filesystem):
                    raise RuntimeError(f"this pyarrow has no pyarrow.fs.{filesystem}")
                version = pyarrow.__version__
            elif engine == "datafusion-python":
                import datafusion

                version = datafusion.__version__
            else:
                import datafusion
                import datafusion_prefetch

                # A debug wheel is several times slower: say which this is.
                profile = getattr(datafusion_prefetch._internal, "BUILD_PROFILE", "unknown")
                version = (
                    f"{datafusion_prefetch.__version__} ({profile} wheel) "
                    f"on datafusion {datafusion.__version__}"
                )
            report[engine] = {"ok": True, "version": version}
        except Exception as e:  # noqa: BLE001 - any failure means: skip the engine
            error = f"{type(e).__name__}: {e}"
            if isinstance(e, ImportError) and engine == "datafusion-python-prefetch":
                error += " (bash benches/peers/setup.sh --wheel builds and installs it)"
            report[engine] = {"ok": False, "error": error}
    return report


# The pyarrow.fs filesystem of each store PyArrow has one for.
PYARROW_FILESYSTEMS = {"s3": "S3FileSystem", "gcs": "GcsFileSystem", "azure": "AzureFileSystem"}


def host_port(endpoint):
    return endpoint.split("://", 1)[1].rstrip("/")


def azure_endpoint(args):
    """The account's blob endpoint on Azurite (path style)."""
    return f"{args.endpoint.rstrip('/')}/{args.account}"


def table_urls(args, tables):
    """Each table's folder as a URL: scheme://bucket/prefix, or over HTTP
    under the server's root."""
    if args.store == "http":
        root = f"{args.endpoint.rstrip('/')}/{args.bucket}"
    else:
        root = f"{SCHEMES[args.store]}://{args.bucket}"
    return {name: f"{root}/{prefix}" for name, prefix in tables}


def table_sources(args, tables):
    """Each table's files: a glob under its folder's URL, or over HTTP (no
    listing) the URLs of its --file keys."""
    if args.store != "http":
        return {name: f"{url}*.parquet" for name, url in table_urls(args, tables).items()}
    files = [tuple(f.split("=", 1)) for f in args.file or []]
    sources = {}
    for name, _ in tables:
        urls = [f"{args.endpoint.rstrip('/')}/{args.bucket}/{key}" for t, key in files if t == name]
        if not urls:
            raise ValueError(f"--store http needs --file {name}=KEY for table {name}")
        sources[name] = urls
    return sources


def object_store_options(args):
    """object_store's storage options for the store (Polars' and
    datafusion_prefetch's, both object_store clients); None over HTTP."""
    if args.store == "s3":
        return {
            "aws_access_key_id": args.access_key,
            "aws_secret_access_key": args.secret_key,
            "aws_region": args.region,
            "aws_endpoint_url": args.endpoint,
            "aws_allow_http": "true",
            "aws_virtual_hosted_style_request": "false",
        }
    if args.store == "gcs":
        # object_store's way to fake-gcs-server: a service-account key that
        # names the base URL and turns OAuth off.
        key = {
            "gcs_base_url": args.endpoint.rstrip("/"),
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
        return {"google_service_account_key": json.dumps(key)}
    if args.store == "azure":
        return {
            "azure_storage_account_name": args.account,
            "azure_storage_account_key": args.account_key,
            "azure_endpoint": azure_endpoint(args),
            "azure_allow_http": "true",
        }
    return None


def run_polars(args, tables):
    import polars as pl

    options = object_store_options(args)
    started = time.perf_counter()
    frames = {
        name: pl.scan_parquet(source, storage_options=options)
        for name, source in table_sources(args, tables).items()
    }
    rows = pl.SQLContext(frames=frames).execute(args.sql, eager=False).collect().rows()
    return started, rows


def run_duckdb(args, tables):
    con = duckdb_connect(args.store)
    if args.store in ("s3", "gcs"):
        # GCS through its S3-interoperable XML API with HMAC keys, which
        # fake-gcs-server serves (and does not check).
        region = f"REGION '{args.region}'," if args.store == "s3" else ""
        con.execute(
            f"""CREATE SECRET peers (TYPE {args.store}, KEY_ID '{args.access_key}',
                SECRET '{args.secret_key}', {region} ENDPOINT '{host_port(args.endpoint)}',
                URL_STYLE 'path', USE_SSL false)"""
        )
    elif args.store == "azure":
        con.execute(
            f"""CREATE SECRET peers (TYPE azure, CONNECTION_STRING
                'DefaultEndpointsProtocol=http;AccountName={args.account};AccountKey={args.account_key};BlobEndpoint={azure_endpoint(args)};')"""
        )
    started = time.perf_counter()
    for name, source in table_sources(args, tables).items():
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet({source!r})")
    rows = con.execute(args.sql).fetchall()
    return started, rows


def datafusion_python_store(args):
    """datafusion-python's own object_store client for the store, and the
    host it is registered under (the bucket, or for HTTP the server)."""
    from datafusion import object_store

    if args.store == "s3":
        store = object_store.AmazonS3(
            bucket_name=args.bucket,
            region=args.region,
            access_key_id=args.access_key,
            secret_access_key=args.secret_key,
            endpoint=args.endpoint,
            allow_http=True,
        )
        return store, args.bucket
    if args.store == "gcs":
        # Its only option is a service-account file: the same key Polars is
        # given inline (base URL, OAuth off), written to a file.
        import tempfile

        options = object_store_options(args)
        key = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        with key:
            key.write(options["google_service_account_key"])
        store = object_store.GoogleCloud(args.bucket, service_account_path=key.name)
        os.unlink(key.name)
        return store, args.bucket
    if args.store == "azure":
        # Its emulator mode (Azurite's well-known account and key) reads the
        # endpoint from AZURITE_BLOB_STORAGE_URL.
        os.environ["AZURITE_BLOB_STORAGE_URL"] = args.endpoint.rstrip("/")
        store = object_store.MicrosoftAzure(args.bucket, use_emulator=True, allow_http=True)
        return store, args.bucket
    return object_store.Http(args.endpoint), host_port(args.endpoint)


def run_datafusion_python(args, tables, prefetch):
    from datafusion import SessionConfig, SessionContext

    config = SessionConfig().with_target_partitions(args.partitions)
    settings = [tuple(s.split("=", 1)) for s in args.setting or []]
    if prefetch:
        import datafusion_prefetch as dp

        ctx = SessionContext(config.with_extension(dp.PrefetchConfig()))
        for key, value in settings:
            if key == "memory_limit":
                dp.set_memory_limit(value)
            else:
                ctx.sql(f"SET prefetch.{key} = '{value}'")
        options = object_store_options(args)
    else:
        ctx = SessionContext(config)
        store, host = datafusion_python_store(args)
    started = time.perf_counter()
    if not prefetch:
        # datafusion-python registers it under scheme + host.
        ctx.register_object_store(f"{SCHEMES[args.store]}://", store, host)
    for name, url in table_urls(args, tables).items():
        if prefetch:
            ctx.register_table(name, dp.ParquetTable(url, storage_options=options))
        else:
            ctx.register_parquet(name, url)
    table = ctx.sql(args.sql).to_arrow_table()
    # By position: a dict per row would merge columns of the same name.
    rows = list(zip(*(column.to_pylist() for column in table.columns)))
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
    if args.store == "s3":
        fs = pafs.S3FileSystem(
            access_key=args.access_key,
            secret_key=args.secret_key,
            region=args.region,
            endpoint_override=host_port(args.endpoint),
            scheme="http",
        )
    elif args.store == "gcs":
        fs = pafs.GcsFileSystem(
            anonymous=True, endpoint_override=host_port(args.endpoint), scheme="http"
        )
    elif args.store == "azure":
        # Azurite has no Data Lake (dfs) endpoint: both point at the blob
        # service, which answers the hierarchical-namespace check with "no".
        fs = pafs.AzureFileSystem(
            account_name=args.account,
            account_key=args.account_key,
            blob_storage_authority=host_port(args.endpoint),
            blob_storage_scheme="http",
            dfs_storage_authority=host_port(args.endpoint),
            dfs_storage_scheme="http",
        )
    else:
        raise NotImplementedError(
            "PyArrow has no HTTP filesystem; fsspec's would be another client"
        )
    parquet = ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True)
    )
    started = time.perf_counter()
    datasets = {}
    for name, prefix in tables:
        # Listed explicitly (one LIST): discovering a folder would first HEAD
        # it as an object, which s3s-fs answers with a 500 instead of a 404.
        folder = f"{args.bucket}/{prefix}"
        if args.store != "s3":
            folder = folder.rstrip("/")
        listed = fs.get_file_info(pafs.FileSelector(folder, recursive=True))
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
    engine = {
        "polars": run_polars,
        "duckdb": run_duckdb,
        "pyarrow": run_pyarrow,
        "datafusion-python": lambda a, t: run_datafusion_python(a, t, prefetch=False),
        "datafusion-python-prefetch": lambda a, t: run_datafusion_python(a, t, prefetch=True),
    }[args.engine]
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
    p = sub.add_parser("probe")
    p.add_argument("--store", choices=STORES, default="s3")
    r = sub.add_parser("run")
    r.add_argument("--engine", choices=ENGINES, required=True)
    r.add_argument("--store", choices=STORES, default="s3")
    r.add_argument("--endpoint", required=True)
    r.add_argument("--bucket", required=True)
    r.add_argument("--table", action="append", required=True, help="NAME=PREFIX")
    r.add_argument("--file", action="append", help="NAME=KEY: a table's file (http)")
    r.add_argument("--query", required=True)
    r.add_argument("--sql", required=True)
    r.add_argument("--access-key", default="")
    r.add_argument("--secret-key", default="")
    r.add_argument("--region", default="")
    r.add_argument("--account", default="")
    r.add_argument("--account-key", default="")
    r.add_argument("--partitions", type=int, default=os.cpu_count() or 1)
    r.add_argument("--setting", action="append", help="K=V: a prefetch.* setting")
    args = parser.parse_args()
    if args.command == "probe":
        print(json.dumps(probe(args.store)))
        return 0
    try:
        print(json.dumps(run(args)))
        return 0
    except Exception as e:  # noqa: BLE001 - reported to prefetch-bench, which goes on
        print(json.dumps({"error": f"{type(e).__name__}: {e}".replace("\n", " ")}))
        return 1


if __name__ == "__main__":
    sys.exit(main())
