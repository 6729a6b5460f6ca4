#!/usr/bin/env python3
"""Check the local HBase Thrift gateways (started by scripts/services.sh).

Default: connect to the Thrift1 gateway (127.0.0.1:9090, buffered transport,
binary protocol -- the same wire format as the Rust `hbase-thrift` crate) and
list the tables.

  --thrift2          also call the Thrift2 gateway (127.0.0.1:9091,
                     THBaseService.tableExists) using the IDL shipped inside
                     the hbase-thrift jar.
  --smoke            create a throwaway table with a COMPRESSION=>'SNAPPY'
                     family, put a cell, get it back (through Thrift1 and, with
                     --thrift2, through Thrift2 too), then drop the table.
  --wait SECONDS     retry until the checks pass or SECONDS elapse (readiness).

Needs `happybase` (which brings `thriftpy2`); scripts/services.sh creates
.services/venv with it: .services/venv/bin/python scripts/hbase_check.py --smoke
"""

import argparse
import glob
import os
import sys
import tempfile
import time
import zipfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_LIB = os.path.join(REPO_ROOT, ".services", "hbase", "lib")
THRIFT2_IDL_IN_JAR = "org/apache/hadoop/hbase/thrift2/hbase.thrift"


def log(msg):
    print(msg, flush=True)


def thrift1_connection(args):
    import happybase

    return happybase.Connection(
        host=args.host,
        port=args.port,
        timeout=int(args.rpc_timeout * 1000),
        transport="buffered",
        protocol="binary",
        autoconnect=True,
    )


def check_thrift1(args):
    conn = thrift1_connection(args)
    try:
        tables = [t.decode() for t in conn.tables()]
    finally:
        conn.close()
    return tables


_thrift2_module = None


def load_thrift2_module(lib_dir):
    """Load the Thrift2 IDL from the hbase-thrift jar with thriftpy2."""
    global _thrift2_module
    if _thrift2_module is not None:
        return _thrift2_module
    import thriftpy2

    jars = sorted(glob.glob(os.path.join(lib_dir, "hbase-thrift-*.jar")))
    if not jars:
        raise RuntimeError("no hbase-thrift-*.jar in %s (run scripts/services.sh up hbase)" % lib_dir)
    with zipfile.ZipFile(jars[-1]) as zf:
        idl = zf.read(THRIFT2_IDL_IN_JAR)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hbase2.thrift")
        with open(path, "wb") as f:
            f.write(idl)
        _thrift2_module = thriftpy2.load(path, module_name="hbase2_thrift")
    return _thrift2_module


def thrift2_client(args):
    from thriftpy2.rpc import make_client
    from thriftpy2.protocol import TBinaryProtocolFactory
    from thriftpy2.transport import TBufferedTransportFactory

    mod = load_thrift2_module(args.lib)
    return mod, make_client(
        mod.THBaseService,
        args.host,
        args.thrift2_port,
        timeout=int(args.rpc_timeout * 1000),
        proto_factory=TBinaryProtocolFactory(),
        trans_factory=TBufferedTransportFactory(),
    )


def check_thrift2(args):
    mod, client = thrift2_client(args)
    try:
        # any real RPC proves the gateway is serving; the table need not exist
        client.tableExists(mod.TTableName(ns=b"default", qualifier=b"hourglass_readiness_probe"))
    finally:
        client.close()


def smoke(args):
    name = "hourglass_smoke_%d_%d" % (os.getpid(), int(time.time()))
    conn = thrift1_connection(args)
    try:
        log("smoke: creating table %s with family f (COMPRESSION=SNAPPY)" % name)
        conn.create_table(name, {"f": dict(max_versions=1, compression="SNAPPY")})
        try:
            table = conn.table(name)
            fams = table.families()
            comp = fams[b"f"]["compression"]
            if comp.upper() != b"SNAPPY":
                raise RuntimeError("family f has compression %r, expected SNAPPY" % comp)
            # the put only succeeds once the region of the SNAPPY table is open
            table.put(b"row-1", {b"f:q": b"hello-snappy"})
            got = table.row(b"row-1")
            if got.get(b"f:q") != b"hello-snappy":
                raise RuntimeError("thrift1 get returned %r" % (got,))
            log("smoke: thrift1 put/get OK (compression=%s)" % comp.decode())
            if args.thrift2:
                mod, client = thrift2_client(args)
                try:
                    res = client.get(name.encode(), mod.TGet(row=b"row-1"))
                    vals = {(c.family, c.qualifier): c.value for c in (res.columnValues or [])}
                    if vals.get((b"f", b"q")) != b"hello-snappy":
                        raise RuntimeError("thrift2 get returned %r" % (res,))
                    client.put(
                        name.encode(),
                        mod.TPut(row=b"row-2", columnValues=[mod.TColumnValue(family=b"f", qualifier=b"q", value=b"v2")]),
                    )
                    res = client.get(name.encode(), mod.TGet(row=b"row-2"))
                    if not res.columnValues or res.columnValues[0].value != b"v2":
                        raise RuntimeError("thrift2 put/get returned %r" % (res,))
                finally:
                    client.close()
                log("smoke: thrift2 get/put/get OK")
        finally:
            log("smoke: dropping table %s" % name)
            conn.delete_table(name, disable=True)
    finally:
        conn.close()


def run_checks(args):
    tables = check_thrift1(args)
    if args.thrift2:
        check_thrift2(args)
    return tables


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9090, help="Thrift1 port (default 9090)")
    ap.add_argument("--thrift2-port", type=int, default=9091, help="Thrift2 port (default 9091)")
    ap.add_argument("--thrift2", action="store_true", help="also check the Thrift2 gateway")
    ap.add_argument("--lib", default=DEFAULT_LIB, help="folder holding hbase-thrift-*.jar (Thrift2 IDL)")
    ap.add_argument("--smoke", action="store_true", help="create/put/get/drop a SNAPPY table")
    ap.add_argument("--wait", type=float, default=0, help="retry for up to this many seconds")
    ap.add_argument("--rpc-timeout", type=float, default=60, help="socket timeout per call, seconds")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args()

    deadline = time.monotonic() + args.wait
    attempt = 0
    while True:
        attempt += 1
        try:
            tables = run_checks(args)
            break
        except Exception as e:  # noqa: BLE001 - report any failure, retry while waiting
            if time.monotonic() >= deadline:
                print("hbase_check: FAILED after %d attempt(s): %s: %s" % (attempt, type(e).__name__, e), file=sys.stderr)
                return 1
            time.sleep(1)

    if not args.quiet:
        log("thrift1 %s:%d OK, tables: %s" % (args.host, args.port, ", ".join(tables) if tables else "(none)"))
        if args.thrift2:
            log("thrift2 %s:%d OK" % (args.host, args.thrift2_port))
    if args.smoke:
        try:
            smoke(args)
        except Exception as e:  # noqa: BLE001
            print("hbase_check: SMOKE FAILED: %s: %s" % (type(e).__name__, e), file=sys.stderr)
            return 1
        log("smoke: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
