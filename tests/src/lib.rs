//! Harness of the end-to-end scenarios: the real `hourglass` binary, scratch dirs, golden files.
//!
//! Golden files live in `tests/golden/`. To accept new outputs after an intended change, run
//! the tests with `HOURGLASS_BLESS=1` and review the diff of `tests/golden/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::OnceLock;

pub mod job;
pub mod services;

/// "Now" for every scenario run: 2024-08-21T00:26:40Z, two days after the recordings, so the
/// 90-day TTL keeps them visible and outputs do not depend on the day the tests run.
pub const NOW: &str = "1724200000";

/// A child process killed when dropped, so a failing test leaves no job or replay writing into
/// the tables of the next one.
#[derive(Debug)]
pub struct KillOnDrop(pub Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Path of the `hourglass` binary, built once per test process with the same cargo.
pub fn hourglass_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let run = escargot::CargoBuild::new()
            .package("hourglass-jobs")
            .bin("hourglass")
            .run()
            .expect("building the hourglass binary failed");
        run.path().to_path_buf()
    })
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A recorded input under `tests/data/`.
pub fn data(name: &str) -> PathBuf {
    repo_root().join("tests/data").join(name)
}

/// The command `hourglass args…` in `dir` with `HOURGLASS_NOW=now` and the default log level;
/// callers add stdio settings or more arguments.
pub fn hourglass_command(dir: &Path, now: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(hourglass_bin());
    cmd.args(args)
        .current_dir(dir)
        .env("HOURGLASS_NOW", now)
        .env_remove("HOURGLASS_LOG");
    cmd
}

/// Runs `hourglass args…` in `dir` with `HOURGLASS_NOW` fixed.
pub fn hourglass(dir: &Path, args: &[&str]) -> Output {
    hourglass_command(dir, NOW, args)
        .output()
        .expect("running hourglass failed")
}

/// `out`, the result of `hourglass args…`, after failing the test on a non-zero exit.
pub fn succeeded<'o>(args: &[&str], out: &'o Output) -> &'o Output {
    assert!(
        out.status.success(),
        "hourglass {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The stdout of `out`, the result of `hourglass args…`, failing the test on a non-zero exit.
pub fn ok_stdout(args: &[&str], out: Output) -> String {
    succeeded(args, &out);
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// Runs `hourglass args…` and returns its stdout, failing the test on a non-zero exit.
pub fn hourglass_ok(dir: &Path, args: &[&str]) -> String {
    ok_stdout(args, hourglass(dir, args))
}

/// Compares `actual` with `tests/golden/<name>`, or writes it there with `HOURGLASS_BLESS=1`.
pub fn assert_golden(name: &str, actual: &str) {
    let path = repo_root().join("tests/golden").join(name);
    if std::env::var_os("HOURGLASS_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("golden dir")).expect("create golden dir");
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "missing golden file {} ({e}); run with HOURGLASS_BLESS=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from its golden file at line {}:\n  expected: {:?}\n  actual:   {:?}\n\
             (expected {} lines, got {}; HOURGLASS_BLESS=1 accepts the new output)",
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first),
            expected.lines().count(),
            actual.lines().count()
        );
    }
}

/// Reads a JSON file (a `--stats-json` summary, …).
///
/// # Panics
/// When the file cannot be read or is not JSON, naming it.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Reads a JSON Lines file into values (empty if the file does not exist).
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON Lines output is valid JSON"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// One sample of a Prometheus text exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name (with `_total`, `_bucket`, … as written).
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// A Prometheus text exposition (format 0.0.4) that [`parse_exposition`] accepted.
#[derive(Debug, Default)]
pub struct Exposition {
    /// Every sample, in order.
    pub samples: Vec<Sample>,
    /// Family name → type (`counter`, `gauge`, `histogram`, …).
    pub types: BTreeMap<String, String>,
}

impl Exposition {
    /// The value of the sample `name` whose labels are exactly `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// Every sample named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }
}

fn valid_name(name: &str, colons: bool) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':'))
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ if text
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')) =>
        {
            text.parse().ok()
        }
        _ => None,
    }
}

