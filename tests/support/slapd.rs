//! A real OpenLDAP `slapd` (Debian package `slapd`, `/usr/sbin/slapd`) for
//! integration tests, on an ephemeral loopback port.
//!
//! Everything lives in a private temp dir: a generated `slapd.conf` (run with
//! `-f`, so neither Debian's `/etc/ldap/slapd.d` nor its AppArmor profile nor
//! a system slapd are involved), one mdb database directory per suffix, the
//! pid and args files and `slapd.log` (slapd's stderr, run with `-d none` so
//! only errors are logged; set `DSA_SLAPD_DEBUG=stats` (any `-d` level) for
//! more, and `DSA_SLAPD_KEEP=1` to keep the dir after the test).
//!
//! Data is loaded with `slapadd -q` before slapd starts. Each database has:
//! * rootdn `cn=admin,<suffix>` / `secret` (unlimited, as any rootdn);
//! * `userPassword`: `self` write, `cn=writer` write, anonymous `auth`, else
//!   none;
//! * `ou=restricted,<suffix>` subtree: `cn=router` read, `cn=writer` write,
//!   everyone else none (not even visible: searches there give
//!   noSuchObject);
//! * everything else: `self` write, `cn=writer` write, `*` read.
//!
//! Proxied authorization (RFC 4370): global `authz-policy to`, and the seeded
//! `cn=router,<suffix>` entry has `authzTo: dn.regex:.*`, so the router can
//! assume any identity, including anonymous (`authzid=""`); nobody else can.
//!
//! The harness panics (with slapd's output) when something goes wrong: a
//! test that needs slapd should fail loudly, never skip silently.
#![allow(clippy::panic)] // test harness: panicking with a clear message is the contract

use super::knowledge::{Dsa, Knowledge};
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const SLAPD: &str = "/usr/sbin/slapd";
pub const SLAPADD: &str = "/usr/sbin/slapadd";
pub const LDAPSEARCH: &str = "/usr/bin/ldapsearch";
pub const SCHEMA_DIR: &str = "/etc/ldap/schema";
pub const MODULE_DIR: &str = "/usr/lib/ldap";

/// Passwords of the seeded identities (see [`seed_ldif`]).
pub const ADMIN_PW: &str = "secret";
pub const ROUTER_PW: &str = "routerpw";
pub const WRITER_PW: &str = "writerpw";
pub const ALICE_PW: &str = "alicepw";
pub const BOB_PW: &str = "bobpw";
/// Password of `uid=userNNNN` and `uid=bulkNNNNNN` entries.
pub const USER_PW: &str = "pw";
/// Number of `uid=userNNNN,ou=people` entries in [`seed_ldif`] (0000..=0099).
pub const SEED_USERS: usize = 100;

/// How long `start`/`restart` wait for slapd to answer.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// Default timeout of [`run_tool`].
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(30);

const INSTALL_HINT: &str =
    "OpenLDAP slapd/ldap-utils are not installed: run `sudo scripts/install-deps.sh` \
     (Debian packages slapd, ldap-utils)";

pub fn admin_dn(suffix: &str) -> String {
    format!("cn=admin,{suffix}")
}
pub fn router_dn(suffix: &str) -> String {
    format!("cn=router,{suffix}")
}
pub fn writer_dn(suffix: &str) -> String {
    format!("cn=writer,{suffix}")
}
/// `uid=<uid>,ou=people,<suffix>`.
pub fn user_dn(suffix: &str, uid: &str) -> String {
    format!("uid={uid},ou=people,{suffix}")
}
/// `cn=served-by,<suffix>`, whose `description` is the DSA's name.
pub fn served_by_dn(suffix: &str) -> String {
    format!("cn=served-by,{suffix}")
}

