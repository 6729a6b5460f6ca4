//! The sensor job's tools: traffic generation, publishing to Kafka, the tables' splits and the
//! landing check of a split.

pub mod generate;
pub mod landing;
pub mod produce;
pub mod splits;
