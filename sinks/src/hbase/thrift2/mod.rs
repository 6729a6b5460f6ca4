//! Generated Thrift2 client for the table admin calls Thrift1 lacks (split keys, descriptors).
//!
//! `hbase2_admin.rs` is generated from `hbase2_admin.thrift` (see the command in that file) and
//! committed, so building hourglass does not need the Thrift compiler.

#[allow(
    missing_docs,
    missing_debug_implementations,
    dead_code,
    rust_2018_idioms,
    clippy::all,
    clippy::pedantic
)]
#[rustfmt::skip]
mod hbase2_admin;

pub(crate) use hbase2_admin::*;
