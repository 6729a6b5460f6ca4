//! The registry's behaviour on SQLite files (the MySQL run of the same behaviour is
//! `tests/tests/profile_registry.rs`, against the real MariaDB).

use super::*;
use crate::tag::{DataType, ValueType};

fn tag(code: &str, data_type: DataType, value_type: ValueType, status: TagStatus) -> TagDef {
    TagDef {
        tag_code: code.into(),
        name: format!("name of {code}"),
        data_type,
        value_type,
        status,
        ttl_secs: (value_type == ValueType::ShortTerm).then_some(86_400),
        category: "cat".into(),
        owner: "crm".into(),
        update_frequency: "daily".into(),
    }
}

fn registry(dir: &tempfile::TempDir) -> Box<dyn TagRegistry> {
    let url = format!("sqlite://{}/nested/dir/tags.sqlite", dir.path().display());
    open(&url).expect("open the SQLite registry")
}

#[test]
fn upsert_list_get_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let city = tag(
        "dim_city",
        DataType::String,
        ValueType::Dimension,
        TagStatus::Online,
    );
    let buys = tag(
        "beh_buy_30d",
        DataType::Int,
        ValueType::Statistic,
        TagStatus::Gray,
    );
    let cat = tag(
        "rt_last_cat",
        DataType::String,
        ValueType::ShortTerm,
        TagStatus::Online,
    );
    {
        let mut r = registry(&dir);
        let out = r
            .upsert(&[city.clone(), buys.clone(), cat.clone()])
            .unwrap();
        assert_eq!(
            out.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            [Upserted::Inserted; 3]
        );
        assert!(dir.path().join("nested/dir/tags.sqlite").is_file());
    }
    // A new connection to the same file sees what the first committed.
    let mut r = registry(&dir);
    assert_eq!(r.list().unwrap(), [buys.clone(), city.clone(), cat.clone()]);
    assert_eq!(r.get("rt_last_cat").unwrap(), Some(cat.clone()));
    assert_eq!(r.get("nope").unwrap(), None);
    let mut renamed = city.clone();
    renamed.name = "City of residence".into();
    let out = r.upsert(&[city.clone(), renamed.clone()]).unwrap();
    assert_eq!(out[0].as_ref().unwrap(), &Upserted::Unchanged);
    assert_eq!(out[1].as_ref().unwrap(), &Upserted::Updated);
    assert_eq!(r.get("dim_city").unwrap(), Some(renamed));
    assert!(r.location().ends_with("nested/dir/tags.sqlite"));
}

#[test]
fn set_status_and_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = registry(&dir);
    r.upsert(&[
        tag(
            "dim_city",
            DataType::String,
            ValueType::Dimension,
            TagStatus::Online,
        ),
        tag(
            "beh_buy_30d",
            DataType::Int,
            ValueType::Statistic,
            TagStatus::Gray,
        ),
    ])
    .unwrap();
    assert_eq!(
        r.set_status("beh_buy_30d", TagStatus::Online).unwrap(),
        TagStatus::Gray
    );
    assert_eq!(
        r.set_status("dim_city", TagStatus::Offline).unwrap(),
        TagStatus::Online
    );
    let statuses = r.statuses().unwrap();
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        [
            ("beh_buy_30d".to_string(), TagStatus::Online),
            ("dim_city".to_string(), TagStatus::Offline)
        ]
    );
    assert!(matches!(
        r.set_status("nope", TagStatus::Online),
        Err(Error::UnknownTag(code)) if code == "nope"
    ));
}

#[test]
fn an_online_tag_keeps_its_meaning_and_the_rest_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = registry(&dir);
    let buys = tag(
        "beh_buy_30d",
        DataType::Int,
        ValueType::Statistic,
        TagStatus::Online,
    );
    let gray = tag(
        "beh_view_7d",
        DataType::Int,
        ValueType::Statistic,
        TagStatus::Gray,
    );
    r.upsert(&[buys.clone(), gray.clone()]).unwrap();

    let mut as_float = buys.clone();
    as_float.data_type = DataType::Float;
    let mut gray_float = gray.clone();
    gray_float.data_type = DataType::Float;
    let mut invalid = tag(
        "dim_x",
        DataType::Int,
        ValueType::Dimension,
        TagStatus::Online,
    );
    invalid.ttl_secs = Some(5);
    let added = tag(
        "dim_y",
        DataType::Boolean,
        ValueType::Dimension,
        TagStatus::Online,
    );
    let out = r
        .upsert(&[as_float, gray_float.clone(), invalid, added.clone()])
        .unwrap();
    let e = out[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("a new meaning is a new code"), "{e}");
    assert_eq!(
        out[1].as_ref().unwrap(),
        &Upserted::Updated,
        "gray may change"
    );
    assert!(matches!(out[2], Err(Error::Invalid(_))));
    assert_eq!(out[3].as_ref().unwrap(), &Upserted::Inserted);
    assert_eq!(r.get("beh_buy_30d").unwrap(), Some(buys.clone()));
    assert_eq!(r.get("beh_view_7d").unwrap(), Some(gray_float));
    assert_eq!(r.get("dim_y").unwrap(), Some(added));
    assert_eq!(r.get("dim_x").unwrap(), None);

    // Offline and back does not get round the rule.
    r.set_status("beh_buy_30d", TagStatus::Offline).unwrap();
    let mut short = buys.clone();
    short.value_type = ValueType::ShortTerm;
    short.ttl_secs = Some(60);
    let out = r.upsert(&[short]).unwrap();
    assert!(matches!(&out[0], Err(Error::Refused { code, .. }) if code == "beh_buy_30d"));
}

#[test]
fn a_hand_edited_row_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tags.sqlite");
    let mut r = SqliteRegistry::open(&path).unwrap();
    r.upsert(&[tag(
        "dim_a",
        DataType::Int,
        ValueType::Dimension,
        TagStatus::Online,
    )])
    .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE tag_registry SET status = 'live'", [])
        .unwrap();
    let e = r.list().unwrap_err().to_string();
    assert!(
        e.contains("stored tag 'dim_a'") && e.contains("status 'live'"),
        "{e}"
    );
    assert!(r.statuses().is_err());
}

#[test]
fn the_version_changes_with_every_write_by_anyone() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = registry(&dir);
    let mut other = registry(&dir);
    let first = job.version().unwrap();
    assert!(first.is_some(), "SQLite has a version");
    job.list().unwrap();
    assert_eq!(job.version().unwrap(), first, "reads change nothing");
    let a = tag(
        "dim_a",
        DataType::String,
        ValueType::Dimension,
        TagStatus::Online,
    );
    other.upsert(std::slice::from_ref(&a)).unwrap();
    let second = job.version().unwrap();
    assert_ne!(second, first, "another connection's import");
    other.set_status("dim_a", TagStatus::Offline).unwrap();
    let third = job.version().unwrap();
    assert_ne!(third, second, "another connection's status change");
    job.set_status("dim_a", TagStatus::Online).unwrap();
    assert_ne!(job.version().unwrap(), third, "its own change");
}
