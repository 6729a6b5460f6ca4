//! `hourglass generate`: writes realistic recorded sensor traffic as JSON Lines.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::f64::consts::TAU;
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal as _, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context as _};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Arguments of `hourglass generate`.
#[derive(Debug, Clone, clap::Args)]
pub struct GenerateArgs {
    /// Number of devices (ids `dev00000`, `dev00001`, ...; wider when ids pass 99999).
    #[arg(long, default_value_t = 1000)]
    pub devices: u32,
    /// Length of the recording: `90s`, `10m`, `1h`, `2d`, or a sum such as `1h30m`.
    #[arg(long, default_value = "1h")]
    pub duration: String,
    /// First timestamp: epoch seconds or RFC 3339; default: start of the previous UTC hour
    /// (so the data is "recent"; of HOURGLASS_NOW when set, as the replay's future check).
    #[arg(long)]
    pub start: Option<String>,
    /// RNG seed (same seed, same args → byte-identical output).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Output file; `.gz` / `.zst` extensions compress; `-` or absent = stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seconds between two readings of one device.
    #[arg(long, default_value_t = 10)]
    pub interval: u32,
    /// Fraction of well-formed lines delivered late: 30 s .. 10 min of event time behind,
    /// about a tenth of them more than 1 h behind when the recording is long enough.
    #[arg(long, default_value_t = 0.0)]
    pub late_rate: f64,
    /// Fraction of lines that are malformed (truncated JSON, missing/NaN-like/string metric,
    /// bad device id with '_', negative or millisecond ts, non-UTF-8 bytes, null fields).
    #[arg(long, default_value_t = 0.0)]
    pub malformed_rate: f64,
    /// Fraction of lines that duplicate another (same reading delivered twice).
    #[arg(long, default_value_t = 0.0)]
    pub duplicate_rate: f64,
    /// Number of rooms devices are spread over.
    #[arg(long, default_value_t = 100)]
    pub rooms: u32,
}

/// What `generate` wrote. `lines = readings + duplicates + malformed`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GenerateSummary {
    /// Lines written.
    pub lines: u64,
    /// Distinct readings: devices × (duration / interval).
    pub readings: u64,
    /// Malformed lines (not decodable as a reading).
    pub malformed: u64,
    /// Well-formed lines (originals or duplicates) delivered at least 30 s late.
    pub late: u64,
    /// Extra copies of readings.
    pub duplicates: u64,
}

/// Generates the recording described by `args` and writes it to `args.out`.
///
/// Streams: memory holds the device table, a few seconds of reordering and the held-back late
/// lines, never the recording. Shows a progress bar when writing to a file with stderr on a
/// terminal, and always prints a one-line summary to stderr at the end.
///
/// # Errors
/// Invalid arguments (with what to change), or failure to create or write the output.
pub fn run(args: &GenerateArgs) -> anyhow::Result<GenerateSummary> {
    let plan = Plan::new(args)?;
    let began = Instant::now();
    let path = args.out.as_deref().filter(|p| *p != Path::new("-"));
    let summary = match path {
        None => {
            let mut out = BufWriter::with_capacity(OUT_BUFFER, io::stdout().lock());
            let summary = plan.write(&mut out, None).context("writing to stdout")?;
            out.flush().context("writing to stdout")?;
            summary
        }
        Some(path) => write_file(&plan, path)?,
    };
    let elapsed = began.elapsed();
    eprintln!(
        "generated {} lines ({} readings, {} malformed, {} late, {} duplicates) \
         in {:.1} s, {:.0} lines/s",
        summary.lines,
        summary.readings,
        summary.malformed,
        summary.late,
        summary.duplicates,
        elapsed.as_secs_f64(),
        summary.lines as f64 / elapsed.as_secs_f64().max(1e-9),
    );
    Ok(summary)
}

const OUT_BUFFER: usize = 1 << 20;

fn write_file(plan: &Plan, path: &Path) -> anyhow::Result<GenerateSummary> {
    let context = || format!("writing {}", path.display());
    let file = File::create(path).with_context(|| {
        format!(
            "cannot create {}: check the directory exists",
            path.display()
        )
    })?;
    let bar = io::stderr().is_terminal().then(|| progress_bar(plan.ticks));
    let bar = bar.as_ref();
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let summary = match ext {
        "gz" => {
            // Level 1: level 6 makes these files about 30% smaller but compresses 3× slower
            // (about 400k lines/s); `.zst` is both smaller and faster.
            let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
            let mut out = BufWriter::with_capacity(OUT_BUFFER, gz);
            let summary = plan.write(&mut out, bar).with_context(context)?;
            let gz = out.into_inner().map_err(io::IntoInnerError::into_error);
            gz.and_then(|gz| gz.finish()).with_context(context)?;
            summary
        }
        "zst" => {
            let zst = zstd::Encoder::new(file, 3).with_context(context)?;
            let mut out = BufWriter::with_capacity(OUT_BUFFER, zst);
            let summary = plan.write(&mut out, bar).with_context(context)?;
            let zst = out.into_inner().map_err(io::IntoInnerError::into_error);
            zst.and_then(|zst| zst.finish()).with_context(context)?;
            summary
        }
        _ => {
            let mut out = BufWriter::with_capacity(OUT_BUFFER, file);
            let summary = plan.write(&mut out, bar).with_context(context)?;
            out.flush().with_context(context)?;
            summary
        }
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(summary)
}

fn progress_bar(event_seconds: u64) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "{elapsed_precise} [{wide_bar}] {pos}/{len} s of event time, eta {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::new(event_seconds).with_style(style)
}

