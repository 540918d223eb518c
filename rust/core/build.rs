//! Generates the V3 (protobuf) wire protocol's message types from `proto/bookkeeper_v3.proto`
//! at build time: `protox` parses the schema in pure Rust (no `protoc` to install or download)
//! and `prost-build` writes the Rust types into OUT_DIR.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schema = "proto/bookkeeper_v3.proto";
    println!("cargo:rerun-if-changed={schema}");
    let descriptors = protox::compile([schema], ["proto"])?;
    prost_build::Config::new()
        .bytes(["."])
        .compile_fds(descriptors)?;
    Ok(())
}
