//! Opening, persisting and reopening a store, and what it refuses to open or write.

use super::*;
use crate::embedded::OpenMode;
use crate::{test_tables as schema, Error};

#[test]
fn writes_show_on_flush_and_survive_reopen_after_persist() {
    let dir = TempDir::new().unwrap();
    {
        let (store, _) = open(&dir);
        let mut w = store.writer();
        w.write(vec![put_v(b"a", b"1")]).unwrap();
        assert_eq!(store.get(T, b"a", None).unwrap(), None);
        w.flush().unwrap();
        assert!(store.get(T, b"a", None).unwrap().is_some());
        // Dropping a writer commits what it still holds.
        w.write(vec![put_v(b"b", b"2")]).unwrap();
        drop(w);
        store.persist().unwrap();
    }
    let (store, _) = open(&dir);
    assert_eq!(keys(&store.dump(T).unwrap()), [&b"a"[..], b"b"]);
    assert_eq!(
        store.get(T, b"b", None).unwrap().unwrap().cells,
        vec![cell("t", b"v", NOW, b"2")]
    );
}

#[test]
fn opens_hourglass_tables_and_refuses_a_second_open() {
    let dir = TempDir::new().unwrap();
    let store = EmbeddedStore::open(dir.path(), &schema::all_tables()).unwrap();
    let mut w = store.writer();
    let wide = Mutation::Put {
        table: schema::HOURLY_TABLE,
        row: b"dev1_2024010100".to_vec(),
        cells: vec![cell(schema::FAMILY, b"42", i64::MAX / 2, b"v")],
    };
    w.write(vec![wide]).unwrap();
    w.flush().unwrap();
    assert_eq!(store.dump(schema::HOURLY_TABLE).unwrap().len(), 1);
    assert!(store.dump(schema::NARROW_TABLE).unwrap().is_empty());

    let err = EmbeddedStore::open(dir.path(), &schema::all_tables()).unwrap_err();
    assert!(
        matches!(&err, Error::Embedded(_))
            && !err.is_retriable()
            && err.to_string().contains("is locked")
            && err.to_string().contains("--store"),
        "{err}"
    );
}

#[test]
fn invalid_mutations_are_refused_and_queue_nothing() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let mut w = store.writer();
    let refused = [
        put_v(b"a\x00b", b"1"),
        put_v(b"", b"1"),
        put(b"r", vec![cell("nope", b"v", NOW, b"1")]),
        Mutation::Put {
            table: "nope",
            row: b"r".to_vec(),
            cells: vec![],
        },
        put(b"r", vec![cell("t", &vec![b'q'; 70_000], NOW, b"1")]),
    ];
    for bad in refused {
        let err = w.write(vec![put_v(b"ok", b"1"), bad]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }
    w.flush().unwrap();
    assert!(store.dump(T).unwrap().is_empty());
    assert!(matches!(
        store.scan("nope", &ScanSpec::default()),
        Err(Error::Invalid(_))
    ));
}

#[test]
fn table_specs_the_store_cannot_honour_are_refused() {
    let dir = TempDir::new().unwrap();
    let mut versions = table();
    versions.families[0].max_versions = 0;
    let mut separator = table();
    separator.families[0].name = "t\x00";
    for spec in [versions, separator] {
        let err = EmbeddedStore::open(dir.path(), &[spec]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }
    let err = EmbeddedStore::open(dir.path(), &[table(), table()]).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
}

/// A store in `dir` with ten write batches in its journal, closed; returns the journal's path.
fn store_with_ten_batches(dir: &TempDir) -> std::path::PathBuf {
    let (store, _) = open(dir);
    for batch in 0..10u8 {
        write(&store, vec![put_v(&[b'a' + batch], b"v")]);
    }
    drop(store);
    dir.path().join("0.jnl")
}

fn open_as(dir: &TempDir, mode: OpenMode) -> crate::Result<EmbeddedStore> {
    let (_, clock) = clock();
    EmbeddedStore::open_with_options(dir.path(), &[table()], clock, mode)
}

#[test]
fn a_damaged_journal_is_refused_unchanged_unless_recovering() {
    let dir = TempDir::new().unwrap();
    let journal = store_with_ten_batches(&dir);
    let mut bytes = std::fs::read(&journal).unwrap();
    let written = bytes.iter().rposition(|&b| b != 0).unwrap();
    bytes[written / 2] ^= 0x01;
    std::fs::write(&journal, &bytes).unwrap();

    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let err = open_as(&dir, mode).unwrap_err();
        assert!(
            matches!(&err, Error::Embedded(e) if e.to_string().contains("damaged journal") && e.to_string().contains("--recover")),
            "{mode:?}: {err}"
        );
        assert_eq!(std::fs::read(&journal).unwrap(), bytes, "{mode:?}");
    }

    let store = open_as(&dir, OpenMode::Recover).unwrap();
    let dropped = store.dropped_on_open();
    assert_eq!(dropped.len(), 1);
    assert!(dropped[0].lost_batches > 0 && dropped[0].lost_cells > 0);
    let kept = store.dump(T).unwrap().len();
    assert!(kept < 10, "{kept} rows kept");
}

#[test]
fn read_only_opens_change_nothing_and_never_create_a_store() {
    let dir = TempDir::new().unwrap();
    let journal = store_with_ten_batches(&dir);
    let before = std::fs::read(&journal).unwrap();
    let store = open_as(&dir, OpenMode::ReadOnly).unwrap();
    assert_eq!(store.dump(T).unwrap().len(), 10);
    drop(store);
    assert_eq!(std::fs::read(&journal).unwrap(), before);

    let empty = TempDir::new().unwrap();
    std::fs::write(empty.path().join("notes"), "x").unwrap();
    let err = open_as(&empty, OpenMode::ReadOnly).unwrap_err();
    assert!(
        matches!(&err, Error::Embedded(e) if e.to_string().contains("no embedded store")),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(empty.path()).unwrap().collect();
    assert_eq!(left.len(), 1);
}