/// Parses `90s`, `10m`, `1h`, `2d` (or sums such as `1h30m`) into seconds.
fn parse_duration(text: &str) -> anyhow::Result<u64> {
    let usage = "use a number with a unit s, m, h or d, such as 90s, 10m, 1h, 2d";
    let text = text.trim();
    ensure!(!text.is_empty(), "empty duration: {usage}");
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        ensure!(
            digits > 0,
            "duration {text:?}: expected a number at {rest:?}; {usage}"
        );
        let number: u64 = rest[..digits]
            .parse()
            .with_context(|| format!("duration {text:?}: number too large"))?;
        let mut chars = rest[digits..].chars();
        let unit = match chars.next() {
            Some('s') => 1,
            Some('m') => 60,
            Some('h') => 3600,
            Some('d') => 86_400,
            Some(c) => bail!("duration {text:?}: unknown unit {c:?}; {usage}"),
            None => bail!("duration {text:?}: missing unit after {number}; {usage}"),
        };
        total = number
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .with_context(|| format!("duration {text:?} is too long"))?;
        rest = chars.as_str();
    }
    ensure!(total > 0, "duration {text:?} is zero; {usage}");
    Ok(total)
}

/// Largest timestamp the pipeline accepts (year 2286); larger values look like milliseconds.
const MAX_TS: i64 = 9_999_999_999;

fn parse_start(text: Option<&str>) -> anyhow::Result<i64> {
    let Some(text) = text else {
        // The replay's "now" (HOURGLASS_NOW fixes it): a recording generated and replayed under
        // the same fixed now must not land in the replay's future.
        let hour = pipeline::time::now_ms().div_euclid(3_600_000) * 3600;
        return Ok(hour - 3600);
    };
    let start = match text.trim().parse::<i64>() {
        Ok(secs) => secs,
        Err(_) => chrono::DateTime::parse_from_rfc3339(text.trim())
            .with_context(|| {
                format!(
                    "--start {text:?}: expected epoch seconds (1724102400) \
                     or RFC 3339 (2024-08-19T21:20:00Z)"
                )
            })?
            .timestamp(),
    };
    ensure!(
        start >= 0,
        "--start {text:?} is before 1970; the pipeline rejects negative timestamps"
    );
    Ok(start)
}

/// Reordering window: a line is delivered up to this long (event time) after its timestamp.
const WINDOW_MS: u64 = 5_000;
/// Seconds of the window with lines pending at once: the second being released, the second
/// jitter can add, and the window.
const WINDOW_SLOTS: u64 = WINDOW_MS / 1000 + 2;
/// Hold-back of late lines, in seconds of event time. The 30 s of lateness promised is the
/// hold-back minus the reordering window minus 1 s, so that every line of second `ts + 31` has
/// been delivered first: a pipeline with a 30 s watermark bound then surely sees the line late.
const LATE_MIN: u64 = 36;
const LATE_MAX: u64 = 600;
/// Very late lines are beyond a 1 h allowed lateness too.
const VERY_LATE_MIN: u64 = 3600 + LATE_MIN;
const VERY_LATE_MAX: u64 = 3600 + LATE_MAX;
const VERY_LATE_SHARE: f64 = 0.1;

/// Firmware versions with their share of devices, in percent.
const FIRMWARE: [(&str, u32); 4] = [
    ("2.4.1", 55),
    ("2.4.0", 25),
    ("2.3.7", 15),
    ("3.0.0-rc.1", 5),
];

/// RNG streams: one per purpose, so that the readings are the same whatever the fault rates,
/// and a device keeps its profile whatever the number of devices.
const VALUE_STREAM: u64 = 0;
const DELIVERY_STREAM: u64 = 1;
const ROOM_STREAMS: u64 = 1 << 62;
const DEVICE_STREAMS: u64 = 1 << 63;

/// Validated arguments.
#[derive(Debug)]
struct Plan {
    devices: u32,
    rooms: u32,
    start: i64,
    duration: u64,
    interval: u64,
    /// Seconds during which readings are due: the whole intervals within the duration.
    ticks: u64,
    seed: u64,
    late_rate: f64,
    /// Expected extra lines per reading, so that the rates are fractions of all lines.
    malformed_per_reading: f64,
    duplicates_per_reading: f64,
    device_width: usize,
    room_width: usize,
}

impl Plan {
    fn new(args: &GenerateArgs) -> anyhow::Result<Self> {
        ensure!(args.devices > 0, "--devices must be at least 1");
        ensure!(args.rooms > 0, "--rooms must be at least 1");
        ensure!(args.interval > 0, "--interval must be at least 1 second");
        let duration = parse_duration(&args.duration)?;
        let interval = u64::from(args.interval);
        ensure!(
            duration >= interval,
            "--duration {} is shorter than --interval {interval}s: no device would report; \
             lengthen the duration",
            args.duration
        );
        let start = parse_start(args.start.as_deref())?;
        ensure!(
            i64::try_from(duration).is_ok_and(|d| start.saturating_add(d) <= MAX_TS),
            "--start plus --duration go past year 2286; choose an earlier start"
        );
        for (name, rate) in [
            ("--late-rate", args.late_rate),
            ("--malformed-rate", args.malformed_rate),
            ("--duplicate-rate", args.duplicate_rate),
        ] {
            ensure!(
                (0.0..=1.0).contains(&rate),
                "{name} {rate} must be between 0 and 1"
            );
        }
        let good_share = 1.0 - args.malformed_rate - args.duplicate_rate;
        ensure!(
            good_share > 0.0,
            "--malformed-rate plus --duplicate-rate must stay below 1 (they are fractions of \
             all lines)"
        );
        let per_device = duration / interval;
        Ok(Self {
            devices: args.devices,
            rooms: args.rooms,
            start,
            duration,
            interval,
            ticks: per_device * interval,
            seed: args.seed,
            late_rate: args.late_rate,
            malformed_per_reading: args.malformed_rate / good_share,
            duplicates_per_reading: args.duplicate_rate / good_share,
            device_width: digits(u64::from(args.devices - 1)).max(5),
            room_width: digits(u64::from(args.rooms - 1)).max(3),
        })
    }

