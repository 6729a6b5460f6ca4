//! The tag registry on both backends: `hourglass tags import|list|set-status` and the library's
//! registry against a SQLite file and against the real MariaDB of `scripts/services.sh up
//! mysql` (`make test` starts it).
//!
//! Without MariaDB on 127.0.0.1:3306 the MariaDB runs skip, except in CI (`CI` set), where they
//! fail. Each MariaDB run works in a database of its own (`hourglass_t<pid>_<nanos>`, which
//! the services' user `hourglass` may create) and drops it at the end, so runs never see each
//! other's tags.

use std::path::Path;
use std::process::Output;
use std::time::{SystemTime, UNIX_EPOCH};

use e2e::hourglass;
use e2e::services::service_up;
use mysql::prelude::Queryable;
use profile::{DataType, TagDef, TagRegistry, TagStatus, Upserted, ValueType};

const MYSQL: &str = "127.0.0.1:3306";
/// The user and password `scripts/services.sh up mysql` creates.
const MYSQL_ROOT_URL: &str = "mysql://hourglass:hourglass@127.0.0.1:3306/hourglass";

/// Whether MariaDB is up; in CI a missing server fails the test instead.
fn mysql_up() -> bool {
    service_up(MYSQL, "MariaDB", "mysql")
}

/// A database of this test's own, dropped when the value is.
struct ScratchDatabase {
    name: String,
}

impl ScratchDatabase {
    fn create(test: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        let name = format!("hourglass_{test}_{}_{nanos}", std::process::id());
        let mut conn = mysql::Conn::new(mysql::Opts::from_url(MYSQL_ROOT_URL).expect("URL"))
            .expect("connecting to MariaDB as hourglass");
        conn.query_drop(format!("CREATE DATABASE `{name}`"))
            .expect("creating a scratch database");
        Self { name }
    }

    fn url(&self) -> String {
        format!("mysql://hourglass:hourglass@{MYSQL}/{}", self.name)
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        if let Ok(mut conn) = mysql::Conn::new(mysql::Opts::from_url(MYSQL_ROOT_URL).expect("URL"))
        {
            let _ = conn.query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.name));
        }
    }
}

const HEADER: &str =
    "tag_code,name,data_type,value_type,status,ttl_secs,category,owner,update_frequency\n";

/// Three good rows and four bad ones (lines 3, 5, 6, 7).
const FIRST_IMPORT: &str = "\
dim_city,City of residence,STRING,dimension,online,,geo,crm,daily
Dim-Gender,Gender,STRING,dimension,online,,,crm,daily
beh_buy_30d,\"Purchases, last 30 days\",INT,statistic,online,,behaviour,crm,daily
rt_no_ttl,No TTL,STRING,short_term,online,,,reco,realtime
beh_amount,Amount,DOUBLE,statistic,online,,,crm,daily
dim_city,City again,STRING,dimension,online,,,crm,daily
rt_last_cat,最近浏览类目,STRING,short_term,gray,86400,behaviour,reco,realtime
";

fn output(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = hourglass(dir, args);
    let (stdout, stderr) = output(&out);
    (out.status.success(), stdout, stderr)
}

fn list_json(dir: &Path, registry: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["tags", "list", "--format", "json"];
    args.extend_from_slice(registry);
    let (ok, stdout, stderr) = run(dir, &args);
    assert!(ok, "tags list failed:\n{stderr}");
    serde_json::from_str::<Vec<serde_json::Value>>(&stdout).expect("tags list prints a JSON array")
}

