//! A landing report as a terminal table and as an SVG bar chart.

use std::fmt::Write as _;
use std::io::Write;

use super::LandingReport;

/// Width of the longest bar in the terminal table, in characters.
const BAR: f64 = 40.0;

/// Writes `r` as a table: rows per bucket with a bar, the statistics, the hottest prefixes and
/// the verdict.
///
/// # Errors
/// Writing to `out` failed.
pub fn table(out: &mut impl Write, r: &LandingReport) -> std::io::Result<()> {
    writeln!(out, "landing check of {} ({} keys)", r.source, r.scheme)?;
    let max = r.buckets.iter().map(|b| b.rows).max().unwrap_or(0).max(1) as f64;
    let width = r
        .buckets
        .iter()
        .map(|b| b.label.len())
        .max()
        .unwrap_or(0)
        .max(6);
    writeln!(out, "{:<width$}  {:>12}  {:>6}", "bucket", "rows", "share")?;
    for b in &r.buckets {
        let bar = "#".repeat((b.rows as f64 / max * BAR).round() as usize);
        writeln!(
            out,
            "{:<width$}  {:>12}  {:>5.1}%  {bar}",
            b.label,
            b.rows,
            100.0 * b.rows as f64 / r.rows as f64
        )?;
    }
    writeln!(
        out,
        "rows {}, mean {:.1} per bucket; max ÷ mean {:.3}, coefficient of variation {:.3}",
        r.rows,
        r.rows as f64 / r.buckets.len() as f64,
        r.max_over_mean,
        r.cv
    )?;
    writeln!(out, "hottest {}-id prefixes:", r.entity)?;
    for p in &r.hottest_prefixes {
        writeln!(
            out,
            "  {:<24} {:>7} {}s {:>12} rows {:>5.1}%  ({:.0}% in {})",
            p.prefix,
            p.ids,
            r.entity,
            p.rows,
            100.0 * p.share,
            100.0 * p.top_bucket_share,
            p.top_bucket
        )?;
    }
    for (kind, n) in &r.rejected {
        writeln!(out, "not counted: {n} ({kind})")?;
    }
    writeln!(out, "{}", r.note)?;
    writeln!(
        out,
        "verdict: {} (max ÷ mean {:.3} {} --max-skew {})",
        if r.pass { "PASS" } else { "FAIL" },
        r.max_over_mean,
        if r.pass { "<=" } else { ">" },
        r.max_skew
    )?;
    Ok(())
}

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A bar per bucket or region, with the mean and the `--max-skew` limit as lines.
pub fn svg(r: &LandingReport) -> String {
    let (bar_w, gap, h, left, top, bottom) = (24.0, 6.0, 240.0, 60.0, 40.0, 60.0);
    let n = r.buckets.len() as f64;
    let width = left + n * (bar_w + gap) + 20.0;
    let mean = r.rows as f64 / n;
    let max = r.buckets.iter().map(|b| b.rows).max().unwrap_or(0) as f64;
    let scale_max = max.max(mean * r.max_skew).max(1.0);
    let y = |v: f64| top + h - v / scale_max * h;
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{:.0}" font-family="sans-serif" font-size="11">"#,
        top + h + bottom
    );
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="13">{} — {} keys, max ÷ mean {:.2}, CV {:.2}: {}</text>"#,
        esc(&r.source),
        r.scheme,
        r.max_over_mean,
        r.cv,
        if r.pass { "PASS" } else { "FAIL" }
    );
    for (i, b) in r.buckets.iter().enumerate() {
        let x = left + i as f64 * (bar_w + gap);
        let top_y = y(b.rows as f64);
        let fill = if b.rows as f64 > mean * r.max_skew {
            "#d62728"
        } else {
            "#1f77b4"
        };
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{top_y:.1}" width="{bar_w}" height="{:.1}" fill="{fill}"><title>{}: {} rows</title></rect>"#,
            top + h - top_y,
            esc(&b.label),
            b.rows
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" transform="rotate(60 {:.1} {:.1})">{}</text>"#,
            x + 4.0,
            top + h + 12.0,
            x + 4.0,
            top + h + 12.0,
            esc(&b.label)
        );
    }
    for (v, label, colour) in [
        (mean, "mean".to_string(), "#555"),
        (
            mean * r.max_skew,
            format!("max-skew {}", r.max_skew),
            "#d62728",
        ),
    ] {
        let _ = writeln!(
            s,
            r#"<line x1="{left}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{colour}" stroke-dasharray="4 3"/><text x="2" y="{:.1}" fill="{colour}">{label}</text>"#,
            width - 20.0,
            y(v),
            y(v),
            y(v) + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}