    fn rng(&self, stream: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(stream);
        rng
    }

    fn room(&self, room: u32) -> Room {
        let mut rng = self.rng(ROOM_STREAMS | u64::from(room));
        Room {
            temp: rng.random_range(19.0..27.0),
            amplitude: rng.random_range(0.8..3.0),
            // Rooms warm up in the afternoon, the exact hour depending on the sun side.
            peak: rng.random_range(13.0 * 3600.0..17.0 * 3600.0),
        }
    }

    fn device(&self, id: u32) -> Device {
        let mut rng = self.rng(DEVICE_STREAMS | u64::from(id));
        let room = rng.random_range(0..self.rooms);
        let r = self.room(room);
        let share = rng.random_range(0..100);
        let fw = FIRMWARE
            .iter()
            .scan(0, |sum, (_, pct)| {
                *sum += pct;
                Some(*sum)
            })
            .position(|sum| share < sum)
            .unwrap_or(0);
        Device {
            phase: rng.random_range(0..self.interval),
            room,
            temp: (r.temp + rng.random_range(-1.0..1.0)).clamp(18.0, 28.0),
            amplitude: r.amplitude * rng.random_range(0.8..1.2),
            peak: r.peak + rng.random_range(-900.0..900.0),
            humidity: rng.random_range(38.0..52.0),
            battery: rng.random_range(3.62..3.75),
            drain: rng.random_range(0.01..0.05) / 86_400.0,
            rssi: rng.random_range(-85..=-45),
            fw: fw as u8,
            next_seq: rng.random_range(0..50_000),
        }
    }

    /// Writes the whole recording to `out`, advancing `bar` over event time.
    fn write<W: Write>(
        &self,
        out: &mut W,
        bar: Option<&ProgressBar>,
    ) -> io::Result<GenerateSummary> {
        let mut devices: Vec<Device> = (0..self.devices).map(|id| self.device(id)).collect();
        let rooms: Vec<u32> = devices.iter().map(|d| d.room).collect();
        // Devices due in a second are a run of this list: the one whose phase is that second.
        let mut by_phase: Vec<u32> = (0..self.devices).collect();
        by_phase.sort_by_key(|&id| devices[id as usize].phase);

        let mut values = self.rng(VALUE_STREAM);
        let mut delivery = Delivery {
            plan: self,
            rng: self.rng(DELIVERY_STREAM),
            window: (0..WINDOW_SLOTS).map(|_| Vec::new()).collect(),
            held: BinaryHeap::new(),
            order: 0,
            summary: GenerateSummary::default(),
        };
        let mut line = Vec::with_capacity(256);
        let mut lines = 0;
        let mut emit = |pending: &Pending| {
            self.format(pending, &rooms, &mut line);
            lines += 1;
            out.write_all(&line)
        };
        let mut cursor = 0;
        for second in 0..self.ticks {
            let phase = second % self.interval;
            if phase == 0 {
                cursor = 0;
            }
            while let Some(&id) = by_phase.get(cursor) {
                let device = &mut devices[id as usize];
                if device.phase != phase {
                    break;
                }
                cursor += 1;
                let sample = self.sample(id, device, second, &mut values);
                delivery.schedule(sample);
            }
            // Seconds still to come hold timestamps from `second` on (jitter moves them at most
            // 1 s earlier), so the lines due in the second before are final.
            if let Some(done) = second.checked_sub(1) {
                delivery.release(done, &mut emit)?;
            }
            if let Some(bar) = bar {
                bar.set_position(second + 1);
            }
        }
        // Jitter can put the last readings up to 1 s after `ticks`, and the window adds more.
        for done in self.ticks.saturating_sub(1)..self.ticks + WINDOW_SLOTS {
            delivery.release(done, &mut emit)?;
        }
        delivery.flush(&mut emit)?;
        let mut summary = delivery.summary;
        summary.lines = lines;
        Ok(summary)
    }

    /// The reading of `device` due at `second` (seconds after start, before jitter).
    fn sample(&self, id: u32, device: &mut Device, second: u64, rng: &mut ChaCha8Rng) -> Sample {
        // Clocks drift, so readings come a second early or late; not with intervals under 3 s,
        // where that could give two readings of one device the same timestamp (one row key).
        let offset = if self.interval >= 3 {
            (second + rng.random_range(0..3))
                .saturating_sub(1)
                .min(self.duration - 1)
        } else {
            second
        };
        let ts = self.start + offset as i64;
        let daily = (TAU * ((ts % 86_400) as f64 - device.peak) / 86_400.0).cos();
        let noise = |rng: &mut ChaCha8Rng| rng.random::<f64>() - rng.random::<f64>();
        let temp = device.temp + device.amplitude * daily + 0.15 * noise(rng);
        // Relative humidity drops as the air warms.
        let humidity = device.humidity - 1.5 * device.amplitude * daily + 0.8 * noise(rng);
        let battery = (device.battery - device.drain * offset as f64).max(3.0);
        let rssi = (device.rssi + rng.random_range(-4..=4)).clamp(-90, -40);
        let seq = device.next_seq;
        device.next_seq += 1;
        Sample {
            offset,
            device: id,
            temp: (temp * 10.0).round() as i16,
            humidity: (humidity.clamp(30.0, 60.0) * 10.0).round() as u16,
            battery: (battery * 100.0).round() as u16,
            rssi: rssi as i8,
            fw: device.fw,
            seq,
        }
    }