/// What to run: the suffixes (one mdb database each), the entries to load
/// (LDIF; each entry goes to the database of the longest suffix it is under,
/// suffix entries included) and a label used in messages and the temp dir.
#[derive(Clone, Debug, Default)]
pub struct SlapdConfig {
    pub suffixes: Vec<String>,
    pub ldif: String,
    pub name: String,
    /// More global `slapd.conf` lines (after `moduleload back_mdb`), e.g.
    /// `allow bind_anon_cred` or `moduleload ppolicy`.
    pub global: String,
    /// More lines for each database (after its access rules), e.g.
    /// `overlay ppolicy`; `{suffix}` is replaced by the database's suffix.
    pub database: String,
    /// SASL users (name, password) in a sasldb of this slapd's own (realm
    /// [`SASL_REALM`]); when any, slapd checks SASL binds against it.
    /// Debian's slapd reads its SASL configuration only from
    /// `/etc/ldap/sasl2`, so slapd then runs in a mount namespace of its
    /// own (`unshare -Urm`) where the temp dir's `sasl2/` is mounted there:
    /// nothing outside the test changes.
    pub sasldb: Vec<(String, String)>,
}

/// The realm of [`SlapdConfig::sasldb`] users.
pub const SASL_REALM: &str = "DSA-ROUTER-TEST";

impl SlapdConfig {
    pub fn new(name: &str, suffixes: &[&str], ldif: String) -> SlapdConfig {
        SlapdConfig {
            suffixes: suffixes.iter().map(|s| s.to_string()).collect(),
            ldif,
            name: name.to_string(),
            ..SlapdConfig::default()
        }
    }

    /// The suffixes with [`seed_ldif`] data for each, labelled `name`.
    pub fn seeded(name: &str, suffixes: &[&str]) -> SlapdConfig {
        let ldif = suffixes.iter().map(|s| seed_ldif(s, name)).collect();
        SlapdConfig::new(name, suffixes, ldif)
    }
}

/// How a slapd speaks TLS ([`Slapd::start_tls`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// LDAPS only: `-h ldaps://127.0.0.1:PORT/`.
    Ldaps,
    /// Plain LDAP port where every operation needs TLS (`security tls=1`):
    /// StartTLS first.
    StartTls,
}

/// TLS for a slapd: PEM files (the key readable by slapd) and the mode.
#[derive(Clone, Debug)]
pub struct SlapdTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA of `cert`: clients (readiness checks) verify against it.
    pub ca: PathBuf,
    pub mode: TlsMode,
}

/// A running slapd. Dropping it kills the process and removes its temp dir.
pub struct Slapd {
    pub port: u16,
    /// `ldap://127.0.0.1:<port>/`
    pub url: String,
    pub name: String,
    pub suffixes: Vec<String>,
    dir: PathBuf,
    child: Option<Child>,
    last_pid: u32,
    /// Unique value slapd shows in its root DSE, so readiness checks are
    /// sure to talk to this slapd and not to whatever else took the port.
    token: String,
    tls: Option<SlapdTls>,
    /// A second listener, `pldap://127.0.0.1:PORT/`, where every
    /// connection starts with a PROXY protocol header
    /// ([`Slapd::start_proxied`]); slapd then logs at `-d stats`.
    pub proxied_port: Option<u16>,
}

impl Slapd {
    /// Whether the slapd, slapadd and ldapsearch binaries are installed.
    pub fn available() -> bool {
        [SLAPD, SLAPADD, LDAPSEARCH]
            .iter()
            .all(|p| Path::new(p).exists())
    }

    /// Panics with an install hint unless [`Slapd::available`].
    pub fn require() {
        assert!(Slapd::available(), "{INSTALL_HINT}");
    }

    /// Writes the config, loads `cfg.ldif` with slapadd, starts slapd on a
    /// free loopback port and waits until it answers a root DSE search.
    pub fn start(cfg: SlapdConfig) -> Slapd {
        Slapd::start_with(cfg, None)
    }

    /// Like [`Slapd::start`], with TLS only: LDAPS, or StartTLS required
    /// before any operation (`url` is `ldaps://` or `ldap://` accordingly).
    pub fn start_tls(cfg: SlapdConfig, tls: SlapdTls) -> Slapd {
        Slapd::start_with(cfg, Some(tls))
    }

    /// Like [`Slapd::start`], and a PROXY protocol listener beside the
    /// plain one (`pldap://`, [`Slapd::proxied_port`]); slapd logs
    /// connections and operations (`-d stats`) to [`Slapd::log`].
    pub fn start_proxied(cfg: SlapdConfig) -> Slapd {
        Slapd::start_opts(cfg, None, true)
    }

