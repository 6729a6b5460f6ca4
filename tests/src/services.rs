//! The live services of the scenarios (Kafka, HBase, Redis): whether a test may run, and the
//! names that keep concurrent tests apart.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The Kafka broker of `scripts/services.sh up kafka`.
pub const BROKER: &str = "127.0.0.1:9092";
/// The HBase Thrift gateway (thrift1) of `scripts/services.sh up hbase`.
pub const THRIFT1: &str = "127.0.0.1:9090";
/// The HBase Thrift2 gateway of `scripts/services.sh up hbase`.
pub const THRIFT2: &str = "127.0.0.1:9091";
/// The Redis server of `scripts/services.sh up redis`.
pub const REDIS: &str = "127.0.0.1:6379";

/// Whether the tests run in CI (`CI` set, and neither `false` nor `0`): there, a missing
/// service fails a test instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Whether `name` answers on `addr` (within 2 s); when not, `false` with a line on stderr, so
/// the test skips.
///
/// # Panics
/// In CI, when it does not answer, naming `scripts/services.sh up {service}`.
pub fn service_up(addr: &str, name: &str, service: &str) -> bool {
    let sock: SocketAddr = addr.parse().expect("address");
    if TcpStream::connect_timeout(&sock, Duration::from_secs(2)).is_ok() {
        return true;
    }
    assert!(
        !in_ci(),
        "{name} is not running on {addr}: start it with `scripts/services.sh up {service}` (make test does)"
    );
    eprintln!("skipping: {name} is not running on {addr} (scripts/services.sh up {service})");
    false
}

/// Whether Kafka is up, as [`service_up`].
pub fn kafka_up() -> bool {
    service_up(BROKER, "Kafka", "kafka")
}

/// Whether Redis is up, as [`service_up`].
pub fn redis_up() -> bool {
    service_up(REDIS, "Redis", "redis")
}

/// Whether a test against the live HBase goes ahead: `false` (said on stderr, naming `what`
/// is skipped) with `HOURGLASS_SKIP_HBASE=1` outside CI, else `true`.
///
/// # Panics
/// When either Thrift gateway does not answer within 5 s, with what to do about it.
pub fn hbase_up(what: &str) -> bool {
    let ci = in_ci();
    if !ci && std::env::var("HOURGLASS_SKIP_HBASE").is_ok_and(|v| v == "1") {
        eprintln!("HOURGLASS_SKIP_HBASE=1: skipping {what}");
        return false;
    }
    for addr in [THRIFT1, THRIFT2] {
        let sock: SocketAddr = addr.parse().expect("socket address");
        if let Err(e) = TcpStream::connect_timeout(&sock, Duration::from_secs(5)) {
            panic!(
                "the HBase Thrift gateway is not reachable on {addr} ({e}): start it with \
                 `scripts/services.sh up hbase` (`make test` does){}",
                if ci {
                    ""
                } else {
                    ", or set HOURGLASS_SKIP_HBASE=1 to skip the HBase tests"
                }
            );
        }
    }
    true
}

/// A topic or group name no other test or run uses: `hg-{name}-{pid}-{nanos}`.
pub fn unique(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!("hg-{name}-{}-{nanos}", std::process::id())
}
