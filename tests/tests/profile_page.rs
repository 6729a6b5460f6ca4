//! The built-in page's profile section in headless Chromium (issue 37 §4): a user id looked up
//! shows the user's tags as the API gives them (server text escaped), an unknown user says so,
//! an audience shows the API's count, truncation and first ids, a bad expression its error and
//! where it is; on a server without the profile routes the section stays hidden.
//!
//! The store is embedded and filled by `hourglass profile replay`; no Redis (profiles come from
//! the store). Chromium is the one of `scripts/test-tools.sh`, as for `serve_clients.rs`.

mod serve_common;
// Its scenario (registry, config, `hourglass` runs); not every helper is used here.
#[allow(dead_code)]
mod profile_read_common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use e2e::{hourglass_command, KillOnDrop};
use profile_read_common::{now, ok, Scenario};
use serde_json::{json, Map, Value};
use serve_common::{agent, chromium, skipped};

/// The user whose tags the page shows; their city holds markup, to be shown as text.
const USER: &str = "13800000000";
const CITY: &str = "<i>hz</i> & \"co\"";
const GOOD: &str = "dim_city = hz AND beh_buy >= 3";
/// Wrong at byte 11.
const BAD: &str = "beh_buy >= many AND dim_city = hz";

/// `hourglass serve --profile-config p.toml --store store` in the scenario on a free port,
/// without a token (the page sends none), on the real clock as the replay; and its URL.
fn serve(s: &Scenario) -> (KillOnDrop, String) {
    let args = [
        "serve",
        "--profile-config",
        "p.toml",
        "--store",
        "store",
        "--listen",
        "127.0.0.1:0",
    ];
    let mut child = hourglass_command(s.path(), &now().to_string(), &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting hourglass serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("reading serve's stdout");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("hourglass serve did not start: {line:?}"))
        .to_string();
    (KillOnDrop(Some(child)), url)
}

/// `(status, JSON body)` of a GET.
fn get(url: &str) -> (u16, Value) {
    let mut res = agent().get(url).call().expect("HTTP GET");
    let body = res.body_mut().read_to_string().expect("body");
    let value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"));
    (res.status().as_u16(), value)
}