/// One behaviour, whatever the backend: `registry` is the flags naming it.
fn cli_conforms(dir: &Path, registry: &[&str]) {
    let csv = dir.join("tags.csv");
    std::fs::write(&csv, format!("{HEADER}{FIRST_IMPORT}")).expect("write tags.csv");
    let csv_s = csv.to_str().expect("utf-8 path");

    // A bad row is reported with its line, the good ones are imported, the exit is non-zero.
    let mut args = vec!["tags", "import", csv_s];
    args.extend_from_slice(registry);
    let (ok, stdout, stderr) = run(dir, &args);
    assert!(
        !ok,
        "an import with refused rows exits non-zero:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("imported 3 tags")
            && stdout.contains("3 new")
            && stdout.contains("4 refused"),
        "{stdout}"
    );
    for (line, says) in [
        (3, "tag_code 'Dim-Gender'"),
        (5, "needs ttl_secs"),
        (6, "data_type 'DOUBLE' is not one of"),
        (7, "already defined on line 2"),
    ] {
        assert!(
            stderr.contains(&format!("tags.csv:{line}: refused: ")) && stderr.contains(says),
            "line {line} ({says}) not reported:\n{stderr}"
        );
    }
    assert!(stderr.contains("4 of 7 rows"), "{stderr}");

    let tags = list_json(dir, registry);
    let codes: Vec<&str> = tags
        .iter()
        .map(|t| t["tag_code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["beh_buy_30d", "dim_city", "rt_last_cat"]);
    assert_eq!(
        tags[2],
        serde_json::json!({
            "tag_code": "rt_last_cat", "name": "最近浏览类目", "data_type": "STRING",
            "value_type": "short_term", "status": "gray", "ttl_secs": 86400,
            "category": "behaviour", "owner": "reco", "update_frequency": "realtime"
        })
    );
    assert_eq!(tags[0]["name"], "Purchases, last 30 days");
    assert_eq!(tags[0]["ttl_secs"], serde_json::Value::Null);

    // set-status, and an unknown code.
    let mut args = vec!["tags", "set-status", "rt_last_cat", "online"];
    args.extend_from_slice(registry);
    let (ok, stdout, stderr) = run(dir, &args);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("rt_last_cat: gray -> online"), "{stdout}");
    let mut args = vec!["tags", "set-status", "no_such_tag", "offline"];
    args.extend_from_slice(registry);
    let (ok, _, stderr) = run(dir, &args);
    assert!(!ok);
    assert!(
        stderr.contains("unknown tag code 'no_such_tag'"),
        "{stderr}"
    );

    // An online tag's type cannot change; the file's other rows still go in.
    std::fs::write(
        &csv,
        format!(
            "{HEADER}beh_buy_30d,Purchases,FLOAT,statistic,online,,behaviour,crm,daily\n\
             dim_city,City,STRING,dimension,offline,,geo,crm,daily\n\
             rt_last_cat,最近浏览类目,STRING,statistic,online,,behaviour,reco,realtime\n"
        ),
    )
    .expect("write tags.csv");
    let mut args = vec!["tags", "import", csv_s];
    args.extend_from_slice(registry);
    let (ok, stdout, stderr) = run(dir, &args);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("tags.csv:2: refused: tag beh_buy_30d:")
            && stderr.contains("data_type INT -> FLOAT"),
        "{stderr}"
    );
    assert!(
        stderr.contains("tags.csv:4: refused: tag rt_last_cat:")
            && stderr.contains("value_type short_term -> statistic"),
        "{stderr}"
    );
    assert!(stderr.contains("a new meaning is a new code"), "{stderr}");
    assert!(stdout.contains("1 changed"), "{stdout}");
    let tags = list_json(dir, registry);
    let summary: Vec<(&str, &str, &str, &str)> = tags
        .iter()
        .map(|t| {
            (
                t["tag_code"].as_str().unwrap(),
                t["data_type"].as_str().unwrap(),
                t["value_type"].as_str().unwrap(),
                t["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("beh_buy_30d", "INT", "statistic", "online"),
            ("dim_city", "STRING", "dimension", "offline"),
            ("rt_last_cat", "STRING", "short_term", "online"),
        ]
    );
    assert_eq!(
        tags[1]["name"], "City",
        "the accepted row's other changes are written"
    );

    // A clean file exits 0 and changes nothing it already holds.
    std::fs::write(
        &csv,
        format!("{HEADER}dim_city,City,STRING,dimension,offline,,geo,crm,daily\n"),
    )
    .expect("write tags.csv");
    let mut args = vec!["tags", "import", csv_s];
    args.extend_from_slice(registry);
    let (ok, stdout, stderr) = run(dir, &args);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("1 unchanged") && stdout.contains("0 refused"),
        "{stdout}"
    );

    // The table format shows the same tags.
    let mut args = vec!["tags", "list"];
    args.extend_from_slice(registry);
    let (ok, stdout, stderr) = run(dir, &args);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[0].starts_with("TAG_CODE"), "{stdout}");
    assert!(
        lines[3].starts_with("rt_last_cat ") && lines[3].contains("86400"),
        "{stdout}"
    );
}

#[test]
fn cli_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/reg/tags.sqlite", dir.path().display());
    cli_conforms(dir.path(), &["--registry", &url]);
    assert!(dir.path().join("reg/tags.sqlite").is_file());
}

