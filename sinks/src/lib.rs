//! Storage backends of hourglass: the embedded fjall store, HBase over Thrift, dead-letter files.
#![deny(missing_docs)]

pub mod dead_letter;
pub mod embedded;
pub mod hbase;
