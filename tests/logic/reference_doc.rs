//! docs/reference.md is generated from the binary (`dsa-router config
//! --reference`): a flag or setting changed without regenerating the page
//! fails here.

use std::process::Command;

#[test]
fn the_reference_page_is_what_the_binary_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["config", "--reference"])
        .output()
        .expect("runs dsa-router");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("UTF-8");
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md"))
        .expect("docs/reference.md");
    assert!(
        printed.contains("--max-request-pdu") && printed.contains("[limits]"),
        "the page lists flags and settings"
    );
    assert!(
        page == printed,
        "docs/reference.md differs from what the binary prints: regenerate it with \
         `cargo run -- config --reference > docs/reference.md`"
    );
}
