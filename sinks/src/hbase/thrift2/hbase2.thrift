// The few Thrift2 (THBaseService) structs and calls hourglass needs: the table admin calls
// Thrift1 lacks (split keys, descriptors), the batched writes (`putMultiple`, whose cells
// each carry their own timestamp, and `deleteMultiple`), and the reads: `get`, `getMultiple`
// (results in the order asked), `getScannerResults` (open, fetch and close in one call) and a
// scanner for longer scans.
//
// Field ids, types and enum values are copied from HBase 2.6.1's own IDL,
// org/apache/hadoop/hbase/thrift2/hbase.thrift inside hbase-thrift-2.6.1.jar; fields
// and calls hourglass does not use are left out (Thrift skips unknown fields on read).
//
// Regenerate the Rust module next to this file (Debian's thrift-compiler 0.17, which
// matches the `thrift = "0.17"` crate) from the repository root with:
//   thrift --gen rs -out sinks/src/hbase/thrift2 sinks/src/hbase/thrift2/hbase2.thrift

namespace rs hbase2

enum TBloomFilterType {
  NONE = 0,
  ROW = 1,
  ROWCOL = 2,
  ROWPREFIX_FIXED_LENGTH = 3,
}

enum TCompressionAlgorithm {
  LZO = 0,
  GZ = 1,
  NONE = 2,
  SNAPPY = 3,
  LZ4 = 4,
  BZIP2 = 5,
  ZSTD = 6
}

enum TDataBlockEncoding {
  NONE = 0,
  PREFIX = 2,
  DIFF = 3,
  FAST_DIFF = 4,
  ROW_INDEX_V1 = 7
}

enum TDeleteType {
  DELETE_COLUMN = 0,
  DELETE_COLUMNS = 1,
  DELETE_FAMILY = 2,
  DELETE_FAMILY_VERSION = 3
}

struct TColumn {
  1: required binary family,
  2: optional binary qualifier,
  3: optional i64 timestamp
}

struct TColumnValue {
  1: required binary family,
  2: required binary qualifier,
  3: required binary value,
  4: optional i64 timestamp
}

struct TResult {
  1: optional binary row,
  2: required list<TColumnValue> columnValues,
  3: optional bool stale = false
}

struct TTimeRange {
  1: required i64 minStamp,
  2: required i64 maxStamp
}

struct TGet {
  1: required binary row,
  2: optional list<TColumn> columns,
  3: optional i64 timestamp,
  4: optional TTimeRange timeRange,
  5: optional i32 maxVersions,
  11: optional bool cacheBlocks
}

struct TScan {
  1: optional binary startRow,
  2: optional binary stopRow,
  3: optional list<TColumn> columns
  4: optional i32 caching,
  5: optional i32 maxVersions=1,
  6: optional TTimeRange timeRange,
  7: optional binary filterString,
  11: optional bool reversed
  12: optional bool cacheBlocks
  15: optional i32 limit
}

struct TPut {
  1: required binary row,
  2: required list<TColumnValue> columnValues
  3: optional i64 timestamp
}

struct TDelete {
  1: required binary row,
  2: optional list<TColumn> columns,
  3: optional i64 timestamp,
  4: optional TDeleteType deleteType = 1
}

struct TTableName {
  1: optional binary ns
  2: required binary qualifier
}

struct TColumnFamilyDescriptor {
  1: required binary name
  4: optional i32 blockSize
  5: optional TBloomFilterType bloomnFilterType
  6: optional TCompressionAlgorithm compressionType
  8: optional TDataBlockEncoding dataBlockEncoding
  10: optional i32 maxVersions
  13: optional i32 timeToLive
}

struct TTableDescriptor {
  1: required TTableName tableName
  2: optional list<TColumnFamilyDescriptor> columns
}

exception TIOError {
  1: optional string message
  2: optional bool canRetry
}

exception TIllegalArgument {
  1: optional string message
}

service THBaseService {
  TResult get(1: required binary table, 2: required TGet tget) throws (1: TIOError io)
  list<TResult> getMultiple(1: required binary table, 2: required list<TGet> tgets)
    throws (1: TIOError io)
  list<TResult> getScannerResults(1: required binary table, 2: required TScan tscan,
    3: i32 numRows = 1) throws (1: TIOError io)
  i32 openScanner(1: required binary table, 2: required TScan tscan) throws (1: TIOError io)
  list<TResult> getScannerRows(1: required i32 scannerId, 2: i32 numRows = 1)
    throws (1: TIOError io, 2: TIllegalArgument ia)
  void closeScanner(1: required i32 scannerId) throws (1: TIOError io, 2: TIllegalArgument ia)
  void putMultiple(1: required binary table, 2: required list<TPut> tputs) throws (1: TIOError io)
  list<TDelete> deleteMultiple(1: required binary table, 2: required list<TDelete> tdeletes)
    throws (1: TIOError io)
  TTableDescriptor getTableDescriptor(1: required TTableName table) throws (1: TIOError io)
  void createTable(1: required TTableDescriptor desc, 2: list<binary> splitKeys)
    throws (1: TIOError io)
  void deleteTable(1: required TTableName tableName) throws (1: TIOError io)
  void disableTable(1: required TTableName tableName) throws (1: TIOError io)
  bool isTableEnabled(1: required TTableName tableName) throws (1: TIOError io)
}
