//! Generates the gRPC baseline's client and server from `proto/bench.proto`
//! with the protoc binary shipped by the `protoc-bin-vendored` crate.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/bench.proto");
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/bench.proto"], &["proto"])?;
    Ok(())
}
