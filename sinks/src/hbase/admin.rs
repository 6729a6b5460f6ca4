//! Table admin on HBase: create tables pre-split (Thrift2), describe them, drop them.

use crate::schema::{shell_string, DataBlockEncoding, FamilySpec, TableSpec, DEFAULT_BLOCK_SIZE};
use crate::table::ScanSpec;
use hbase_thrift::hbase::THbaseSyncClient;

use super::client::{Connection, Thrift1, Thrift2};
use super::config::HbaseConfig;
use super::retry::retrying;
use super::thrift2::{
    TBloomFilterType, TColumnFamilyDescriptor, TCompressionAlgorithm, TDataBlockEncoding,
    TTHBaseServiceSyncClient, TTableDescriptor, TTableName,
};
use super::{Error, Result};
use crate::admin::{Created, FamilyDescription, RegionDescription, TableDescription};

/// HBase's TTL meaning "forever" (`HConstants.FOREVER`).
const TTL_FOREVER: i32 = i32::MAX;

fn table_name(name: &str) -> TTableName {
    TTableName::new(None, name.as_bytes().to_vec())
}

fn compression_to_thrift(c: crate::schema::Compression) -> TCompressionAlgorithm {
    match c {
        crate::schema::Compression::None => TCompressionAlgorithm::NONE,
        crate::schema::Compression::Snappy => TCompressionAlgorithm::SNAPPY,
    }
}

fn bloom_to_thrift(b: crate::schema::Bloom) -> TBloomFilterType {
    match b {
        crate::schema::Bloom::None => TBloomFilterType::NONE,
        crate::schema::Bloom::Row => TBloomFilterType::ROW,
    }
}

fn encoding_to_thrift(e: DataBlockEncoding) -> TDataBlockEncoding {
    match e {
        DataBlockEncoding::None => TDataBlockEncoding::NONE,
        DataBlockEncoding::FastDiff => TDataBlockEncoding::FAST_DIFF,
        DataBlockEncoding::RowIndexV1 => TDataBlockEncoding::ROW_INDEX_V1,
    }
}

fn encoding_name(e: TDataBlockEncoding) -> String {
    match e {
        TDataBlockEncoding::NONE => "NONE".into(),
        TDataBlockEncoding::PREFIX => "PREFIX".into(),
        TDataBlockEncoding::DIFF => "DIFF".into(),
        TDataBlockEncoding::FAST_DIFF => "FAST_DIFF".into(),
        TDataBlockEncoding::ROW_INDEX_V1 => "ROW_INDEX_V1".into(),
        TDataBlockEncoding(other) => format!("UNKNOWN({other})"),
    }
}

fn compression_name(c: TCompressionAlgorithm) -> String {
    match c {
        TCompressionAlgorithm::LZO => "LZO".into(),
        TCompressionAlgorithm::GZ => "GZ".into(),
        TCompressionAlgorithm::NONE => "NONE".into(),
        TCompressionAlgorithm::SNAPPY => "SNAPPY".into(),
        TCompressionAlgorithm::LZ4 => "LZ4".into(),
        TCompressionAlgorithm::BZIP2 => "BZIP2".into(),
        TCompressionAlgorithm::ZSTD => "ZSTD".into(),
        TCompressionAlgorithm(other) => format!("UNKNOWN({other})"),
    }
}

fn bloom_name(b: TBloomFilterType) -> String {
    match b {
        TBloomFilterType::NONE => "NONE".into(),
        TBloomFilterType::ROW => "ROW".into(),
        TBloomFilterType::ROWCOL => "ROWCOL".into(),
        TBloomFilterType::ROWPREFIX_FIXED_LENGTH => "ROWPREFIX_FIXED_LENGTH".into(),
        TBloomFilterType(other) => format!("UNKNOWN({other})"),
    }
}

/// The Thrift2 descriptor of `spec`.
///
/// # Errors
/// [`Error::IllegalArgument`] if a TTL or a block size does not fit HBase's 32-bit fields.
fn descriptor(spec: &TableSpec) -> Result<TTableDescriptor> {
    let mut columns = Vec::with_capacity(spec.families.len());
    for f in &spec.families {
        let ttl = match f.ttl_secs {
            None => TTL_FOREVER,
            Some(secs) => i32::try_from(secs).map_err(|_| Error::IllegalArgument {
                call: "createTable",
                table: spec.name.to_string(),
                message: format!("TTL {secs} s of family {} exceeds HBase's limit", f.name),
            })?,
        };
        let block_size = i32::try_from(f.block_size).map_err(|_| Error::IllegalArgument {
            call: "createTable",
            table: spec.name.to_string(),
            message: format!(
                "block size {} of family {} exceeds HBase's limit",
                f.block_size, f.name
            ),
        })?;
        columns.push(TColumnFamilyDescriptor::new(
            f.name.as_bytes().to_vec(),
            block_size,
            bloom_to_thrift(f.bloom),
            compression_to_thrift(f.compression),
            encoding_to_thrift(f.data_block_encoding),
            i32::try_from(f.max_versions).unwrap_or(i32::MAX),
            ttl,
        ));
    }
    Ok(TTableDescriptor::new(table_name(spec.name), columns))
}

