#![allow(clippy::unwrap_used, clippy::panic)]
//! Memory given back: after a flood of large incomplete requests ends, the
//! router process's resident set comes back near where it was, without
//! any other traffic to prompt it.

use crate::support::router::Router;
use crate::support::SERIAL;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// The router process's resident set size, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

/// A BER length.
fn ber_len(n: usize) -> Vec<u8> {
    if n < 0x80 {
        return vec![n as u8];
    }
    let b: Vec<u8> = n
        .to_be_bytes()
        .into_iter()
        .skip_while(|&x| x == 0)
        .collect();
    let mut out = vec![0x80 | b.len() as u8];
    out.extend(b);
    out
}

/// Forty clients each send all but 16 bytes of an add announced as 4 MiB,
/// in 64 KiB writes, and wait; then they all close. The router held about
/// 160 MiB for them; 5 s after they closed its RSS is within 20 MiB of its
/// RSS before.
#[tokio::test]
async fn after_a_flood_of_large_incomplete_requests_the_memory_is_given_back() {
    let _g = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let k = dir.path().join("router.dxg");
    // A DSA that is never asked: nothing of the flood reaches one.
    std::fs::write(
        &k,
        "set dsa \"D1\" =\n{\n prefix = <c AU><o DEMOCORP>\n address = tcp \"127.0.0.1\" port 9\n};\n",
    )
    .unwrap();
    let r = Router::start_with(
        &k,
        dir.path(),
        &["--no-access-log", "--probe-interval", "0"],
    );
    let addr = r.url.trim_start_matches("ldap://").to_string();
    std::thread::sleep(Duration::from_secs(1));
    let before = rss_mib(r.pid());
    let announced = 4 * 1024 * 1024 - 16;
    let mut head = vec![0x30];
    head.extend(ber_len(announced));
    head.extend([0x02, 0x01, 0x01, 0x68]);
    head.extend(ber_len(announced - 8));
    let chunk = vec![0u8; 64 * 1024];
    let mut clients = Vec::new();
    for _ in 0..40 {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(&head).unwrap();
        for _ in 0..63 {
            s.write_all(&chunk).unwrap();
        }
        clients.push(s);
    }
    std::thread::sleep(Duration::from_secs(1));
    let during = rss_mib(r.pid());
    drop(clients);
    std::thread::sleep(Duration::from_secs(5));
    let after = rss_mib(r.pid());
    println!(
        "RSS before {before:.1} MiB, during the flood {during:.1} MiB, 5 s after it {after:.1} MiB"
    );
    assert!(
        during > before + 100.0,
        "the flood did not take the memory it should ({before:.1} -> {during:.1} MiB)"
    );
    assert!(
        after < before + 20.0,
        "RSS 5 s after the flood {after:.1} MiB, before it {before:.1} MiB"
    );
}
