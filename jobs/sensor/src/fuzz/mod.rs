//! Bounded random-input fuzzing of the decoder, the row-key codecs, the PromQL parser and the
//! HTTP API, run as ordinary tests (see docs/RELIABILITY.md, "Fuzzing").
//!
//! Each target mutates a corpus seeded from the repository's tests for `HOURGLASS_FUZZ_SECS`
//! seconds (2 by default, so `make test` stays fast) and checks properties of every answer, not
//! only that nothing panics. Every input comes from its own seed: a failure prints the input and
//! the `HOURGLASS_FUZZ_SEED` that makes it the first input of a rerun.

mod decode;
mod http;
mod keys;
mod mutate;
mod prom;

use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Seconds each target runs for when `HOURGLASS_FUZZ_SECS` is unset.
const DEFAULT_SECS: f64 = 2.0;
/// Distinct failures collected with `HOURGLASS_FUZZ_KEEP_GOING` before stopping.
const MAX_FAILURES: usize = 50;

/// What a target says about one input: `Err` names the property the input broke.
type Verdict = Result<(), String>;

/// How long to run and from which seed, from the environment.
#[derive(Debug, Clone, Copy)]
struct Budget {
    secs: f64,
    seed: u64,
    keep_going: bool,
}

impl Budget {
    fn from_env() -> Self {
        let secs = std::env::var("HOURGLASS_FUZZ_SECS")
            .ok()
            .map(|s| {
                s.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s >= 0.0)
                    .unwrap_or_else(|| {
                        panic!("HOURGLASS_FUZZ_SECS={s:?}: give the seconds per target, e.g. 1800")
                    })
            })
            .unwrap_or(DEFAULT_SECS);
        // Without a seed every run explores new inputs; the seed is printed, so any run can be
        // repeated.
        let seed = std::env::var("HOURGLASS_FUZZ_SEED")
            .ok()
            .map(|s| {
                s.trim().parse::<u64>().unwrap_or_else(|_| {
                    panic!("HOURGLASS_FUZZ_SEED={s:?}: give the number a failure printed")
                })
            })
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            });
        let keep_going = std::env::var_os("HOURGLASS_FUZZ_KEEP_GOING").is_some();
        Budget {
            secs,
            seed,
            keep_going,
        }
    }
}

/// The seed of the `i`-th mutated input of a run seeded with `base`; the 0th is `base` itself,
/// so a failing input's seed given as `HOURGLASS_FUZZ_SEED` reproduces it first.
fn input_seed(base: u64, i: u64) -> u64 {
    base.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Inputs shown in failure reports: printable ASCII as is, other bytes escaped, long runs cut.
fn show(input: &[u8]) -> String {
    const MAX: usize = 2_000;
    let mut out = String::new();
    for &b in input.iter().take(MAX) {
        match b {
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    if input.len() > MAX {
        let _ = write!(out, "… ({} bytes in all)", input.len());
    }
    out
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// One input that broke a property.
#[derive(Debug)]
struct Failure {
    problem: String,
    input: Vec<u8>,
    /// `None` for an unmutated corpus entry.
    seed: Option<u64>,
}

/// Runs `check` on every corpus entry, then on mutated entries until the budget is spent, and
/// fails the test with the input and its seed if a property breaks or `check` panics.
///
/// `test` is the test's path in the crate (`fuzz::decode::decoder`), for the reproduce command.
fn run(test: &str, corpus: &[Vec<u8>], mut check: impl FnMut(&[u8]) -> Verdict) {
    let target = test.rsplit("::").next().unwrap_or(test);
    assert!(
        !corpus.is_empty(),
        "fuzz target {target} has an empty corpus"
    );
    let budget = Budget::from_env();
    let deadline = Instant::now() + Duration::from_secs_f64(budget.secs);
    let started = Instant::now();
    let mut failures: Vec<Failure> = Vec::new();
    let mut execs = 0u64;
    let mut exec = |input: &[u8], seed: Option<u64>, failures: &mut Vec<Failure>| {
        execs += 1;
        let verdict = catch_unwind(AssertUnwindSafe(|| check(input)))
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))));
        if let Err(problem) = verdict {
            // One report per kind of problem: the start of its first line (details vary).
            let kind = |p: &str| {
                p.lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(60)
                    .collect::<String>()
            };
            if !failures.iter().any(|f| kind(&f.problem) == kind(&problem)) {
                failures.push(Failure {
                    problem,
                    input: input.to_vec(),
                    seed,
                });
            }
        }
    };
    let stop = |failures: &Vec<Failure>| {
        !failures.is_empty() && (!budget.keep_going || failures.len() >= MAX_FAILURES)
    };
    for entry in corpus {
        exec(entry, None, &mut failures);
        if stop(&failures) {
            break;
        }
    }
    let mut i = 0u64;
    // At least one mutated input, even with a zero budget.
    while !stop(&failures) && (i == 0 || Instant::now() < deadline) {
        let seed = input_seed(budget.seed, i);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let input = mutate::input(&mut rng, corpus);
        exec(&input, Some(seed), &mut failures);
        i += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "fuzz {target}: {execs} executions in {secs:.1} s ({:.0}/s), seed {}, {} failure(s)",
        execs as f64 / secs.max(1e-9),
        budget.seed,
        failures.len()
    );
    if failures.is_empty() {
        return;
    }
    let mut report = format!(
        "fuzz target {target} failed on {} input(s):\n",
        failures.len()
    );
    for f in &failures {
        let origin = match f.seed {
            Some(seed) => format!(
                "reproduce: HOURGLASS_FUZZ_SEED={seed} cargo test -p hourglass-sensor {test} -- --include-ignored"
            ),
            None => "an unmutated corpus entry".to_string(),
        };
        let _ = write!(
            report,
            "\n- {}\n  input ({} bytes): {}\n  {origin}\n",
            f.problem,
            f.input.len(),
            show(&f.input)
        );
    }
    panic!("{report}");
}

/// The lines of `text`, without empty ones and `#` comments, as corpus entries (bytes: the
/// recorded inputs hold invalid UTF-8 on purpose).
fn lines(text: &[u8]) -> Vec<Vec<u8>> {
    text.split(|&b| b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty() && !l.starts_with(b"#"))
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_input_of_a_run_is_its_seeds() {
        assert_eq!(input_seed(42, 0), 42);
        assert_ne!(input_seed(42, 1), input_seed(43, 1));
    }

    #[test]
    fn a_broken_property_fails_with_the_input_and_its_seed() {
        let corpus = lines(b"# comment\nabc\n");
        assert_eq!(corpus, [b"abc".to_vec()]);
        let failed = catch_unwind(|| {
            run("fuzz::tests::self_test", &corpus, |input| {
                if input == b"abc" {
                    Ok(())
                } else {
                    Err("changed".to_string())
                }
            });
        })
        .expect_err("a mutated input breaks the property");
        let report = panic_message(&*failed);
        assert!(report.contains("- changed"), "{report}");
        assert!(report.contains("HOURGLASS_FUZZ_SEED="), "{report}");
    }

    #[test]
    fn a_panic_is_a_failure_of_a_corpus_entry() {
        let failed =
            catch_unwind(|| run("fuzz::tests::self_test", &lines(b"x\n"), |_| panic!("boom")))
                .expect_err("the panic is reported");
        let report = panic_message(&*failed);
        assert!(report.contains("panicked: boom"), "{report}");
        assert!(report.contains("unmutated corpus entry"), "{report}");
    }
}