    fn start_with(cfg: SlapdConfig, tls: Option<SlapdTls>) -> Slapd {
        Slapd::start_opts(cfg, tls, false)
    }

    fn start_opts(cfg: SlapdConfig, tls: Option<SlapdTls>, proxied: bool) -> Slapd {
        Slapd::require();
        assert!(!cfg.suffixes.is_empty(), "slapd {}: no suffixes", cfg.name);
        let dir = make_temp_dir(&cfg.name);
        let token = format!(
            "dsa-router-test-slapd {} {}",
            sanitize(&cfg.name),
            dir.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("unknown")
        );
        let mut slapd = Slapd {
            port: 0,
            url: String::new(),
            name: cfg.name.clone(),
            suffixes: cfg.suffixes.clone(),
            dir,
            child: None,
            last_pid: 0,
            token,
            tls,
            proxied_port: None,
        };
        slapd.write_config(&cfg);
        slapd.load(&cfg.ldif);
        // A port picked by binding :0 may be taken by someone else before
        // slapd binds it: pick another one then.
        for attempt in 1..=5 {
            slapd.port = pick_port();
            slapd.proxied_port = proxied.then(pick_port);
            let scheme = match &slapd.tls {
                Some(t) if t.mode == TlsMode::Ldaps => "ldaps",
                _ => "ldap",
            };
            slapd.url = format!("{scheme}://127.0.0.1:{}/", slapd.port);
            match slapd.spawn_and_wait() {
                Ok(()) => return slapd,
                Err(StartError::PortInUse) if attempt < 5 => continue,
                Err(e) => panic!("{}", slapd.failure(&format!("could not start: {e:?}"))),
            }
        }
        panic!("{}", slapd.failure("could not find a free port"))
    }

    pub fn pid(&self) -> u32 {
        self.last_pid
    }

