//! How the Kafka clients wait for the brokers: call timeouts, retrying a call that failed,
//! which consumer errors are fatal, and warnings about errors that librdkafka retries itself.

use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// How long the feed's start-up calls to the brokers (committed offsets) may take: a group
/// coordinator that is still loading may be slow to answer.
pub(super) const BROKER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the registry reader's start-up calls (metadata, watermarks) and admin requests may
/// take.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a consumer error that librdkafka retries by itself is logged.
const NOTE_EVERY: Duration = Duration::from_secs(10);

/// Consumer errors that cannot heal by waiting: the job stops.
const FATAL_CODES: &[RDKafkaErrorCode] = &[
    RDKafkaErrorCode::Fatal,
    RDKafkaErrorCode::TopicAuthorizationFailed,
    RDKafkaErrorCode::GroupAuthorizationFailed,
    RDKafkaErrorCode::SaslAuthenticationFailed,
    RDKafkaErrorCode::Authentication,
];

/// Whether a consumer error cannot heal by waiting (the job must stop); every other error is
/// retried by librdkafka.
pub(super) fn is_fatal(e: &KafkaError) -> bool {
    matches!(e, KafkaError::MessageConsumptionFatal(_))
        || e.rdkafka_error_code()
            .is_some_and(|c| FATAL_CODES.contains(&c))
}

/// Calls `attempt` until it succeeds, again after each error (with a warning naming `what`;
/// pauses from 200 ms doubling up to 5 s) for up to `limit` or until `stopped()`. Returns the
/// last error after that.
pub(super) fn retrying<T, E: std::fmt::Display>(
    what: &str,
    limit: Duration,
    stopped: impl Fn() -> bool,
    mut attempt: impl FnMut() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(200);
    loop {
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) if started.elapsed() < limit && !stopped() => {
                tracing::warn!(error = %e, "{what} failed (retrying)");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Says when an error that keeps coming back is worth a warning again: the first time, then at
/// most every 10 s, so a broker that is down does not flood the log.
#[derive(Debug, Default)]
pub struct ErrorNote {
    last: Option<Instant>,
}

impl ErrorNote {
    /// Whether to log the error seen now (and, if so, notes that it was).
    pub fn due(&mut self) -> bool {
        let due = self.last.is_none_or(|t| t.elapsed() >= NOTE_EVERY);
        if due {
            self.last = Some(Instant::now());
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrying_stops_at_the_first_success_or_when_stopped() {
        let mut calls = 0;
        let ok: Result<u32, String> = retrying(
            "t",
            Duration::from_secs(60),
            || false,
            || {
                calls += 1;
                if calls < 3 {
                    Err("not yet".to_string())
                } else {
                    Ok(calls)
                }
            },
        );
        assert_eq!(ok, Ok(3));
        let mut calls = 0;
        let err: Result<(), &str> = retrying(
            "t",
            Duration::from_secs(60),
            || true,
            || {
                calls += 1;
                Err("down")
            },
        );
        assert_eq!((err, calls), (Err("down"), 1));
    }

    #[test]
    fn an_error_note_is_due_once_per_period() {
        let mut note = ErrorNote::default();
        assert!(note.due());
        assert!(!note.due());
        note.last = Instant::now().checked_sub(NOTE_EVERY);
        assert!(note.due());
    }

    #[test]
    fn authorization_failures_are_fatal_transport_errors_are_not() {
        let auth = KafkaError::MessageConsumption(RDKafkaErrorCode::TopicAuthorizationFailed);
        let down = KafkaError::MessageConsumption(RDKafkaErrorCode::AllBrokersDown);
        assert!(is_fatal(&auth));
        assert!(!is_fatal(&down));
    }
}