    /// Formats one line, newline included, into `line`.
    fn format(&self, pending: &Pending, rooms: &[u32], line: &mut Vec<u8>) {
        line.clear();
        let s = &pending.sample;
        let flaw = pending.flaw;
        let ts = self.start + s.offset as i64;
        line.push(b'{');
        match flaw {
            Some(Flaw::Missing(Field::Device)) => {}
            Some(Flaw::Null(Field::Device)) => key_raw(line, "device", b"null"),
            _ => {
                key(line, "device");
                line.extend_from_slice(b"\"dev");
                if flaw == Some(Flaw::DeviceUnderscore) {
                    line.push(b'_');
                }
                push_padded(line, u64::from(s.device), self.device_width);
                line.push(b'"');
            }
        }
        match flaw {
            Some(Flaw::Missing(Field::Ts)) => {}
            Some(Flaw::Null(Field::Ts)) => key_raw(line, "ts", b"null"),
            Some(Flaw::NegativeTs) => {
                key(line, "ts");
                push_int(line, -ts.max(1));
            }
            Some(Flaw::MillisTs) => {
                // A device clock in milliseconds; `seq` stands in for the sub-second part.
                key(line, "ts");
                push_int(line, ts * 1000 + (s.seq % 1000) as i64);
            }
            _ => {
                key(line, "ts");
                push_int(line, ts);
            }
        }
        match flaw {
            Some(Flaw::Missing(Field::Temp)) => {}
            Some(Flaw::Null(Field::Temp)) => key_raw(line, "temp", b"null"),
            Some(Flaw::TempNotNumber(token)) => key_raw(line, "temp", NOT_NUMBERS[token as usize]),
            Some(Flaw::TempString) => {
                key(line, "temp");
                line.push(b'"');
                push_fixed(line, i64::from(s.temp), 1);
                line.push(b'"');
            }
            _ => {
                key(line, "temp");
                push_fixed(line, i64::from(s.temp), 1);
            }
        }
        key(line, "room");
        line.extend_from_slice(b"\"room");
        push_padded(line, u64::from(rooms[s.device as usize]), self.room_width);
        line.push(b'"');
        key(line, "humidity");
        push_fixed(line, i64::from(s.humidity), 1);
        key(line, "battery");
        push_fixed(line, i64::from(s.battery), 2);
        key(line, "rssi");
        push_int(line, i64::from(s.rssi));
        key(line, "fw");
        line.push(b'"');
        line.extend_from_slice(FIRMWARE[s.fw as usize].0.as_bytes());
        if flaw == Some(Flaw::NotUtf8) {
            // A Latin-1 "é" from a misconfigured device: not UTF-8.
            line.extend_from_slice(b"-r\xe9v");
        }
        line.push(b'"');
        key(line, "seq");
        push_int(line, s.seq as i64);
        line.push(b'}');
        if let Some(Flaw::Truncated { keep_permille }) = flaw {
            // Any proper prefix of an object is invalid JSON; keep at least the `{`.
            let keep = line.len() * usize::from(keep_permille) / 1000;
            line.truncate(keep.clamp(1, line.len() - 1));
        }
        line.push(b'\n');
    }
}

/// Per-room climate.
#[derive(Debug)]
struct Room {
    temp: f64,
    amplitude: f64,
    /// Second of the UTC day when the room is warmest.
    peak: f64,
}

/// Per-device profile, and its sequence counter.
#[derive(Debug)]
struct Device {
    /// Second within the interval at which the device reports.
    phase: u64,
    room: u32,
    /// Baseline temperature, °C.
    temp: f64,
    /// Half the daily temperature swing, °C.
    amplitude: f64,
    /// Second of the UTC day when the device reads warmest.
    peak: f64,
    /// Baseline humidity, %.
    humidity: f64,
    /// Battery voltage at the start of the recording.
    battery: f64,
    /// Battery drain, V/s.
    drain: f64,
    rssi: i32,
    /// Index into [`FIRMWARE`].
    fw: u8,
    next_seq: u64,
}

/// One reading, in fixed point so that queued lines stay small.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Sample {
    /// Event time, seconds after start.
    offset: u64,
    device: u32,
    /// Tenths of °C.
    temp: i16,
    /// Tenths of %.
    humidity: u16,
    /// Hundredths of V.
    battery: u16,
    rssi: i8,
    fw: u8,
    seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Field {
    Device,
    Ts,
    Temp,
}

/// How a malformed line is broken. Each makes the line fail the pipeline's decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Flaw {
    Truncated {
        keep_permille: u16,
    },
    Missing(Field),
    Null(Field),
    /// Index into [`NOT_NUMBERS`].
    TempNotNumber(u8),
    TempString,
    DeviceUnderscore,
    NegativeTs,
    MillisTs,
    NotUtf8,
}

/// What buggy firmware writes for a metric it could not read: JSON extensions serde rejects,
/// out-of-range numbers, or strings.
const NOT_NUMBERS: [&[u8]; 6] = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"\"NaN\"",
    b"\"n/a\"",
];

