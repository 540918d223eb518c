//! Benchmark tools compiled only with the `bench` feature: a load generator that drives one
//! bookie, and micro-benchmark kernels timed in Rust. They measure; they never serve.

pub mod loadgen;
pub mod microbench;
pub mod storage_scale;