fn family_from_thrift(f: &TColumnFamilyDescriptor) -> FamilyDescription {
    FamilyDescription {
        name: String::from_utf8_lossy(&f.name).into_owned(),
        ttl_secs: match f.time_to_live {
            None | Some(TTL_FOREVER) => None,
            Some(secs) => Some(u64::try_from(secs).unwrap_or(0)),
        },
        compression: compression_name(f.compression_type.unwrap_or(TCompressionAlgorithm::NONE)),
        bloom: bloom_name(f.bloomn_filter_type.unwrap_or(TBloomFilterType::NONE)),
        max_versions: f.max_versions.map_or(1, |v| u32::try_from(v).unwrap_or(0)),
        // HBase's gateway always sends both; absent, they are HBase's defaults.
        block_size: f
            .block_size
            .map_or(DEFAULT_BLOCK_SIZE, |b| u32::try_from(b).unwrap_or(0)),
        data_block_encoding: encoding_name(
            f.data_block_encoding.unwrap_or(TDataBlockEncoding::NONE),
        ),
    }
}

fn ttl_text(ttl: Option<u64>) -> String {
    ttl.map_or_else(|| "FOREVER".to_string(), |t| t.to_string())
}

/// What differs between the families hourglass wants and the ones HBase has in what a table
/// keeps and how (TTL, versions, compression, bloom filter, the families themselves), one
/// `have X, want Y` phrase per attribute; empty if they match. `tables create` refuses a table
/// that differs so ([`Error::SchemaMismatch`]). The block size and data block encoding are
/// [`storage_differences`].
pub fn schema_differences(want: &[FamilySpec], have: &[FamilyDescription]) -> Vec<String> {
    let mut out = Vec::new();
    for w in want {
        let Some(h) = have.iter().find(|h| h.name == w.name) else {
            out.push(format!("family {} is missing", w.name));
            continue;
        };
        if h.ttl_secs != w.ttl_secs {
            out.push(format!(
                "family {}: TTL is {}, want {}",
                w.name,
                ttl_text(h.ttl_secs),
                ttl_text(w.ttl_secs)
            ));
        }
        if h.compression != w.compression.hbase_name() {
            out.push(format!(
                "family {}: COMPRESSION is {}, want {}",
                w.name,
                h.compression,
                w.compression.hbase_name()
            ));
        }
        if h.bloom != w.bloom.hbase_name() {
            out.push(format!(
                "family {}: BLOOMFILTER is {}, want {}",
                w.name,
                h.bloom,
                w.bloom.hbase_name()
            ));
        }
        if h.max_versions != w.max_versions {
            out.push(format!(
                "family {}: VERSIONS is {}, want {}",
                w.name, h.max_versions, w.max_versions
            ));
        }
    }
    for h in have {
        if !want.iter().any(|w| w.name == h.name) {
            out.push(format!("unexpected family {}", h.name));
        }
    }
    out
}

/// What differs between the families hourglass wants and the ones HBase has in how their
/// files are laid out (block size, data block encoding), one `have X, want Y` phrase per
/// attribute; empty if they match. A table that differs only so stores and answers the same,
/// so `tables create` keeps it and warns ([`Created::ExistsWithOtherStorage`]): a deployment
/// made before a spec chose an encoding keeps working. Families missing on either side are
/// [`schema_differences`]'.
pub fn storage_differences(want: &[FamilySpec], have: &[FamilyDescription]) -> Vec<String> {
    let mut out = Vec::new();
    for w in want {
        let Some(h) = have.iter().find(|h| h.name == w.name) else {
            continue;
        };
        if h.block_size != w.block_size {
            out.push(format!(
                "family {}: BLOCKSIZE is {}, want {}",
                w.name, h.block_size, w.block_size
            ));
        }
        if h.data_block_encoding != w.data_block_encoding.hbase_name() {
            out.push(format!(
                "family {}: DATA_BLOCK_ENCODING is {}, want {}",
                w.name,
                h.data_block_encoding,
                w.data_block_encoding.hbase_name()
            ));
        }
    }
    out
}