impl Flaw {
    fn random(rng: &mut ChaCha8Rng) -> Self {
        let field =
            |rng: &mut ChaCha8Rng| [Field::Device, Field::Ts, Field::Temp][rng.random_range(0..3)];
        match rng.random_range(0..9) {
            0 => Self::Truncated {
                keep_permille: rng.random_range(1..1000),
            },
            1 => Self::Missing(field(rng)),
            2 => Self::Null(field(rng)),
            3 => Self::TempNotNumber(rng.random_range(0..NOT_NUMBERS.len() as u8)),
            4 => Self::TempString,
            5 => Self::DeviceUnderscore,
            6 => Self::NegativeTs,
            7 => Self::MillisTs,
            _ => Self::NotUtf8,
        }
    }
}

/// A line waiting for its delivery time.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    /// Delivery time, milliseconds of event time after start.
    due: u64,
    /// Scheduling order: unique, so the order of delivery never depends on the heap's layout
    /// or on the unstable sort.
    order: u64,
    sample: Sample,
    flaw: Option<Flaw>,
}

/// Decides when each line is delivered, and holds it until then.
#[derive(Debug)]
struct Delivery<'a> {
    plan: &'a Plan,
    rng: ChaCha8Rng,
    /// Lines due within the reordering window, by second due: slot `second % WINDOW_SLOTS`.
    /// Sorting a second's lines at once beats one heap for all: with 100,000 devices the heap
    /// outgrows the CPU caches, and popping it took a third of the run time.
    window: Vec<Vec<Pending>>,
    /// Late lines, held back for up to an hour and more.
    held: BinaryHeap<Reverse<Pending>>,
    order: u64,
    summary: GenerateSummary,
}

impl Delivery<'_> {
    /// Queues the lines of one reading: the reading, its duplicates, and malformed lines
    /// derived from it.
    fn schedule(&mut self, sample: Sample) {
        self.summary.readings += 1;
        let copies = 1 + extra(&mut self.rng, self.plan.duplicates_per_reading);
        self.summary.duplicates += copies - 1;
        for _ in 0..copies {
            match self.late_by(sample.offset) {
                None => {
                    let due = self.window_due(sample.offset);
                    self.push_in_window(due, sample, None);
                }
                Some(hold) => {
                    self.summary.late += 1;
                    self.order += 1;
                    self.held.push(Reverse(Pending {
                        due: (sample.offset + hold) * 1000 + self.rng.random_range(0..1000),
                        order: self.order,
                        sample,
                        flaw: None,
                    }));
                }
            }
        }
        for _ in 0..extra(&mut self.rng, self.plan.malformed_per_reading) {
            self.summary.malformed += 1;
            let due = self.window_due(sample.offset);
            let flaw = Flaw::random(&mut self.rng);
            self.push_in_window(due, sample, Some(flaw));
        }
    }

    /// How long to hold back a well-formed line with event time `offset`, if it is to be late.
    fn late_by(&mut self, offset: u64) -> Option<u64> {
        // Data ends at `ticks`: a line is only made late if enough of the recording follows to
        // deliver it behind lines at least 30 s (or 1 h 30 s) newer.
        let remaining = self.plan.ticks.saturating_sub(offset);
        let late = self.plan.late_rate > 0.0
            && remaining >= LATE_MIN
            && self.rng.random_bool(self.plan.late_rate);
        if !late {
            return None;
        }
        Some(
            if remaining >= VERY_LATE_MIN && self.rng.random_bool(VERY_LATE_SHARE) {
                self.rng
                    .random_range(VERY_LATE_MIN..=remaining.min(VERY_LATE_MAX))
            } else {
                self.rng.random_range(LATE_MIN..=remaining.min(LATE_MAX))
            },
        )
    }

    /// Delivery time of a line on time: up to [`WINDOW_MS`] after its event time.
    fn window_due(&mut self, offset: u64) -> u64 {
        offset * 1000 + self.rng.random_range(0..WINDOW_MS)
    }

    fn push_in_window(&mut self, due: u64, sample: Sample, flaw: Option<Flaw>) {
        self.order += 1;
        let slot = (due / 1000 % WINDOW_SLOTS) as usize;
        self.window[slot].push(Pending {
            due,
            order: self.order,
            sample,
            flaw,
        });
    }

    /// Delivers, in order, the window's lines due in `second` (after start) and the held-back
    /// lines due by its end. No line due in `second` may be scheduled afterwards.
    fn release(
        &mut self,
        second: u64,
        emit: &mut impl FnMut(&Pending) -> io::Result<()>,
    ) -> io::Result<()> {
        let until = (second + 1) * 1000;
        let slot = &mut self.window[(second % WINDOW_SLOTS) as usize];
        slot.sort_unstable();
        for pending in slot.drain(..) {
            while let Some(held) = pop_if(&mut self.held, |h| *h < pending) {
                emit(&held)?;
            }
            emit(&pending)?;
        }
        while let Some(held) = pop_if(&mut self.held, |h| h.due < until) {
            emit(&held)?;
        }
        Ok(())
    }

    /// Delivers the held-back lines still due after the recording ends.
    fn flush(&mut self, emit: &mut impl FnMut(&Pending) -> io::Result<()>) -> io::Result<()> {
        while let Some(Reverse(held)) = self.held.pop() {
            emit(&held)?;
        }
        Ok(())
    }
}

fn pop_if(
    heap: &mut BinaryHeap<Reverse<Pending>>,
    due: impl Fn(&Pending) -> bool,
) -> Option<Pending> {
    if due(&heap.peek()?.0) {
        heap.pop().map(|Reverse(p)| p)
    } else {
        None
    }
}

