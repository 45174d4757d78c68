//! Compiles `proto/agent_tool_exposure/v1/service.proto` without protoc (protox): its encoded
//! descriptor set, which the gRPC service and server reflection read at run time, and the
//! generated Rust client the tests call the service with.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../proto");
    let file = root.join("agent_tool_exposure/v1/service.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("agent_tool_exposure.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