/// The HBase shell commands that give `table`'s families in `have` the block size and data
/// block encoding of `want`: an `alter` per family that differs, then a `major_compact`, since
/// `alter` applies to files written after it and the compaction rewrites the others. Empty if
/// none differs. (HBase's Thrift2 `modifyColumnFamily` does the same as the `alter`; hourglass
/// leaves an existing table's layout to whoever runs it, as it does its splits.)
pub fn alter_commands(table: &str, want: &[FamilySpec], have: &[FamilyDescription]) -> Vec<String> {
    let mut out: Vec<String> = want
        .iter()
        .filter(|w| !storage_differences(std::slice::from_ref(w), have).is_empty())
        .map(|w| {
            format!(
                "alter {}, {{NAME => '{}', BLOCKSIZE => {}, DATA_BLOCK_ENCODING => '{}'}}",
                shell_string(table.as_bytes()),
                w.name,
                w.block_size,
                w.data_block_encoding.hbase_name()
            )
        })
        .collect();
    if !out.is_empty() {
        out.push(format!("major_compact {}", shell_string(table.as_bytes())));
    }
    out
}

/// Thrift1's answer to `getTableRegions`, ordered by start key.
pub(crate) fn region_descriptions(
    regions: Vec<hbase_thrift::hbase::TRegionInfo>,
) -> Vec<RegionDescription> {
    let mut out: Vec<RegionDescription> = regions
        .into_iter()
        .map(|r| RegionDescription {
            start: r.start_key.unwrap_or_default(),
            end: r.end_key.unwrap_or_default(),
            name: String::from_utf8_lossy(&r.name.unwrap_or_default()).into_owned(),
            server: format!(
                "{}:{}",
                String::from_utf8_lossy(&r.server_name.unwrap_or_default()),
                r.port.unwrap_or_default()
            ),
        })
        .collect();
    out.sort_by(|a, b| a.start.cmp(&b.start));
    out
}

/// Admin connections to both gateways.
struct Admin {
    cfg: HbaseConfig,
    t1: Connection<Thrift1>,
    t2: Connection<Thrift2>,
}

impl Admin {
    fn new(cfg: &HbaseConfig) -> Self {
        Admin {
            t1: Connection::new(&cfg.thrift1, cfg),
            t2: Connection::new(&cfg.thrift2, cfg),
            cfg: cfg.clone(),
        }
    }

    /// Through Thrift1, so that jobs that only read and write need no Thrift2 gateway.
    fn exists(&mut self, table: &str) -> Result<bool> {
        let t1 = &mut self.t1;
        let names = retrying(&self.cfg.retry, "getTableNames", || {
            t1.call("getTableNames", table, |c| c.get_table_names())
        })?;
        Ok(names.iter().any(|n| n.as_slice() == table.as_bytes()))
    }

    fn families(&mut self, table: &str) -> Result<Vec<FamilyDescription>> {
        let t2 = &mut self.t2;
        let desc = retrying(
            &self.cfg.retry,
            &format!("getTableDescriptor {table}"),
            || {
                t2.call("getTableDescriptor", table, |c| {
                    c.get_table_descriptor(table_name(table))
                })
            },
        )?;
        let mut families: Vec<FamilyDescription> = desc
            .columns
            .unwrap_or_default()
            .iter()
            .map(family_from_thrift)
            .collect();
        families.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(families)
    }

    fn regions(&mut self, table: &str) -> Result<Vec<RegionDescription>> {
        let t1 = &mut self.t1;
        let regions = retrying(&self.cfg.retry, &format!("getTableRegions {table}"), || {
            t1.call("getTableRegions", table, |c| {
                c.get_table_regions(table.as_bytes().to_vec())
            })
        })?;
        Ok(region_descriptions(regions))
    }

    /// The table's families, if they keep what `spec`'s keep (their block size and encoding
    /// may differ).
    fn check_schema(&mut self, spec: &TableSpec) -> Result<Vec<FamilyDescription>> {
        let have = self.families(spec.name)?;
        let differences = schema_differences(&spec.families, &have);
        if differences.is_empty() {
            Ok(have)
        } else {
            Err(Error::SchemaMismatch {
                table: spec.name.to_string(),
                differences: differences.join("; "),
                ddl: spec.hbase_shell_ddl(),
            })
        }
    }