/// Draws how many extra lines to add, `expected` on average: its whole part always, plus one
/// with the probability of its fractional part.
fn extra(rng: &mut ChaCha8Rng, expected: f64) -> u64 {
    if expected <= 0.0 {
        return 0;
    }
    let whole = expected.floor();
    whole as u64 + u64::from(rng.random_bool(expected - whole))
}

/// Writes `,"name":` (no comma after the opening brace).
fn key(line: &mut Vec<u8>, name: &str) {
    if line.last() != Some(&b'{') {
        line.push(b',');
    }
    line.push(b'"');
    line.extend_from_slice(name.as_bytes());
    line.extend_from_slice(b"\":");
}

fn key_raw(line: &mut Vec<u8>, name: &str, value: &[u8]) {
    key(line, name);
    line.extend_from_slice(value);
}

fn digits(mut n: u64) -> usize {
    let mut count = 1;
    while n >= 10 {
        n /= 10;
        count += 1;
    }
    count
}

// Hand-written number formatting: it runs for every field of every line, and skipping the
// `fmt` machinery keeps it cheap.
fn push_uint(line: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    line.extend_from_slice(&buf[at..]);
}

fn push_padded(line: &mut Vec<u8>, n: u64, width: usize) {
    line.resize(line.len() + width.saturating_sub(digits(n)), b'0');
    push_uint(line, n);
}

fn push_int(line: &mut Vec<u8>, n: i64) {
    if n < 0 {
        line.push(b'-');
    }
    push_uint(line, n.unsigned_abs());
}