    /// The temp dir (config, data, `slapd.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// slapd's output so far (all runs).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("slapd.log")).unwrap_or_default()
    }

    /// Whether the process is alive (true while SIGSTOPped too).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL, and reap. No-op when not running.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Graceful stop: SIGTERM (+ SIGCONT in case it is stopped), wait up to
    /// 10 s, then SIGKILL. No-op when not running.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if matches!(c.try_wait(), Ok(None)) {
                signal(c.id(), SIGTERM);
                signal(c.id(), SIGCONT);
                let deadline = Instant::now() + Duration::from_secs(10);
                while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(10));
                }
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }

    /// SIGSTOP: slapd keeps its socket (connects succeed, nothing answers).
    pub fn stop_signal(&self) {
        if let Some(c) = &self.child {
            signal(c.id(), SIGSTOP);
        }
    }

    /// SIGCONT after [`Slapd::stop_signal`].
    pub fn cont_signal(&self) {
        if let Some(c) = &self.child {
            signal(c.id(), SIGCONT);
        }
    }

    /// Stops slapd if it runs (gracefully) and starts it again on the same
    /// port with the same data; waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        // The port was ours a moment ago; if something else grabbed it in
        // between, keep trying for a few seconds before giving up.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(StartError::PortInUse) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("{}", self.failure(&format!("could not restart: {e:?}"))),
            }
        }
    }

    fn conf_path(&self) -> PathBuf {
        self.dir.join("slapd.conf")
    }

    /// `sasl2/slapd.conf` naming `sasl2/sasldb2`, which holds `users`,
    /// and offering only the mechanisms a password in it serves: on a
    /// machine with Kerberos's SASL module (libsasl2-modules-gssapi-mit,
    /// which e.g. 389-ds-base pulls in) slapd would also offer GSSAPI,
    /// and a client that picks from the root DSE would pick it and fail.
    fn write_sasldb(&self, users: &[(String, String)]) {
        let dir = self.dir.join("sasl2");
        fs::create_dir_all(&dir).expect("create the sasl2 dir");
        let db = dir.join("sasldb2");
        fs::write(
            dir.join("slapd.conf"),
            format!(
                "sasldb_path: {}\nmech_list: SCRAM-SHA-256 SCRAM-SHA-1 DIGEST-MD5 CRAM-MD5 PLAIN LOGIN\n",
                db.display()
            ),
        )
        .expect("write the SASL config");
        for (user, pw) in users {
            let out = run_tool(
                "saslpasswd2",
                &["-f", path_str(&db), "-c", "-p", "-u", SASL_REALM, user],
                Some(&format!("{pw}\n")),
                Duration::from_secs(20),
            );
            assert!(
                out.success(),
                "saslpasswd2 {user}: {out:?}; install sasl2-bin (scripts/install-deps.sh)"
            );
        }
    }

    fn write_config(&self, cfg: &SlapdConfig) {
        let d = self.dir.display();
        let mut c = String::new();
        let _ = writeln!(c, "# generated by tests/support/slapd.rs for {}", cfg.name);
        for s in ["core", "cosine", "inetorgperson", "nis"] {
            let _ = writeln!(c, "include {SCHEMA_DIR}/{s}.schema");
        }
        let _ = writeln!(c, "modulepath {MODULE_DIR}");
        let _ = writeln!(c, "moduleload back_mdb");
        if !cfg.sasldb.is_empty() {
            self.write_sasldb(&cfg.sasldb);
            let _ = writeln!(c, "sasl-auxprops sasldb\nsasl-realm {SASL_REALM}");
        }
        c.push_str(&cfg.global);
        if !cfg.global.ends_with('\n') && !cfg.global.is_empty() {
            c.push('\n');
        }
        let _ = writeln!(c, "pidfile {d}/slapd.pid");
        let _ = writeln!(c, "argsfile {d}/slapd.args");
        let _ = writeln!(c, "rootDSE {d}/rootdse.ldif");
        let _ = writeln!(c, "authz-policy to");
        let _ = writeln!(c, "sizelimit unlimited");
        let _ = writeln!(c, "timelimit unlimited");
        if let Some(t) = &self.tls {
            let _ = writeln!(c, "TLSCertificateFile {}", t.cert.display());
            let _ = writeln!(c, "TLSCertificateKeyFile {}", t.key.display());
            let _ = writeln!(c, "TLSCACertificateFile {}", t.ca.display());
            if t.mode == TlsMode::StartTls {
                let _ = writeln!(c, "security tls=1");
            }
        }
        // Address space only (the file grows as needed); room for the data.
        let maxsize = (64usize << 20)
            .max(cfg.ldif.len() * 16)
            .next_multiple_of(1 << 20);
        for (i, suffix) in cfg.suffixes.iter().enumerate() {
            let db = self.dir.join(format!("db{i}"));
            fs::create_dir_all(&db).unwrap_or_else(|e| panic!("create {}: {e}", db.display()));
            let q = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
            let s = q(suffix);
            let _ = write!(
                c,
                r#"
database mdb
suffix "{s}"
rootdn "cn=admin,{s}"
rootpw {ADMIN_PW}
directory {db}
maxsize {maxsize}
index objectClass eq
index uid,cn,sn,mail eq
access to attrs=userPassword
  by self write
  by dn.exact="cn=writer,{s}" write
  by anonymous auth
  by * none
access to dn.subtree="ou=restricted,{s}"
  by dn.exact="cn=router,{s}" read
  by dn.exact="cn=writer,{s}" write
  by * none
access to *
  by self write
  by dn.exact="cn=writer,{s}" write
  by * read
"#,
                db = db.display()
            );
            c.push_str(&cfg.database.replace("{suffix}", &s));
            c.push('\n');
        }
        write_file(&self.conf_path(), &c);
        write_file(
            &self.dir.join("rootdse.ldif"),
            &format!("dn:\ndescription: {}\n\n", self.token),
        );
    }

    /// slapadd each suffix's share of `ldif`.
    fn load(&self, ldif: &str) {
        let mut per_suffix: Vec<String> = vec![String::new(); self.suffixes.len()];
        let norm_suffixes: Vec<String> = self.suffixes.iter().map(|s| norm_dn(s)).collect();
        for record in ldif_records(ldif) {
            let Some(dn) = record_dn(&record) else {
                continue; // "version: 1" or comments only
            };
            let n = norm_dn(&dn);
            let best = norm_suffixes
                .iter()
                .enumerate()
                .filter(|(_, s)| n == **s || n.ends_with(&format!(",{s}")))
                .max_by_key(|(_, s)| s.len())
                .map(|(i, _)| i);
            let Some(i) = best else {
                panic!(
                    "slapd {}: LDIF entry {dn:?} is under none of the suffixes {:?}",
                    self.name, self.suffixes
                );
            };
            per_suffix[i].push_str(&record);
            per_suffix[i].push_str("\n\n");
        }
        for (i, data) in per_suffix.iter().enumerate() {
            if data.is_empty() {
                continue;
            }
            let file = self.dir.join(format!("db{i}.ldif"));
            write_file(&file, data);
            let conf = self.conf_path();
            let out = run_tool(
                SLAPADD,
                &[
                    "-q",
                    "-f",
                    path_str(&conf),
                    "-b",
                    &self.suffixes[i],
                    "-l",
                    path_str(&file),
                ],
                None,
                Duration::from_secs(600),
            );
            assert!(
                out.success(),
                "slapd {}: slapadd of {} entries for {:?} failed ({:?}):\n{}\n{}",
                self.name,
                data.matches("\n\n").count(),
                self.suffixes[i],
                out.code,
                out.stdout,
                out.stderr
            );
            let _ = fs::remove_file(&file);
        }
    }

    fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log_path = self.dir.join("slapd.log");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("open {}: {e}", log_path.display()));
        let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
        let log2 = log
            .try_clone()
            .unwrap_or_else(|e| panic!("dup {}: {e}", log_path.display()));
        let level = match self.proxied_port {
            Some(_) => "stats".to_string(),
            None => std::env::var("DSA_SLAPD_DEBUG").unwrap_or_else(|_| "none".to_string()),
        };
        let urls = match self.proxied_port {
            Some(p) => format!("{} pldap://127.0.0.1:{p}/", self.url),
            None => self.url.clone(),
        };
        let conf = self.conf_path();
        let sasl = self.dir.join("sasl2");
        let mut cmd = if sasl.exists() {
            // See SlapdConfig::sasldb. exec keeps the PID: signals reach slapd.
            let mut c = Command::new("unshare");
            c.args([
                "-Urm",
                "sh",
                "-c",
                "mount --bind \"$0\" /etc/ldap/sasl2 && exec \"$@\"",
                path_str(&sasl),
                SLAPD,
            ]);
            c
        } else {
            Command::new(SLAPD)
        };
        let mut child = cmd
            .args(["-d", &level, "-h", &urls, "-f", path_str(&conf)])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "slapd {}: cannot run {SLAPD}: {e}; {INSTALL_HINT}",
                    self.name
                )
            });
        self.last_pid = child.id();
        let deadline = Instant::now() + START_DEADLINE;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let new_log = fs::read(&log_path)
                    .map(|b| {
                        String::from_utf8_lossy(&b[(log_start as usize).min(b.len())..])
                            .into_owned()
                    })
                    .unwrap_or_default();
                return Err(if new_log.contains("Address already in use") {
                    StartError::PortInUse
                } else {
                    StartError::Exited(status.to_string())
                });
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                let mut args = vec![
                    "-x",
                    "-LLL",
                    "-o",
                    "nettimeout=2",
                    "-o",
                    "ldif-wrap=no",
                    "-H",
                    &self.url,
                    "-b",
                    "",
                    "-s",
                    "base",
                    "description",
                ];
                let mut env = Vec::new();
                if let Some(t) = &self.tls {
                    env.push(("LDAPTLS_CACERT", path_str(&t.ca).to_string()));
                    env.push(("LDAPTLS_REQCERT", "demand".to_string()));
                    if t.mode == TlsMode::StartTls {
                        args.push("-ZZ");
                    }
                }
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let out = run_tool_env(LDAPSEARCH, &args, None, Duration::from_secs(5), &env);
                if out.success() && out.stdout.contains(&self.token) {
                    self.child = Some(child);
                    return Ok(());
                }
                if out.success() {
                    // Someone else answers on our port.
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(StartError::PortInUse);
                }
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(StartError::Timeout);
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn failure(&self, what: &str) -> String {
        let log = self.log();
        let tail: String = {
            let start = log.len().saturating_sub(4000);
            let start = (start..log.len())
                .find(|&i| log.is_char_boundary(i))
                .unwrap_or(0);
            log[start..].to_string()
        };
        format!(
            "slapd {} ({}) {what}; dir {}; slapd output:\n{tail}",
            self.name,
            self.url,
            self.dir.display()
        )
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        self.kill9();
        if std::env::var_os("DSA_SLAPD_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("slapd {}: kept {}", self.name, self.dir.display());
        }
    }
}