/// Parses `name{labels} value [timestamp]`.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    if !valid_name(name, true) {
        return Err(format!("invalid metric name {name:?}"));
    }
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices().peekable();
        let mut end = None;
        if chars.peek().is_some_and(|&(_, c)| c == '}') {
            end = Some(1);
        }
        while end.is_none() {
            let start = chars.peek().map(|&(i, _)| i).ok_or("unterminated labels")?;
            let eq = body[start..].find('=').ok_or("label without '='")? + start;
            let key = &body[start..eq];
            if !valid_name(key, false) || key.starts_with("__") {
                return Err(format!("invalid label name {key:?}"));
            }
            while chars.peek().is_some_and(|&(i, _)| i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {key} without a quoted value"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")?.1 {
                    '\\' => match chars.next().ok_or("dangling escape")?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        c => return Err(format!("invalid escape \\{c}")),
                    },
                    '"' => break,
                    '\n' => return Err("newline in a label value".into()),
                    c => value.push(c),
                }
            }
            if labels.insert(key.to_string(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
            match chars.next() {
                Some((i, '}')) => end = Some(i + 1),
                Some((_, ',')) => {}
                _ => return Err("expected ',' or '}' after a label".into()),
            }
        }
        rest = &body[end.unwrap_or_default()..];
    }
    let rest = rest
        .strip_prefix(' ')
        .ok_or("expected one space before the value")?;
    let mut fields = rest.split(' ');
    let value_text = fields.next().unwrap_or_default();
    let value = parse_value(value_text).ok_or_else(|| format!("invalid value {value_text:?}"))?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("invalid timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("extra fields after the timestamp".into());
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// A histogram's family and its labels without `le`; its buckets are `(le, cumulative count)`.
type Series = (String, BTreeMap<String, String>);

/// Parses a Prometheus text exposition (format 0.0.4) strictly: every line is `# HELP`,
/// `# TYPE` or a well-formed sample; every family has both HELP and TYPE before its samples,
/// which are contiguous; no series twice; counters are finite and non-negative; histogram
/// buckets are cumulative, end with `le="+Inf"` and agree with `_count`.
///
/// # Errors
/// The first violation, with its line number.
pub fn parse_exposition(text: &str) -> Result<Exposition, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the exposition does not end with a newline".into());
    }
    let mut out = Exposition::default();
    let mut help = BTreeSet::new();
    let mut done = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut series = BTreeSet::new();
    let mut buckets: BTreeMap<Series, Vec<(f64, f64)>> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let err = |m: String| format!("line {}: {m}: {line:?}", n + 1);
        if let Some(comment) = line.strip_prefix('#') {
            let mut parts = comment.splitn(4, ' ');
            let (empty, keyword, name) = (parts.next(), parts.next(), parts.next());
            let rest = parts.next().unwrap_or_default();
            let name = name.unwrap_or_default();
            if empty != Some("") || !valid_name(name, true) {
                return Err(err("malformed comment".into()));
            }
            if done.contains(name) || current.as_deref() == Some(name) {
                return Err(err("HELP or TYPE after the family's samples".into()));
            }
            match keyword {
                Some("HELP") => {
                    if !help.insert(name.to_string()) {
                        return Err(err("second HELP".into()));
                    }
                    if rest.trim().is_empty() {
                        return Err(err("empty HELP".into()));
                    }
                }
                Some("TYPE") => {
                    if !matches!(
                        rest,
                        "counter" | "gauge" | "histogram" | "summary" | "untyped"
                    ) {
                        return Err(err(format!("unknown type {rest:?}")));
                    }
                    if out
                        .types
                        .insert(name.to_string(), rest.to_string())
                        .is_some()
                    {
                        return Err(err("second TYPE".into()));
                    }
                }
                _ => return Err(err("a comment other than HELP or TYPE".into())),
            }
            continue;
        }
        let sample = parse_sample(line).map_err(err)?;
        let family = if out.types.contains_key(&sample.name) {
            sample.name.clone()
        } else {
            ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| sample.name.strip_suffix(suffix))
                .find(|f| {
                    out.types
                        .get(*f)
                        .is_some_and(|t| t == "histogram" || t == "summary")
                })
                .map(str::to_string)
                .ok_or_else(|| err("sample without a TYPE".into()))?
        };
        if !help.contains(&family) {
            return Err(err("sample without a HELP".into()));
        }
        if current.as_deref() != Some(family.as_str()) {
            if done.contains(&family) {
                return Err(err("samples of the family are not contiguous".into()));
            }
            if let Some(previous) = current.replace(family.clone()) {
                done.insert(previous);
            }
        }
        if !series.insert((sample.name.clone(), sample.labels.clone())) {
            return Err(err("the same series twice".into()));
        }
        let kind = out.types[&family].as_str();
        if kind == "counter" && !(sample.value.is_finite() && sample.value >= 0.0) {
            return Err(err("a counter must be finite and non-negative".into()));
        }
        if kind == "histogram" && sample.name.ends_with("_bucket") {
            let mut labels = sample.labels.clone();
            let le = labels
                .remove("le")
                .and_then(|le| parse_value(&le))
                .ok_or_else(|| err("bucket without a numeric le".into()))?;
            buckets
                .entry((family.clone(), labels))
                .or_default()
                .push((le, sample.value));
        }
        out.samples.push(sample);
    }
    for name in &help {
        if !out.types.contains_key(name) {
            return Err(format!("{name} has a HELP but no TYPE"));
        }
    }
    for ((family, labels), b) in &buckets {
        let what = format!("histogram {family}{labels:?}");
        if !b.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1) {
            return Err(format!("{what}: buckets not increasing and cumulative"));
        }
        let last = b.last().expect("a bucket");
        if last.0 != f64::INFINITY {
            return Err(format!("{what}: no le=\"+Inf\" bucket"));
        }
        let count = out
            .samples
            .iter()
            .find(|s| s.name == format!("{family}_count") && &s.labels == labels)
            .ok_or_else(|| format!("{what}: no _count"))?;
        if count.value != last.1 {
            return Err(format!(
                "{what}: _count {} != +Inf bucket {}",
                count.value, last.1
            ));
        }
        if !out
            .samples
            .iter()
            .any(|s| s.name == format!("{family}_sum") && &s.labels == labels)
        {
            return Err(format!("{what}: no _sum"));
        }
    }
    Ok(out)
}