/// Percent-encodes all but the unreserved characters of RFC 3986.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Text as Chromium serializes it in an element.
fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The page's DOM at `url` once its scripts ran.
fn page_dom(url: &str) -> String {
    let out = chromium(&["--dump-dom"], url);
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        dom.contains("<h1>hourglass</h1>"),
        "no page at {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// The scenario: `USER` and eight more users, the index on.
fn scenario() -> Scenario {
    let s = Scenario::new("[index]\nenabled = true\n", &["--store", "store"]);
    let t = now() - 60;
    let mut events = vec![json!({"user_id": USER, "ts": t,
        "tags": {"dim_city": CITY, "beh_buy": 7, "rt_cat": "shoes"}})];
    for i in 1..=8 {
        let city = if i % 2 == 0 { "hz" } else { "sh" };
        events.push(json!({"user_id": format!("1380000000{i}"), "ts": t,
            "tags": {"dim_city": city, "beh_buy": i}}));
    }
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(s.path().join("ev.jsonl"), text).unwrap();
    ok(
        s.path(),
        &[
            "profile", "replay", "ev.jsonl", "--config", "p.toml", "--store", "store", "--quiet",
        ],
    );
    s
}

/// The profile table's rows as the page renders `tags`.
fn rows(tags: &Map<String, Value>) -> Vec<String> {
    tags.iter()
        .map(|(code, v)| {
            let (text, class) = match v {
                Value::String(s) => (s.clone(), "value"),
                Value::Number(n) => (n.to_string(), "num"),
                other => (other.to_string(), "value"),
            };
            format!(
                "<tr><td>{code}</td><td class=\"{class}\">{}</td></tr>",
                html(&text)
            )
        })
        .collect()
}

#[test]
fn page_looks_up_profiles_and_counts_audiences_in_chromium() {
    if skipped() {
        return;
    }
    let s = scenario();
    let (_server, url) = serve(&s);

    // A profile and an audience, as the API answers them.
    let (status, p) = get(&format!("{url}/api/v1/profile/{USER}"));
    assert_eq!(status, 200, "{p}");
    let tags = p["tags"].as_object().expect("tags");
    assert_eq!(tags.len(), 3, "{p}");
    assert_eq!(p["tags"]["dim_city"], json!(CITY));
    assert_eq!(p["source"], "store", "no Redis configured");
    let (status, a) = get(&format!("{url}/api/v1/audience?q={}&limit=2", enc(GOOD)));
    assert_eq!(status, 200, "{a}");
    assert_eq!(
        (a["count"].clone(), a["truncated"].clone()),
        (json!(3), json!(true))
    );

    let page = format!("{url}/#user={USER}&audience={}&limit=2", enc(GOOD));
    let dom = page_dom(&page);
    assert!(dom.contains("<section id=\"profiles\">"), "shown:\n{dom}");
    let caption = format!("<caption>{USER}: 3 tags, read from the store</caption>");
    assert!(dom.contains(&caption), "no {caption}:\n{dom}");
    for row in rows(tags) {
        assert!(dom.contains(&row), "no {row}:\n{dom}");
    }
    assert!(
        !dom.contains("<i>hz</i>"),
        "server text parsed as HTML:\n{dom}"
    );
    let count = format!("<strong id=\"audience-count\">{}</strong>", a["count"]);
    assert!(dom.contains(&count), "no {count}:\n{dom}");
    assert!(dom.contains("truncated: the first 2 listed"), "{dom}");
    let ids: String = a["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            let u = u.as_str().unwrap();
            format!("<li><a href=\"#\" data-user=\"{u}\">{u}</a></li>")
        })
        .collect();
    let list = format!("<ol id=\"audience-ids\">{ids}</ol>");
    assert!(dom.contains(&list), "no {list}:\n{dom}");
    assert!(
        !dom.contains("class=\"status error\""),
        "an error shown:\n{dom}"
    );

    // An unknown user and a bad expression: the API's messages, and where the query is wrong.
    let (status, missing) = get(&format!("{url}/api/v1/profile/nobody-here"));
    assert_eq!(status, 404, "{missing}");
    let (status, bad) = get(&format!("{url}/api/v1/audience?q={}", enc(BAD)));
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["position"], json!(11), "{bad}");
    let dom = page_dom(&format!("{url}/#user=nobody-here&audience={}", enc(BAD)));
    let no_user = format!(
        "<div id=\"profile-status\" class=\"status error\">no such user ({})</div>",
        html(missing["error"].as_str().unwrap())
    );
    assert!(dom.contains(&no_user), "no {no_user}:\n{dom}");
    assert!(!dom.contains("id=\"profile-table\""), "{dom}");
    let error = format!(
        "<div id=\"audience-status\" class=\"status error\">{}</div>",
        html(bad["error"].as_str().unwrap())
    );
    assert!(dom.contains(&error), "no {error}:\n{dom}");
    let marked =
        "<pre id=\"audience-where\">beh_buy &gt;= <mark>many AND dim_city = hz</mark></pre>";
    assert!(dom.contains(marked), "no {marked}:\n{dom}");
}

#[test]
fn page_hides_the_profile_section_without_the_profile_routes() {
    if skipped() {
        return;
    }
    let server = serve_common::start();
    let dom = page_dom(&format!(
        "{}/#device=dev00786&user={USER}&audience={}",
        server.url,
        enc(GOOD)
    ));
    assert!(
        dom.contains("<section id=\"profiles\" hidden=\"\">"),
        "hidden:\n{dom}"
    );
    assert!(
        dom.contains("<div id=\"profile-status\" class=\"status\"></div>"),
        "{dom}"
    );
    assert!(dom.contains("<div id=\"audience\"></div>"), "{dom}");
    // The sensor view beside it works as before.
    assert!(dom.contains("readings from"), "{dom}");
    for error in ["class=\"error\"", "class=\"status error\""] {
        assert!(!dom.contains(error), "an error shown:\n{dom}");
    }
}
