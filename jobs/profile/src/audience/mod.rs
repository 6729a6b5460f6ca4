//! Audience selection: the inverted index `user_tag_index` ([`index`]).

pub mod index;

pub use index::{index_table, IndexValue, INDEX_TABLE};
