//! Every fuzz seed (`fuzz/corpus/TARGET/`) and every committed crash input
//! (`fuzz/regressions/TARGET/`) through the fuzz targets' own checks
//! (`dsa_router::app::fuzzing`): what a fuzzer once broke stays fixed, without
//! a nightly toolchain.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::Path;

type Target = fn(&[u8]);

#[test]
fn fuzz_seeds_and_regressions_pass_the_targets_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let targets: [(&str, Target); 6] = [
        ("request", dsa_router::app::fuzzing::request),
        ("response", dsa_router::app::fuzzing::response),
        ("knowledge", dsa_router::app::fuzzing::knowledge),
        ("dn", dsa_router::app::fuzzing::dn),
        ("proxy_header", dsa_router::app::fuzzing::proxy_header),
        ("schema", dsa_router::app::fuzzing::schema),
    ];
    for (name, run) in targets {
        let mut n = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join(name)) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                let data = std::fs::read(e.path()).unwrap();
                let path = e.path();
                let result = std::panic::catch_unwind(|| run(&data));
                assert!(result.is_ok(), "{name}: {} fails", path.display());
                n += 1;
            }
        }
        assert!(n > 0, "no seed for fuzz target {name}");
    }
}