    /// What an existing table with the right schema lacks of `spec`'s block layout and split
    /// keys.
    fn existing(&mut self, spec: &TableSpec) -> Result<Created> {
        let have = self.check_schema(spec)?;
        let regions = self.regions(spec.name)?;
        let missing = missing_split_keys(&spec.split_keys, &regions);
        let differences = storage_differences(&spec.families, &have);
        Ok(if !differences.is_empty() {
            Created::ExistsWithOtherStorage {
                differences,
                alter: alter_commands(spec.name, &spec.families, &have),
                regions: regions.len(),
                missing,
            }
        } else if missing.is_empty() {
            Created::AlreadyExists
        } else {
            Created::ExistsWithOtherSplits {
                regions: regions.len(),
                missing,
            }
        })
    }

    fn create(&mut self, spec: &TableSpec) -> Result<Created> {
        if self.exists(spec.name)? {
            return self.existing(spec);
        }
        let desc = descriptor(spec)?;
        let t2 = &mut self.t2;
        let created = retrying(
            &self.cfg.retry,
            &format!("createTable {}", spec.name),
            || {
                t2.call("createTable", spec.name, |c| {
                    c.create_table(desc.clone(), spec.split_keys.clone())
                })
            },
        );
        match created {
            Ok(()) => Ok(Created::Created),
            // Someone else created it meanwhile: fine if the schema is ours.
            Err(Error::Server { message, .. }) if message.contains("TableExistsException") => {
                self.existing(spec)
            }
            Err(e) => Err(e),
        }
    }

    fn drop_table(&mut self, table: &str) -> Result<bool> {
        if !self.exists(table)? {
            return Ok(false);
        }
        let (t2, policy) = (&mut self.t2, &self.cfg.retry);
        let enabled = retrying(policy, &format!("isTableEnabled {table}"), || {
            t2.call("isTableEnabled", table, |c| {
                c.is_table_enabled(table_name(table))
            })
        })?;
        if enabled {
            retrying(policy, &format!("disableTable {table}"), || {
                t2.call("disableTable", table, |c| {
                    c.disable_table(table_name(table))
                })
            })?;
        }
        retrying(policy, &format!("deleteTable {table}"), || {
            t2.call("deleteTable", table, |c| c.delete_table(table_name(table)))
        })?;
        Ok(true)
    }
}

/// The keys of `wanted` that are not the start of one of `regions`, in the order given.
pub fn missing_split_keys(wanted: &[Vec<u8>], regions: &[RegionDescription]) -> Vec<Vec<u8>> {
    wanted
        .iter()
        .filter(|k| !regions.iter().any(|r| &r.start == *k))
        .cloned()
        .collect()
}

/// The HBase shell commands that add `missing` to `table`'s region boundaries, one `split` a
/// key, in key order.
///
/// Neither Thrift gateway of HBase 2 has a split call, so hourglass cannot split a table
/// itself. Each `split 'table', 'key'` splits the region holding the key at the key (HBase 2's
/// shell waits for each split). A daughter region that still holds references to its parent's
/// files cannot be split again until a compaction rewrites them: on an empty table the commands
/// run one after the other; on a table holding data, run `major_compact` between them, as the
/// comments printed with them say.
pub fn split_commands(table: &str, missing: &[Vec<u8>]) -> Vec<String> {
    let mut keys: Vec<&Vec<u8>> = missing.iter().collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            format!(
                "split {}, {}",
                shell_string(table.as_bytes()),
                shell_string(k)
            )
        })
        .collect()
}

/// The state of `spec`'s table in HBase against its spec's split keys: its regions and the
/// split keys that are no region boundary.
///
/// # Errors
/// [`Error::TableNotFound`]; an unreachable gateway.
pub fn split_state(
    cfg: &HbaseConfig,
    spec: &TableSpec,
) -> Result<(Vec<RegionDescription>, Vec<Vec<u8>>)> {
    let mut admin = Admin::new(cfg);
    if !admin.exists(spec.name)? {
        return Err(Error::TableNotFound {
            table: spec.name.to_string(),
            addr: cfg.thrift1.clone(),
        });
    }
    let regions = admin.regions(spec.name)?;
    let missing = missing_split_keys(&spec.split_keys, &regions);
    Ok((regions, missing))
}

/// Drops `spec`'s table and creates it again with its split keys, if it holds no row (a scan
/// for one row finds none) and its schema is `spec`'s. Returns whether it did. For a table
/// made before it was pre-split and not written yet: the one split HBase's Thrift gateways
/// allow. A writer that puts a row between the check and the drop loses it: stop the jobs
/// that write the table first.
///
/// # Errors
/// [`Error::TableNotFound`]; [`Error::SchemaMismatch`]; an unreachable gateway or HBase's
/// refusal.
pub fn recreate_if_empty(cfg: &HbaseConfig, spec: &TableSpec) -> Result<bool> {
    let mut admin = Admin::new(cfg);
    if !admin.exists(spec.name)? {
        return Err(Error::TableNotFound {
            table: spec.name.to_string(),
            addr: cfg.thrift1.clone(),
        });
    }
    admin.check_schema(spec)?;
    let one = ScanSpec {
        limit: Some(1),
        ..ScanSpec::default()
    };
    if !super::HbaseStore::new(cfg)
        .scan_rows(spec.name, &one)?
        .is_empty()
    {
        return Ok(false);
    }
    admin.drop_table(spec.name)?;
    admin.create(spec)?;
    Ok(true)
}

