//! The sensor job's tools: traffic generation, publishing to Kafka, throughput and delay
//! benchmarks, the tables' splits and the landing check of a split.

pub mod bench;
pub mod generate;
pub mod landing;
pub mod produce;
pub mod splits;
