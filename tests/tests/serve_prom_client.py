"""Fetches a range from `hourglass serve` with the real Prometheus API client from PyPI.

Usage: serve_prom_client.py URL QUERY START END STEP
Prints the values of every series as JSON: [{"metric": {...}, "values": [[ts, "v"], ...]}].
Run by tests/tests/serve_clients.rs, which compares them with `hourglass query curve`.
"""

import datetime
import json
import sys

from prometheus_api_client import PrometheusConnect


def main() -> None:
    url, query, start, end, step = sys.argv[1:6]
    prom = PrometheusConnect(url=url, disable_ssl=True)
    utc = datetime.timezone.utc
    result = prom.custom_query_range(
        query,
        start_time=datetime.datetime.fromtimestamp(int(start), tz=utc),
        end_time=datetime.datetime.fromtimestamp(int(end), tz=utc),
        step=step,
    )
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
