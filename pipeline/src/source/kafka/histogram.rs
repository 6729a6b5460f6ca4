//! Produce → durable delays: a histogram shared by the workers ([`DelayHistogram`]).

use std::sync::Mutex;

/// Produce-to-durable delays, in milliseconds, with 1 ms buckets up to 10 minutes.
#[derive(Debug)]
pub struct DelayHistogram {
    buckets: Mutex<Vec<u64>>,
}

/// A [`DelayHistogram`] over coarser buckets, as Prometheus encoders take them.
#[derive(Debug, Clone, PartialEq)]
pub struct DelaySnapshot {
    /// `(upper bound in seconds, delays above the previous bound and ≤ it)`, the last bound
    /// `+Inf` (not cumulative: the text encoder sums them).
    pub buckets: Vec<(f64, u64)>,
    /// Sum of the delays, seconds (each counted at its 1 ms bucket; over 10 min as 10 min).
    pub sum_secs: f64,
    /// Number of delays.
    pub count: u64,
}

const DELAY_BUCKETS: usize = 600_000;

impl Default for DelayHistogram {
    fn default() -> Self {
        DelayHistogram {
            buckets: Mutex::new(vec![0; DELAY_BUCKETS + 1]),
        }
    }
}

impl DelayHistogram {
    /// Records delays (negative ones, from clock skew, count as 0; longer than 10 min as 10 min).
    pub fn record(&self, delays_ms: impl IntoIterator<Item = i64>) {
        if let Ok(mut b) = self.buckets.lock() {
            for d in delays_ms {
                b[(d.max(0) as usize).min(DELAY_BUCKETS)] += 1;
            }
        }
    }

    /// Number of recorded delays and the `q` quantiles (`0.0..=1.0`) in milliseconds, `None`
    /// when nothing was recorded.
    pub fn quantiles(&self, qs: &[f64]) -> (u64, Vec<Option<u64>>) {
        let Ok(b) = self.buckets.lock() else {
            return (0, vec![None; qs.len()]);
        };
        let total: u64 = b.iter().sum();
        let out = qs
            .iter()
            .map(|q| {
                if total == 0 {
                    return None;
                }
                let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
                let mut seen = 0;
                b.iter()
                    .position(|&n| {
                        seen += n;
                        seen >= rank
                    })
                    .map(|i| i as u64)
            })
            .collect();
        (total, out)
    }

    /// Counts per bucket of `bounds_ms` (ascending) and `+Inf`, read at scrape time so that
    /// recording stays one increment.
    pub fn snapshot(&self, bounds_ms: &[u64]) -> DelaySnapshot {
        let mut snap = DelaySnapshot {
            buckets: Vec::with_capacity(bounds_ms.len() + 1),
            sum_secs: 0.0,
            count: 0,
        };
        let Ok(b) = self.buckets.lock() else {
            return snap;
        };
        let (mut in_bucket, mut sum_ms, mut next) = (0u64, 0u64, 0usize);
        for (ms, &n) in b.iter().enumerate() {
            while next < bounds_ms.len() && (ms as u64) > bounds_ms[next] {
                snap.buckets.push((
                    bounds_ms[next] as f64 / 1000.0,
                    std::mem::take(&mut in_bucket),
                ));
                next += 1;
            }
            in_bucket += n;
            snap.count += n;
            sum_ms += n * ms as u64;
        }
        for &bound in &bounds_ms[next..] {
            snap.buckets
                .push((bound as f64 / 1000.0, std::mem::take(&mut in_bucket)));
        }
        snap.buckets.push((f64::INFINITY, in_bucket));
        snap.sum_secs = sum_ms as f64 / 1000.0;
        snap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_quantiles() {
        let h = DelayHistogram::default();
        assert_eq!(h.quantiles(&[0.5]), (0, vec![None]));
        h.record((1..=100).chain([-5, 10_000_000]));
        let (n, q) = h.quantiles(&[0.0, 0.5, 0.99, 1.0]);
        assert_eq!(n, 102);
        assert_eq!(q, vec![Some(0), Some(50), Some(100), Some(600_000)]);
    }

    #[test]
    fn delay_snapshot_counts_per_bucket() {
        let h = DelayHistogram::default();
        h.record([0, 100, 250, 251, 2_000, 10_000_000]);
        let s = h.snapshot(&[100, 250, 1_000]);
        assert_eq!(
            s.buckets,
            vec![(0.1, 2), (0.25, 1), (1.0, 1), (f64::INFINITY, 2)]
        );
        assert_eq!(s.count, 6);
        assert_eq!(s.sum_secs, 602.601);
    }
}
