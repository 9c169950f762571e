//! LDAP clients for the end-to-end tests: OpenLDAP's `ldapsearch` and
//! `ldapwhoami` with the arguments every test gives them, what they printed
//! for an assertion's message, the DNs and values of their LDIF, an `ldap3`
//! Who am I?; and the admin API's `/status` as JSON.
#![allow(clippy::unwrap_used, clippy::panic)]

use super::inproc::within;
use super::slapd::{ldap_tool, ToolOutput};
use ldap3::exop::{WhoAmI, WhoAmIResp};
use ldap3::Ldap;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A tool's exit code, output and errors, for an assertion's message.
pub fn show(what: &str, out: &ToolOutput) -> String {
    format!(
        "{what}: exit {:?}{}\nstdout:\n{}\nstderr:\n{}",
        out.code,
        if out.timed_out { " (timed out)" } else { "" },
        out.stdout,
        out.stderr
    )
}

/// `ldapsearch -x -LLL -o ldif-wrap=no` against `url` as `bind`
/// (anonymous if `None`), with `extra` arguments (e.g. `-e
/// !authzid=...`) before base, scope, filter and attributes.
pub fn search(
    url: &str,
    bind: Option<(&str, &str)>,
    extra: &[&str],
    base: &str,
    scope: &str,
    filter: &str,
    attrs: &[&str],
) -> ToolOutput {
    let mut args = vec!["-x", "-LLL", "-o", "ldif-wrap=no", "-H", url];
    if let Some((dn, pw)) = bind {
        args.extend(["-D", dn, "-w", pw]);
    }
    args.extend_from_slice(extra);
    args.extend(["-b", base, "-s", scope, filter]);
    args.extend_from_slice(attrs);
    ldap_tool("ldapsearch", &args, None)
}

/// The DNs in `ldapsearch` LDIF output, in order.
pub fn dns(out: &ToolOutput) -> Vec<String> {
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("dn: "))
        .map(|d| d.to_string())
        .collect()
}

/// Values of `attr` in `ldapsearch` LDIF output.
pub fn values(out: &ToolOutput, attr: &str) -> Vec<String> {
    let prefix = format!("{attr}: ");
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|d| d.to_string())
        .collect()
}

/// `ldapwhoami -x` at `url` as `dn` with `pw`.
pub fn whoami(url: &str, dn: &str, pw: &str) -> ToolOutput {
    whoami_with(url, dn, pw, &[])
}

/// `ldapwhoami -x` at `url` as `dn` with `pw` and `extra` arguments.
pub fn whoami_with(url: &str, dn: &str, pw: &str, extra: &[&str]) -> ToolOutput {
    let mut args = vec!["-x", "-H", url, "-D", dn, "-w", pw];
    args.extend_from_slice(extra);
    ldap_tool("ldapwhoami", &args, None)
}

/// Who am I? (RFC 4532) on an `ldap3` connection: the authzid (empty when
/// anonymous).
pub async fn authzid(l: &mut Ldap) -> String {
    let (exop, _) = within("whoami", l.extended(WhoAmI))
        .await
        .expect("whoami")
        .success()
        .expect("whoami ok");
    exop.parse::<WhoAmIResp>().authzid
}

/// The body of `GET path` on the admin API at `admin`.
pub fn get(admin: &str, path: &str) -> String {
    let mut s = TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {admin}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// The admin API's `/status` as JSON.
pub fn status(admin: &str) -> Value {
    serde_json::from_str(&get(admin, "/status")).unwrap()
}