/// A `tables dump` of the hourly table without its dirty marks (`t:dirty`, see
/// `sensor::codec::hourly::DIRTY_QUALIFIER`), for comparing the tables of two runs over one
/// input: whether a resent reading finds its original still its hour's first or last reading
/// (and so is known to change nothing) depends on the order readings reach the window, which
/// workers and partitions change; an unknown one marks its hour. Marks change no answer, only
/// where an hour is read from, so such tests compare the rest of the table, and the answers.
pub fn without_dirty_marks(dump: &str) -> String {
    dump.lines()
        .filter(|l| !l.contains("\tt:dirty\t"))
        .flat_map(|l| [l, "\n"])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_exposition_parses() {
        let text = "# HELP a_total Things.\n# TYPE a_total counter\na_total{k=\"v\\\"x\",p=\"0\"} 3\n\
                    # HELP h Sizes\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n\
                    h_sum 5.0\nh_count 2\n# HELP g G\n# TYPE g gauge\ng -1.5e3 1700000000\n";
        let e = parse_exposition(text).unwrap();
        assert_eq!(e.get("a_total", &[("k", "v\"x"), ("p", "0")]), Some(3.0));
        assert_eq!(e.get("h_count", &[]), Some(2.0));
        assert_eq!(e.get("g", &[]), Some(-1500.0));
    }

    #[test]
    fn violations_are_named() {
        let ok = "# HELP a A\n# TYPE a gauge\n";
        for (text, problem) in [
            ("a 1\n", "without a TYPE"),
            ("# TYPE a gauge\na 1\n", "without a HELP"),
            (&format!("{ok}a 1"), "newline"),
            (&format!("{ok}a{{k=v}} 1\n"), "quoted"),
            (&format!("{ok}a{{k=\"v\"}}  1\n"), "invalid value"),
            (&format!("{ok}a inf\n"), "invalid value"),
            (&format!("{ok}a 1\na 2\n"), "twice"),
            (&format!("{ok}# comment\n"), "malformed comment"),
            (
                "# HELP c C\n# TYPE c counter\nc -1\n",
                "non-negative",
            ),
            (
                "# HELP h H\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                "cumulative",
            ),
            (
                "# HELP h H\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n",
                "_count",
            ),
        ] {
            let e = parse_exposition(text).unwrap_err();
            assert!(e.contains(problem), "{text:?}: {e}");
        }
    }
}