#[derive(Debug)]
enum StartError {
    PortInUse,
    Exited(String),
    Timeout,
}

// ---------------------------------------------------------------- signals

const SIGTERM: i32 = 15;
const SIGCONT: i32 = 18;
const SIGSTOP: i32 = 19;

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

fn signal(pid: u32, sig: i32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is a child
    // we have not reaped yet, so it cannot name another process.
    unsafe {
        kill(pid, sig);
    }
}

// ---------------------------------------------------------------- ports, dirs

/// A free loopback port: bind :0, note it, release it. Ports handed out in
/// this process are not handed out again.
pub fn pick_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().expect("local_addr").port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
    panic!("no free loopback port found")
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn make_temp_dir(name: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    for _ in 0..100 {
        let dir = std::env::temp_dir().join(format!(
            "dsa-router-slapd-{}-{}-{}-{nanos}",
            sanitize(name),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        if fs::create_dir(&dir).is_ok() {
            return dir;
        }
    }
    panic!(
        "cannot create a temp dir under {}",
        std::env::temp_dir().display()
    )
}

fn write_file(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

// ---------------------------------------------------------------- tools

/// Result of [`run_tool`].
#[derive(Debug)]
pub struct ToolOutput {
    /// Exit code; `None` when killed (e.g. on timeout).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl ToolOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `program args` (e.g. `ldapsearch`), feeding `stdin`, killing it
/// after `timeout`. `LDAPNOINIT=1` so /etc/ldap/ldap.conf and ~/.ldaprc do
/// not interfere. Panics only if the program cannot be started.
pub fn run_tool(
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
    timeout: Duration,
) -> ToolOutput {
    run_tool_env(program, args, stdin, timeout, &[])
}

/// [`run_tool`] with environment variables (e.g. `LDAPTLS_CACERT`). With
/// any, `LDAPNOINIT` (which would ignore them) is replaced by
/// `LDAPCONF=/dev/null` and an `LDAPRC` naming no file.
pub fn run_tool_env(
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
    timeout: Duration,
    env: &[(&str, &str)],
) -> ToolOutput {
    let mut cmd = Command::new(program);
    if env.is_empty() {
        cmd.env("LDAPNOINIT", "1");
    } else {
        cmd.env("LDAPCONF", "/dev/null")
            .env("LDAPRC", "dsa-router-test-no-ldaprc")
            .envs(env.iter().copied());
    }
    let mut child = cmd
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}; {INSTALL_HINT}"));
    let feeder = match (stdin, child.stdin.take()) {
        (Some(text), Some(mut pipe)) => {
            let text = text.to_string();
            Some(thread::spawn(move || {
                let _ = pipe.write_all(text.as_bytes());
            }))
        }
        _ => None,
    };
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
            _ => {
                timed_out = true;
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    if let Some(f) = feeder {
        let _ = f.join();
    }
    ToolOutput {
        code: status.and_then(|s| s.code()),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        timed_out,
    }
}

/// [`run_tool`] with [`TOOL_TIMEOUT`].
pub fn ldap_tool(program: &str, args: &[&str], stdin: Option<&str>) -> ToolOutput {
    run_tool(program, args, stdin, TOOL_TIMEOUT)
}

// ---------------------------------------------------------------- LDIF

/// Standard test data for `suffix`, labelled with the DSA's name:
/// * the suffix entry (object class from its first RDN: `o`, `ou`, `dc`,
///   `c`, `l`, `cn`; others get `organizationalUnit` + `extensibleObject`);
///   its parent (e.g. `c=AU` for `o=DEMOCORP,c=AU`) is not needed;
/// * `cn=admin` (`secret`, also the rootdn), `cn=router` (`routerpw`,
///   `authzTo: dn.regex:.*`), `cn=writer` (`writerpw`);
/// * `cn=served-by` with `description: <dsa_name>`;
/// * `ou=people`: `uid=alice` (`alicepw`), `uid=bob` (`bobpw`),
///   `uid=user0000`..`uid=user0099` (`pw`), all inetOrgPerson with `cn`,
///   `sn`, `mail`;
/// * `ou=restricted` with `cn=secret` (readable by router and writer only).
pub fn seed_ldif(suffix: &str, dsa_name: &str) -> String {
    let s = suffix;
    let mut l = suffix_entry(s);
    for (cn, pw, extra) in [
        (
            "admin",
            ADMIN_PW,
            "description: directory administrator (rootdn)\n",
        ),
        (
            "router",
            ROUTER_PW,
            "description: router identity (may proxy anyone)\nauthzTo: dn.regex:.*\n",
        ),
        ("writer", WRITER_PW, "description: may write everything\n"),
    ] {
        let _ = write!(
            l,
            "dn: cn={cn},{s}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n\
             cn: {cn}\nuserPassword: {pw}\n{extra}\n"
        );
    }
    l.push_str(&ldif_entry(
        &served_by_dn(s),
        &[
            ("objectClass", "organizationalRole"),
            ("cn", "served-by"),
            ("description", dsa_name),
        ],
    ));
    let _ = write!(
        l,
        "dn: ou=people,{s}\nobjectClass: organizationalUnit\nou: people\n\n"
    );
    l.push_str(&person(
        s,
        "people",
        "alice",
        "Alice Example",
        "Example",
        ALICE_PW,
    ));
    l.push_str(&person(
        s,
        "people",
        "bob",
        "Bob Example",
        "Example",
        BOB_PW,
    ));
    for i in 0..SEED_USERS {
        let uid = format!("user{i:04}");
        l.push_str(&person(
            s,
            "people",
            &uid,
            &format!("User {i:04}"),
            &format!("User{i:04}"),
            USER_PW,
        ));
    }
    let _ = write!(
        l,
        "dn: ou=restricted,{s}\nobjectClass: organizationalUnit\nou: restricted\n\n\
         dn: cn=secret,ou=restricted,{s}\nobjectClass: organizationalRole\ncn: secret\n\
         description: top secret\n\n"
    );
    l
}

/// `ou=bulk,<suffix>` and `n` inetOrgPerson entries
/// `uid=bulkNNNNNN,ou=bulk,<suffix>` (password `pw`) under it. 100 000
/// entries load in about 2-3 s.
pub fn bulk_ldif(suffix: &str, n: usize) -> String {
    let mut l = String::with_capacity(64 + n * (180 + 2 * suffix.len()));
    let _ = write!(
        l,
        "dn: ou=bulk,{suffix}\nobjectClass: organizationalUnit\nou: bulk\n\n"
    );
    for i in 0..n {
        l.push_str(&person(
            suffix,
            "bulk",
            &format!("bulk{i:06}"),
            &format!("Bulk {i:06}"),
            &format!("Bulk{i:06}"),
            USER_PW,
        ));
    }
    l
}

fn person(suffix: &str, ou: &str, uid: &str, cn: &str, sn: &str, pw: &str) -> String {
    format!(
        "dn: uid={uid},ou={ou},{suffix}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {cn}\nsn: {sn}\n\
         mail: {uid}@example.com\nuserPassword: {pw}\n\n"
    )
}

fn suffix_entry(suffix: &str) -> String {
    let rdn = split_first_rdn(suffix);
    let (attr, value) = rdn.split_once('=').unwrap_or(("ou", rdn));
    let (attr, value) = (attr.trim(), unescape_rdn_value(value.trim()));
    let a = attr.to_ascii_lowercase();
    let mut attrs: Vec<(&str, &str)> = Vec::new();
    match a.as_str() {
        "o" => attrs.extend([("objectClass", "organization"), ("o", value.as_str())]),
        "ou" => attrs.extend([
            ("objectClass", "organizationalUnit"),
            ("ou", value.as_str()),
        ]),
        "dc" => attrs.extend([
            ("objectClass", "dcObject"),
            ("objectClass", "organization"),
            ("dc", value.as_str()),
            ("o", value.as_str()),
        ]),
        "c" => attrs.extend([("objectClass", "country"), ("c", value.as_str())]),
        "l" => attrs.extend([("objectClass", "locality"), ("l", value.as_str())]),
        "cn" => attrs.extend([
            ("objectClass", "organizationalRole"),
            ("cn", value.as_str()),
        ]),
        _ => attrs.extend([
            ("objectClass", "organizationalUnit"),
            ("objectClass", "extensibleObject"),
            ("ou", value.as_str()),
            (attr, value.as_str()),
        ]),
    }
    ldif_entry(suffix, &attrs)
}

/// The first RDN of a DN string (up to the first unescaped ',').
fn split_first_rdn(dn: &str) -> &str {
    let mut escaped = false;
    for (i, ch) in dn.char_indices() {
        match ch {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => return &dn[..i],
            _ => {}
        }
    }
    dn
}

fn unescape_rdn_value(v: &str) -> String {
    let mut out = String::new();
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One LDIF entry; values that are not LDIF-safe are base64-encoded.
pub fn ldif_entry(dn: &str, attrs: &[(&str, &str)]) -> String {
    let mut s = ldif_line("dn", dn);
    for (a, v) in attrs {
        s.push_str(&ldif_line(a, v));
    }
    s.push('\n');
    s
}

fn ldif_line(attr: &str, value: &str) -> String {
    let safe = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with([' ', ':', '<'])
        && !value.ends_with(' ');
    if safe {
        format!("{attr}: {value}\n")
    } else {
        format!("{attr}:: {}\n", base64_encode(value.as_bytes()))
    }
}

/// Splits LDIF text into records (blank-line separated), dropping comments.
fn ldif_records(ldif: &str) -> Vec<String> {
    let mut records = Vec::new();
    let mut cur = String::new();
    for line in ldif.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            if !cur.is_empty() {
                records.push(std::mem::take(&mut cur));
            }
        } else if line.starts_with('#') {
            continue;
        } else {
            if !cur.is_empty() {
                cur.push('\n');
            }
            cur.push_str(line);
        }
    }
    if !cur.is_empty() {
        records.push(cur);
    }
    records
}

/// The DN of an LDIF record (folded lines and `dn::` base64 handled).
fn record_dn(record: &str) -> Option<String> {
    let unfolded = record.replace("\n ", "");
    let first = unfolded.lines().next()?;
    let lower = first.to_ascii_lowercase();
    if lower.starts_with("dn::") {
        let b = base64_decode(first[4..].trim())?;
        Some(String::from_utf8_lossy(&b).into_owned())
    } else if lower.starts_with("dn:") {
        Some(first[3..].trim().to_string())
    } else {
        None
    }
}

/// Naive DN normalization for suffix matching: lower case, no blanks around
/// `,` `=` `+`.
fn norm_dn(dn: &str) -> String {
    let mut out = String::new();
    for part in dn.split(',') {
        if !out.is_empty() {
            out.push(',');
        }
        let p: Vec<String> = part.split('=').map(|x| x.trim().to_lowercase()).collect();
        out.push_str(&p.join("="));
    }
    out
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Knowledge with one DSA `D1` for `o=DEMOCORP,c=AU` on `port`, trusting
/// the router's conveyed originators, the router's identity `cn=router`
/// with `router_pw`: written to `dir/router.dxg`.
pub fn one_dsa_knowledge(dir: &Path, port: u16, router_pw: &str) -> PathBuf {
    Knowledge::new()
        .dsa(
            Dsa::new("D1", port)
                .prefix("<c AU><o DEMOCORP>")
                .router(router_pw)
                .flags("multi-write")
                .trust_conveyed(),
        )
        .write(dir)
}
