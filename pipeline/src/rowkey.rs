//! Former path of the row-key codec, kept so that files being edited elsewhere still build.
//!
//! Re-exports only: new code uses [`crate::codec`]. Remove once no `rowkey::` path is left.

pub use crate::codec::hourly::{hour_start, wide_cell_ts_ms, wide_key, wide_qualifier};
pub use crate::codec::key::{java_string_hash, salt_bucket, validate_device, SEPARATOR};
pub use crate::codec::narrow::{
    narrow_key, narrow_prefix, narrow_range, parse_narrow_key, KeyRange, KeyScheme, NarrowKey,
    FORWARD_TS_WIDTH, LONG_MAX, REVERSED_TS_WIDTH,
};