#[test]
fn cli_on_the_default_sqlite_file_and_from_a_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    // No --registry: ./hourglass-data/tags.sqlite, directory created.
    cli_conforms(dir.path(), &[]);
    assert!(dir.path().join("hourglass-data/tags.sqlite").is_file());
    // --config's [registry] url.
    let config = dir.path().join("profile.toml");
    std::fs::write(
        &config,
        "[registry]\nurl = \"sqlite://./other/tags.sqlite\"\n",
    )
    .unwrap();
    let config_s = config.to_str().unwrap();
    cli_conforms(dir.path(), &["--config", config_s]);
    assert!(dir.path().join("other/tags.sqlite").is_file());
    // Not both.
    let (ok, _, stderr) = run(
        dir.path(),
        &[
            "tags",
            "list",
            "--config",
            config_s,
            "--registry",
            "sqlite://x",
        ],
    );
    assert!(!ok && stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn cli_on_mariadb() {
    if !mysql_up() {
        return;
    }
    let db = ScratchDatabase::create("cli");
    let dir = tempfile::tempdir().expect("tempdir");
    let url = db.url();
    cli_conforms(dir.path(), &["--registry", &url]);
    // The password never shows in output.
    let (ok, stdout, _) = run(
        dir.path(),
        &[
            "tags",
            "set-status",
            "dim_city",
            "online",
            "--registry",
            &url,
        ],
    );
    assert!(ok);
    assert!(
        stdout.contains("mysql://hourglass:***@") && !stdout.contains("hourglass:hourglass"),
        "{stdout}"
    );
}

#[test]
fn unreachable_and_unknown_registries_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (url, says) in [
        ("postgres://u:pw@h/db", "unsupported scheme"),
        (
            "mysql://u:pw@127.0.0.1:1/db",
            "MySQL registry mysql://u:***@127.0.0.1:1/db",
        ),
    ] {
        let (ok, _, stderr) = run(dir.path(), &["tags", "list", "--registry", url]);
        assert!(!ok);
        assert!(
            stderr.contains(says) && !stderr.contains(":pw@"),
            "{url}: {stderr}"
        );
    }
}

fn def(code: &str, data_type: DataType, value_type: ValueType, status: TagStatus) -> TagDef {
    TagDef {
        tag_code: code.into(),
        name: format!("{code} name"),
        data_type,
        value_type,
        status,
        ttl_secs: (value_type == ValueType::ShortTerm).then_some(3600),
        category: String::new(),
        owner: "team".into(),
        update_frequency: "daily".into(),
    }
}

/// The library's registry, the same on every backend: upsert outcomes, get, statuses.
fn library_conforms(reg: &mut dyn TagRegistry) {
    let a = def(
        "dim_a",
        DataType::Boolean,
        ValueType::Dimension,
        TagStatus::Online,
    );
    let b = def(
        "beh_b",
        DataType::MultiValue,
        ValueType::Statistic,
        TagStatus::Gray,
    );
    let c = def(
        "rt_c",
        DataType::Float,
        ValueType::ShortTerm,
        TagStatus::Offline,
    );
    let out = reg.upsert(&[a.clone(), b.clone(), c.clone()]).unwrap();
    assert!(
        out.iter().all(|o| matches!(o, Ok(Upserted::Inserted))),
        "{out:?}"
    );
    assert_eq!(reg.get("beh_b").unwrap(), Some(b.clone()));
    assert_eq!(reg.get("missing").unwrap(), None);

    let mut b2 = b.clone();
    b2.data_type = DataType::String;
    let mut c2 = c.clone();
    c2.ttl_secs = Some(7200);
    let mut c3 = c.clone();
    c3.value_type = ValueType::Statistic;
    c3.ttl_secs = None;
    let out = reg
        .upsert(&[a.clone(), b2.clone(), c2.clone(), c3])
        .unwrap();
    assert!(matches!(out[0], Ok(Upserted::Unchanged)));
    assert!(
        matches!(out[1], Ok(Upserted::Updated)),
        "gray: {:?}",
        out[1]
    );
    assert!(matches!(out[2], Ok(Upserted::Updated)), "TTL: {:?}", out[2]);
    assert!(
        matches!(&out[3], Err(e) if e.to_string().contains("a new meaning is a new code")),
        "{:?}",
        out[3]
    );
    assert_eq!(reg.list().unwrap(), [b2, a, c2]);

    assert_eq!(
        reg.set_status("rt_c", TagStatus::Online).unwrap(),
        TagStatus::Offline
    );
    let statuses = reg.statuses().unwrap();
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        [
            ("beh_b".to_string(), TagStatus::Gray),
            ("dim_a".to_string(), TagStatus::Online),
            ("rt_c".to_string(), TagStatus::Online),
        ]
    );
    assert!(reg.set_status("nope", TagStatus::Gray).is_err());
}

#[test]
fn library_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/tags.sqlite", dir.path().display());
    library_conforms(profile::open(&url).unwrap().as_mut());
}

#[test]
fn library_on_mariadb() {
    if !mysql_up() {
        return;
    }
    let db = ScratchDatabase::create("lib");
    library_conforms(profile::open(&db.url()).unwrap().as_mut());
    // The table it created is the shared schema, as MariaDB describes it.
    let mut conn = mysql::Conn::new(mysql::Opts::from_url(&db.url()).unwrap()).unwrap();
    let columns: Vec<(String, String)> = conn
        .query(
            "SELECT column_name, column_type FROM information_schema.columns \
                WHERE table_schema = DATABASE() AND table_name = 'tag_registry' \
                ORDER BY ordinal_position",
        )
        .unwrap();
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, profile::CSV_HEADER);
}
