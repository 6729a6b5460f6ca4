//! The report as CSV, and one device's or room's days as an SVG chart.

use std::fmt::Write as _;

use super::{MonthFigures, Report};

const HEADER: &str = "kind,name,room,devices,readings,min,max,mean,expected,coverage,\
interval_secs,interval_source,longest_gap_secs,hours,provisional_hours";

/// One line per device, then one per room, after a header.
pub(super) fn csv(r: &Report) -> String {
    let mut s = String::from(HEADER);
    s.push('\n');
    let opt = |v: Option<String>| v.unwrap_or_default();
    for (kind, list) in [("device", &r.devices), ("room", &r.rooms)] {
        for m in list {
            // Writing to a String cannot fail.
            let _ = writeln!(
                s,
                "{kind},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                m.name,
                m.room,
                m.devices,
                m.readings,
                m.min,
                m.max,
                m.mean,
                opt(m.expected.map(|e| e.to_string())),
                opt(m.coverage.map(|c| format!("{c:.4}"))),
                opt(m.interval_secs.map(|i| i.to_string())),
                opt(m.interval_source.map(|i| {
                    serde_json::to_value(i)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                })),
                m.longest_gap_secs,
                m.hours,
                m.provisional_hours
            );
        }
    }
    s
}

/// Per day: the min–max range as a bar, the mean as a dot; readings per day as a label.
pub(super) fn svg(r: &Report, m: Option<&MonthFigures>) -> String {
    let (w, h, left, top) = (760.0, 300.0, 50.0, 30.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">"#,
        w + left + 20.0,
        h + top + 40.0
    );
    let Some(m) = m.filter(|m| !m.days.is_empty()) else {
        let _ = writeln!(
            s,
            r#"<text x="10" y="20">{}: no readings</text></svg>"#,
            r.month
        );
        return s;
    };
    let (lo, hi) = (m.min, if m.max > m.min { m.max } else { m.min + 1.0 });
    let y = |v: f64| top + h - (v - lo) / (hi - lo) * h;
    let days = ((r.to - r.from) / 86_400).max(1) as f64;
    let step = w / days;
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="18" font-size="13">{} {}: min {}, mean {:.3}, max {}, coverage {}</text>"#,
        m.name,
        r.month,
        m.min,
        m.mean,
        m.max,
        m.coverage
            .map_or("unknown".into(), |c| format!("{:.1}%", c * 100.0))
    );
    let _ = writeln!(
        s,
        r#"<text x="2" y="{:.1}">{hi}</text><text x="2" y="{:.1}">{lo}</text>"#,
        top + 4.0,
        top + h
    );
    for d in &m.days {
        let x = left + ((d.day - r.from) / 86_400) as f64 * step;
        let mean = d.sum / d.readings.max(1) as f64;
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#9ecae1"><title>day {}: {} readings, min {}, mean {mean:.3}, max {}</title></rect><circle cx="{:.1}" cy="{:.1}" r="2.5" fill="#08519c"/>"##,
            x + 1.0,
            y(d.max),
            (step - 2.0).max(1.0),
            (y(d.min) - y(d.max)).max(1.0),
            (d.day - r.from) / 86_400 + 1,
            d.readings,
            d.min,
            d.max,
            x + step / 2.0,
            y(mean)
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x + step / 2.0,
            top + h + 14.0,
            (d.day - r.from) / 86_400 + 1
        );
    }
    s.push_str("</svg>\n");
    s
}
