//! Copies the router's command line, `src/main.rs` of the root package, into
//! `$OUT_DIR/router_main.rs` for `src/main.rs` here to include in a module
//! of its own: its `Cli` is private to the binary, and a module that
//! includes the text can name it. Inner attributes (`#![...]`), which
//! `include!` does not take, are left out; nothing else changes, so the
//! man page and the completions follow the router's definitions as they
//! are.
use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let src = Path::new(&manifest).join("../../src/main.rs");
    println!("cargo::rerun-if-changed={}", src.display());
    // src/main.rs asks `cfg(feature = "dev-tools")`, a feature of the
    // router's, not of this crate: always off here (production commands).
    println!("cargo::rustc-check-cfg=cfg(feature, values(\"dev-tools\"))");
    let text = match std::fs::read_to_string(&src) {
        Ok(t) => t,
        Err(e) => {
            println!("cargo::error=cannot read {}: {e}", src.display());
            return;
        }
    };
    let body: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("#!["))
        .map(|l| format!("{l}\n"))
        .collect();
    let out =
        Path::new(&std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into())).join("router_main.rs");
    if let Err(e) = std::fs::write(&out, body) {
        println!("cargo::error=cannot write {}: {e}", out.display());
    }
}