/// Creates each table of `specs` with its families (block size and data block encoding
/// included) and split keys through the Thrift2 gateway (Thrift1's `createTable` takes no split
/// keys). A table that already exists with the same families, TTLs, compression, bloom filters
/// and versions is left alone: [`Created::ExistsWithOtherStorage`] names another block size or
/// encoding and the commands that change it, [`Created::ExistsWithOtherSplits`] the split keys
/// it lacks.
///
/// # Errors
/// [`Error::SchemaMismatch`] naming what differs if a table exists with another schema; an
/// unreachable gateway once `cfg.retry` gives up; HBase's refusal (e.g. a SNAPPY codec missing).
pub fn create_tables(cfg: &HbaseConfig, specs: &[TableSpec]) -> Result<Vec<(String, Created)>> {
    let mut admin = Admin::new(cfg);
    specs
        .iter()
        .map(|spec| Ok((spec.name.to_string(), admin.create(spec)?)))
        .collect()
}

/// Describes the tables of `specs` as HBase has them: families (TTL, compression, bloom filter,
/// versions, block size, data block encoding) from Thrift2 and region boundaries from Thrift1 `getTableRegions`.
///
/// # Errors
/// [`Error::TableNotFound`] if a table does not exist; an unreachable gateway.
pub fn describe_tables(cfg: &HbaseConfig, specs: &[TableSpec]) -> Result<Vec<TableDescription>> {
    let mut admin = Admin::new(cfg);
    let mut out = Vec::with_capacity(specs.len());
    for spec in specs {
        if !admin.exists(spec.name)? {
            return Err(Error::TableNotFound {
                table: spec.name.to_string(),
                addr: cfg.thrift1.clone(),
            });
        }
        out.push(TableDescription {
            name: spec.name.to_string(),
            families: admin.families(spec.name)?,
            regions: admin.regions(spec.name)?,
        });
    }
    Ok(out)
}

/// The tables of `specs` that do not exist in HBase (asked through the Thrift1 gateway only).
///
/// # Errors
/// An unreachable gateway once `cfg.retry` gives up.
pub fn missing_tables(cfg: &HbaseConfig, specs: &[TableSpec]) -> Result<Vec<String>> {
    let mut admin = Admin::new(cfg);
    let mut missing = Vec::new();
    for spec in specs {
        if !admin.exists(spec.name)? {
            missing.push(spec.name.to_string());
        }
    }
    Ok(missing)
}

/// The regions of `table`, ordered by start key.
///
/// # Errors
/// An unreachable gateway, or HBase's refusal.
pub fn table_regions(cfg: &HbaseConfig, table: &str) -> Result<Vec<RegionDescription>> {
    Admin::new(cfg).regions(table)
}

/// Asks HBase to major-compact `table` (Thrift1 `majorCompact`): its regions' files are
/// rewritten without deleted, expired and surplus cells, and delete markers are dropped. The
/// call returns once the region servers have queued the compactions, which then run in the
/// background (the HBase UI or `compaction_state` in the shell shows them).
///
/// # Errors
/// [`Error::TableNotFound`]; an unreachable gateway, or HBase's refusal.
pub fn major_compact(cfg: &HbaseConfig, table: &str) -> Result<()> {
    let mut t1: Connection<Thrift1> = Connection::new(&cfg.thrift1, cfg);
    retrying(&cfg.retry, &format!("majorCompact {table}"), || {
        t1.call("majorCompact", table, |c| {
            c.major_compact(table.as_bytes().to_vec())
        })
    })
}

/// Disables and deletes each table of `names` that exists, with all its data. Returns the names
/// of the tables it deleted.
///
/// # Errors
/// An unreachable gateway, or HBase's refusal.
pub fn drop_tables(cfg: &HbaseConfig, names: &[&str]) -> Result<Vec<String>> {
    let mut admin = Admin::new(cfg);
    let mut dropped = Vec::new();
    for name in names {
        if admin.drop_table(name)? {
            dropped.push((*name).to_string());
        }
    }
    Ok(dropped)
}