/// Writes `scaled / 10^decimals` with exactly `decimals` decimals.
fn push_fixed(line: &mut Vec<u8>, scaled: i64, decimals: u32) {
    if scaled < 0 {
        line.push(b'-');
    }
    let unit = 10u64.pow(decimals);
    let abs = scaled.unsigned_abs();
    push_uint(line, abs / unit);
    line.push(b'.');
    push_padded(line, abs % unit, decimals as usize);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io::Read as _;
    use std::time::{SystemTime, UNIX_EPOCH};

    use serde_json::Value;

    const START: i64 = 1_724_101_200;

    fn args(devices: u32, duration: &str) -> GenerateArgs {
        GenerateArgs {
            devices,
            duration: duration.into(),
            start: Some(START.to_string()),
            seed: 7,
            out: None,
            interval: 10,
            late_rate: 0.0,
            malformed_rate: 0.0,
            duplicate_rate: 0.0,
            rooms: 10,
        }
    }

    fn generate(args: &GenerateArgs) -> (Vec<u8>, GenerateSummary) {
        let mut out = Vec::new();
        let summary = Plan::new(args).unwrap().write(&mut out, None).unwrap();
        (out, summary)
    }

    fn lines(out: &[u8]) -> Vec<&[u8]> {
        assert_eq!(out.last(), Some(&b'\n'), "output ends with a newline");
        out[..out.len() - 1].split(|&b| b == b'\n').collect()
    }

    /// A well-formed line's fields, or `None` if the pipeline's decoder would reject it
    /// (its rules: UTF-8 JSON object, `device` of `[A-Za-z0-9.:-]{1,64}`, integer `ts` in
    /// `0..=MAX_TS`, finite number `temp`).
    fn reading(line: &[u8]) -> Option<serde_json::Map<String, Value>> {
        let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(line) else {
            return None;
        };
        let device = fields.get("device")?.as_str()?;
        let device_ok = (1..=64).contains(&device.len())
            && device
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-'));
        let ts = fields.get("ts")?.as_i64()?;
        let temp = fields.get("temp")?.as_f64()?;
        (device_ok && (0..=MAX_TS).contains(&ts) && temp.is_finite()).then_some(fields)
    }

    fn ts(line: &[u8]) -> Option<i64> {
        reading(line)?.get("ts")?.as_i64()
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let mut a = args(50, "10m");
        a.late_rate = 0.05;
        a.malformed_rate = 0.02;
        a.duplicate_rate = 0.02;
        let (first, _) = generate(&a);
        let (again, _) = generate(&a);
        assert!(first == again, "same seed gave different output");
        a.seed += 1;
        let (other, _) = generate(&a);
        assert!(first != other, "different seeds gave the same output");
    }

    #[test]
    fn lines_have_the_example_layout() {
        let (out, _) = generate(&args(30, "2m"));
        for line in lines(&out) {
            let text = std::str::from_utf8(line).unwrap();
            let v: Value = serde_json::from_str(text).unwrap();
            let expected = format!(
                r#"{{"device":"{}","ts":{},"temp":{:.1},"room":"{}","humidity":{:.1},"battery":{:.2},"rssi":{},"fw":"{}","seq":{}}}"#,
                v["device"].as_str().unwrap(),
                v["ts"].as_i64().unwrap(),
                v["temp"].as_f64().unwrap(),
                v["room"].as_str().unwrap(),
                v["humidity"].as_f64().unwrap(),
                v["battery"].as_f64().unwrap(),
                v["rssi"].as_i64().unwrap(),
                v["fw"].as_str().unwrap(),
                v["seq"].as_u64().unwrap(),
            );
            assert_eq!(text, expected);
            assert!(text.starts_with(r#"{"device":"dev000"#), "{text}");
            assert!(text.contains(r#","room":"room00"#), "{text}");
        }
    }

    #[test]
    fn every_device_reports_the_right_readings() {
        let a = args(40, "95s");
        let (out, summary) = generate(&a);
        let lines = lines(&out);
        // 95 s at 10 s: 9 whole intervals per device.
        assert_eq!(lines.len(), 40 * 9);
        assert_eq!(
            summary,
            GenerateSummary {
                lines: 360,
                readings: 360,
                ..Default::default()
            }
        );

        let mut by_device: HashMap<String, Vec<(i64, i64, f64)>> = HashMap::new();
        for line in &lines {
            let fields = reading(line).unwrap_or_else(|| panic!("bad line {line:?}"));
            let f = |k: &str| {
                fields
                    .get(k)
                    .unwrap_or_else(|| panic!("no {k} in {fields:?}"))
            };
            let ts = f("ts").as_i64().unwrap();
            assert!(
                (START..START + 95).contains(&ts),
                "ts {ts} outside the recording"
            );
            let temp = f("temp").as_f64().unwrap();
            assert!((10.0..36.0).contains(&temp), "temp {temp}");
            let humidity = f("humidity").as_f64().unwrap();
            assert!((30.0..=60.0).contains(&humidity), "humidity {humidity}");
            let battery = f("battery").as_f64().unwrap();
            assert!((3.0..3.8).contains(&battery), "battery {battery}");
            let rssi = f("rssi").as_i64().unwrap();
            assert!((-90..=-40).contains(&rssi), "rssi {rssi}");
            let room = f("room").as_str().unwrap();
            assert!(room.len() == 7 && room.starts_with("room0"), "room {room}");
            assert!(FIRMWARE.iter().any(|(v, _)| Some(*v) == f("fw").as_str()));
            let device = f("device").as_str().unwrap().to_string();
            by_device
                .entry(device)
                .or_default()
                .push((f("seq").as_i64().unwrap(), ts, battery));
        }
        assert_eq!(by_device.len(), 40);
        for (device, mut readings) in by_device {
            assert_eq!(readings.len(), 9, "{device}");
            readings.sort_by_key(|r| r.0);
            for pair in readings.windows(2) {
                assert_eq!(pair[1].0, pair[0].0 + 1, "{device}: seq has a gap");
                let gap = pair[1].1 - pair[0].1;
                assert!(
                    (8..=12).contains(&gap),
                    "{device}: {gap} s between readings"
                );
                assert!(pair[1].2 <= pair[0].2, "{device}: battery went up");
            }
        }
    }

    #[test]
    fn delivery_is_roughly_in_event_time_order() {
        let (out, _) = generate(&args(200, "5m"));
        let mut newest = START;
        let mut shuffled = 0;
        for line in lines(&out) {
            let ts = ts(line).unwrap();
            assert!(ts > newest - 8, "{ts} delivered after {newest}");
            shuffled += usize::from(ts < newest);
            newest = newest.max(ts);
        }
        assert!(shuffled > 100, "only {shuffled} lines out of order");
    }

    #[test]
    fn wide_device_and_room_ids() {
        let mut a = args(100_001, "10s");
        a.rooms = 1001;
        let (out, summary) = generate(&a);
        assert_eq!(summary.readings, 100_001);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#""device":"dev100000""#));
        assert!(text.contains(r#""device":"dev000000""#));
        assert!(text.contains(r#""room":"room0000""#));
        assert!(text.contains(r#""room":"room1000""#));
    }

    #[test]
    fn faults_add_lines_but_keep_every_reading() {
        let mut a = args(100, "20m");
        let (clean, _) = generate(&a);
        a.late_rate = 0.05;
        a.malformed_rate = 0.03;
        a.duplicate_rate = 0.04;
        let (out, summary) = generate(&a);
        let lines = lines(&out);
        assert_eq!(summary.readings, 100 * 120);
        assert_eq!(summary.lines, lines.len() as u64);
        assert_eq!(
            summary.lines,
            summary.readings + summary.duplicates + summary.malformed
        );
        let share = |n: u64| n as f64 / summary.lines as f64;
        assert!(
            (0.02..0.04).contains(&share(summary.malformed)),
            "{summary:?}"
        );
        assert!(
            (0.03..0.05).contains(&share(summary.duplicates)),
            "{summary:?}"
        );
        assert!((0.03..0.06).contains(&share(summary.late)), "{summary:?}");

        let good: Vec<&[u8]> = lines
            .iter()
            .copied()
            .filter(|l| reading(l).is_some())
            .collect();
        assert_eq!(lines.len() - good.len(), summary.malformed as usize);
        // The readings are the clean run's, whatever the faults.
        let mut distinct = good.clone();
        distinct.sort();
        distinct.dedup();
        let mut clean = self::lines(&clean);
        clean.sort();
        assert!(
            distinct == clean,
            "faulty run delivers other readings than the clean one"
        );
    }

    #[test]
    fn malformed_lines_are_a_mix_of_rejects() {
        let mut a = args(100, "10m");
        a.malformed_rate = 0.2;
        let (out, summary) = generate(&a);
        let bad: Vec<&[u8]> = lines(&out)
            .into_iter()
            .filter(|l| reading(l).is_none())
            .collect();
        assert_eq!(bad.len() as u64, summary.malformed);
        let count = |f: &dyn Fn(&[u8]) -> bool| bad.iter().filter(|l| f(l)).count();
        let has = |l: &[u8], s: &str| l.windows(s.len()).any(|w| w == s.as_bytes());
        let kinds = [
            count(&|l| serde_json::from_slice::<Value>(l).is_err() && l.last() != Some(&b'}')),
            count(&|l| std::str::from_utf8(l).is_err()),
            count(&|l| has(l, "\"dev_")),
            count(&|l| has(l, "\"ts\":-")),
            count(&|l| has(l, ":null")),
            count(&|l| has(l, "\"temp\":\"")),
            count(&|l| has(l, "\"temp\":NaN") || has(l, "Infinity") || has(l, "1e999")),
            count(&|l| !has(l, "\"temp\"") && l.last() == Some(&b'}')),
            count(&|l| {
                ts(l).is_none()
                    && serde_json::from_slice::<Value>(l)
                        .ok()
                        .and_then(|v| v["ts"].as_i64())
                        .is_some_and(|t| t > MAX_TS)
            }),
        ];
        assert!(
            kinds.iter().all(|&n| n > 0),
            "some kind never appears: {kinds:?}"
        );
    }

    #[test]
    fn late_lines_arrive_behind_newer_lines() {
        let mut a = args(100, "2h");
        a.late_rate = 0.02;
        a.duplicate_rate = 0.01;
        a.malformed_rate = 0.01;
        let (out, summary) = generate(&a);
        let mut newest = START;
        let (mut late, mut very_late) = (0, 0);
        for line in lines(&out) {
            let Some(ts) = ts(line) else { continue };
            let behind = newest - ts;
            if behind >= 30 {
                late += 1;
                very_late += u64::from(behind >= 3630);
                assert!(behind <= VERY_LATE_MAX as i64 + 10, "{behind} s late");
            } else {
                assert!(behind <= 10, "{behind} s behind: neither in order nor late");
            }
            newest = newest.max(ts);
        }
        assert_eq!(
            late, summary.late,
            "every late line, and only those, is 30 s behind"
        );
        // Only lines of the first hour can be 1 h late: about a tenth of those.
        assert!(
            (late / 40..late / 10).contains(&very_late),
            "{very_late} of {late} very late"
        );
    }

    #[test]
    fn nothing_is_late_without_time_to_be() {
        let mut a = args(20, "30s");
        a.late_rate = 1.0;
        let (_, summary) = generate(&a);
        assert_eq!(summary.late, 0);
    }

    #[test]
    fn compressed_files_round_trip() {
        let dir = std::env::temp_dir();
        let mut a = args(30, "5m");
        a.malformed_rate = 0.05;
        let (plain, _) = generate(&a);
        for ext in ["gz", "zst", "jsonl"] {
            let path = dir.join(format!("hourglass-generate-{}.{ext}", std::process::id()));
            a.out = Some(path.clone());
            let summary = run(&a).unwrap();
            let file = File::open(&path).unwrap();
            let mut text = Vec::new();
            match ext {
                "gz" => flate2::read::GzDecoder::new(file).read_to_end(&mut text),
                "zst" => zstd::Decoder::new(file).unwrap().read_to_end(&mut text),
                _ => {
                    let mut file = file;
                    file.read_to_end(&mut text)
                }
            }
            .unwrap();
            std::fs::remove_file(&path).unwrap();
            assert!(text == plain, "{ext} output differs");
            assert_eq!(summary.lines, lines(&text).len() as u64);
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), 90);
        assert_eq!(parse_duration("10m").unwrap(), 600);
        assert_eq!(parse_duration("1h").unwrap(), 3600);
        assert_eq!(parse_duration("2d").unwrap(), 172_800);
        assert_eq!(parse_duration(" 1h30m ").unwrap(), 5400);
        for (bad, why) in [
            ("", "empty duration"),
            ("90", "missing unit"),
            ("10x", "unknown unit 'x'"),
            ("h", "expected a number"),
            ("1.5h", "unknown unit '.'"),
            ("0s", "is zero"),
            ("99999999999999999999s", "too large"),
            ("9999999999999999d", "too long"),
        ] {
            let err = parse_duration(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err:?} lacks {why:?}");
        }
    }

    #[test]
    fn start_times() {
        assert_eq!(parse_start(Some("1724102400")).unwrap(), 1_724_102_400);
        assert_eq!(
            parse_start(Some("2024-08-19T21:20:00Z")).unwrap(),
            1_724_102_400
        );
        assert_eq!(
            parse_start(Some("2024-08-19T23:20:00+02:00")).unwrap(),
            1_724_102_400
        );
        let recent = parse_start(None).unwrap();
        assert_eq!(recent % 3600, 0);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(
            (now - 7200..=now - 3600).contains(&recent),
            "{recent} is not the previous hour"
        );
        assert!(parse_start(Some("yesterday"))
            .unwrap_err()
            .to_string()
            .contains("RFC 3339"));
        assert!(parse_start(Some("-5")).is_err());
    }

    #[test]
    fn bad_arguments_say_what_to_change() {
        let check = |change: &dyn Fn(&mut GenerateArgs), want: &str| {
            let mut a = args(10, "1m");
            change(&mut a);
            let err = Plan::new(&a).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} lacks {want:?}");
        };
        check(&|a| a.devices = 0, "--devices");
        check(&|a| a.interval = 0, "--interval");
        check(&|a| a.duration = "5s".into(), "shorter than --interval");
        check(&|a| a.late_rate = 1.5, "--late-rate");
        check(&|a| a.malformed_rate = -0.1, "--malformed-rate");
        check(
            &|a| (a.malformed_rate, a.duplicate_rate) = (0.5, 0.5),
            "below 1",
        );
    }

    #[test]
    fn number_formatting() {
        let mut line = Vec::new();
        push_fixed(&mut line, 255, 1);
        line.push(b' ');
        push_fixed(&mut line, -5, 1);
        line.push(b' ');
        push_fixed(&mut line, 361, 2);
        line.push(b' ');
        push_fixed(&mut line, 305, 2);
        line.push(b' ');
        push_padded(&mut line, 786, 5);
        line.push(b' ');
        push_int(&mut line, -67);
        line.push(b' ');
        push_int(&mut line, 0);
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "25.5 -0.5 3.61 3.05 00786 -67 0"
        );
    }
}
