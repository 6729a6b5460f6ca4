//! Retry policy: which failures heal by themselves, and capped exponential backoff for those.

use std::time::Instant;

use super::config::RetryPolicy;
use super::Error;

/// Exception names and messages of HBase failures that can never heal by retrying, checked first
/// (a `RetriesExhaustedWithDetailsException` may wrap any of them).
const FATAL: &[&str] = &[
    "tablenotfoundexception",
    "nosuchcolumnfamilyexception",
    "tablenotenabledexception",
    "tableexistsexception",
    "donotretryioexception",
    "illegalargumentexception",
    "accessdeniedexception",
    "failedsanitycheckexception",
    "unknownprotocolexception",
];

/// Exception names and messages of transient HBase conditions: regions moving or opening,
/// servers busy, starting or restarting, and timeouts between the gateway and the servers.
const TRANSIENT: &[&str] = &[
    "notservingregionexception",
    "regionmovedexception",
    "regionopeningexception",
    "regionofflineexception",
    "region is moving",
    "is not online",
    "regiontoobusyexception",
    "callqueuetoobigexception",
    "calldroppedexception",
    "servertoobusyexception",
    "servernotrunningyetexception",
    "server is not running",
    "pleaseholdexception",
    "masternotrunningexception",
    "regionserverstoppedexception",
    "regionserverabortedexception",
    "noserverforregionexception",
    "failedserverexception",
    "connectexception",
    "connection refused",
    "connectionclosingexception",
    "connectionclosedexception",
    "sockettimeoutexception",
    "calltimeoutexception",
    "timeoutioexception",
    "timed out",
    "retriesexhaustedexception",
];

/// Whether the call that failed with `e` may succeed if made again later.
///
/// Transport failures (connection refused, reset, broken pipe, timeouts) are retriable; so are
/// HBase's transient conditions (region moving or not serving, region or call queue too busy,
/// server not running yet, please hold, …). Missing tables or families, illegal arguments,
/// protocol mismatches and schema differences are not. An HBase error matching neither list
/// follows HBase's own `canRetry` flag (false for a `DoNotRetryIOException`), and is not retried
/// without one.
pub fn is_retriable(e: &Error) -> bool {
    match e {
        Error::Transport { .. } => true,
        Error::Server {
            message, can_retry, ..
        } => {
            let lower = message.to_ascii_lowercase();
            if FATAL.iter().any(|p| lower.contains(p)) {
                false
            } else if TRANSIENT.iter().any(|p| lower.contains(p)) {
                true
            } else {
                can_retry.unwrap_or(false)
            }
        }
        Error::GaveUp { .. }
        | Error::TableNotFound { .. }
        | Error::TablesMissing { .. }
        | Error::IllegalArgument { .. }
        | Error::Protocol { .. }
        | Error::SchemaMismatch { .. } => false,
    }
}

/// Runs `op` until it succeeds, fails with a non-retriable error, or `policy.max_elapsed` has
/// passed; sleeps a capped exponential backoff between attempts and logs a warning naming
/// `what` and the attempt count on each retry.
///
/// # Errors
/// The first non-retriable error, or [`Error::GaveUp`] wrapping the last retriable one.
pub(crate) fn retrying<T>(
    policy: &RetryPolicy,
    what: &str,
    mut op: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let started = Instant::now();
    let mut attempt: u32 = 1;
    loop {
        match op() {
            Ok(value) => {
                if attempt > 1 {
                    tracing::warn!(
                        attempts = attempt,
                        elapsed_s = started.elapsed().as_secs_f64(),
                        "{what}: succeeded after retries"
                    );
                }
                return Ok(value);
            }
            Err(e) if !is_retriable(&e) => return Err(e),
            Err(e) => {
                let delay = policy.backoff(attempt);
                let elapsed = started.elapsed();
                if policy.max_elapsed.is_some_and(|max| elapsed + delay > max) {
                    return Err(Error::GaveUp {
                        attempts: attempt,
                        elapsed_s: elapsed.as_secs_f64(),
                        last: Box::new(e),
                    });
                }
                tracing::warn!(
                    attempt,
                    retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "{what}: retriable HBase failure, retrying: {e}"
                );
                std::thread::sleep(delay);
                attempt = attempt.saturating_add(1);
            }
        }
    }
}
