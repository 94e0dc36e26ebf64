//! Shared by the node's benchmark examples.

use std::path::PathBuf;

/// The `oz0-node` binary: `OZ0_NODE_BIN`, else the one next to this
/// example's folder (`target/<profile>/oz0-node`); exits 2 naming the build
/// command when it is missing.
pub fn node() -> PathBuf {
    if let Some(p) = std::env::var_os("OZ0_NODE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("own path");
    // target/<profile>/examples/<name> -> target/<profile>/oz0-node
    let p = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("oz0-node"))
        .expect("target folder");
    if !p.exists() {
        eprintln!(
            "{} is missing: build it first (cargo build --release -p oz0-node) or set OZ0_NODE_BIN",
            p.display()
        );
        std::process::exit(2);
    }
    p
}
