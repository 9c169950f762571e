//! `dsa-bench`: an LDAP load generator for comparing paths (direct,
//! HAProxy, back-meta, dsa-router) with the same load.
//!
//! N connections each keep `depth` requests outstanding for a duration
//! after a warm-up. Requests are encoded once at start-up per user and op;
//! sending one rewrites only its message ID, so the generator stays cheap
//! beside the servers it measures on the same machine. An operation counts
//! as throughput only when its final response carries a success code
//! (compareTrue/compareFalse for compares); everything else is reported by
//! result code.
//!
//! A binary of its own (`cargo run --release -p dsa-bench -- ...`), not a
//! subcommand of the router: the router's binary is the router only. It
//! reads responses with the router's own framing ([`frame`]) and result
//! codes ([`result_code`]).
//!
//! TLS ([`tls`]): `ldaps://` URLs and `--starttls`, verified against
//! `--ca-file`; with `--churn` every connection makes a full handshake,
//! or resumes a session of an earlier one with `--tls-resume`.

mod tls;

use bytes::BytesMut;
use clap::Parser;
use dsa_router::proto::wire::frame::{self, tag};
use dsa_router::proto::wire::response::result_code;
use ldap3_proto::proto::{
    LdapBindCred, LdapBindRequest, LdapCompareRequest, LdapDerefAliases, LdapMsg, LdapOp,
    LdapSearchRequest, LdapSearchScope,
};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tls::{Conn, Connector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Load an LDAP server (or the router) and print throughput and latency.
#[derive(Parser, Debug, Clone)]
#[command(name = "dsa-bench", version)]
pub struct BenchArgs {
    /// Server to load, `ldap://HOST:PORT` or `ldaps://HOST:PORT`.
    #[arg(long)]
    pub url: String,
    /// StartTLS on each connection before anything else (`ldap://` URLs).
    #[arg(long)]
    pub starttls: bool,
    /// CA certificates (PEM) to verify the server's certificate against
    /// (required with TLS); the URL's host must be in the certificate.
    #[arg(long, value_name = "PATH")]
    pub ca_file: Option<PathBuf>,
    /// TLS session resumption: the connections of a run share one session
    /// cache, as in a client library's process, so a new connection
    /// resumes a session an earlier one got. Without it every connection
    /// makes a full handshake. Matters with --churn.
    #[arg(long)]
    pub tls_resume: bool,
    /// Client connections, each a task of its own sending requests in turn.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// Requests kept outstanding per connection.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Operation mix, `op=weight,...`; ops: eq, base, sub, compare, bind.
    #[arg(long, default_value = "eq=100")]
    pub mix: String,
    /// Search base for `eq` and `sub`.
    #[arg(long, default_value = "o=DEMOCORP,c=AU")]
    pub base: String,
    /// Container of the users `uid=userNNNN`.
    #[arg(long, default_value = "ou=people,o=DEMOCORP,c=AU")]
    pub people: String,
    /// Users user0000 .. user(N-1).
    #[arg(long, default_value_t = 2000)]
    pub users: usize,
    /// Password of every user (for `bind`).
    #[arg(long, default_value = "pw")]
    pub password: String,
    /// Filter of the `sub` search.
    #[arg(long, default_value = "(uid=user000*)")]
    pub sub_filter: String,
    /// Fixed offered load in operations per second over all connections
    /// (0: as fast as the servers answer). Each connection sends on its own
    /// schedule (tokio timers: about 1 ms resolution); latency runs from
    /// the actual send. Compare paths at the same rate.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Connection churn: each operation is a connection of its own (connect,
    /// bind as a random user with --password, one request from --mix,
    /// unbind, close), as web logins do; throughput and latency count the
    /// whole sequence.
    #[arg(long)]
    pub churn: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Eq,
    Base,
    Sub,
    Compare,
    Bind,
}

fn encode(op: LdapOp) -> Vec<u8> {
    let mut b = BytesMut::new();
    let tag: lber::structure::StructureTag = LdapMsg {
        msgid: 1,
        op,
        ctrl: Vec::new(),
    }
    .into();
    let _ = lber::write::encode_into(&mut b, tag);
    b.to_vec()
}

fn search(base: &str, scope: LdapSearchScope, filter: &str) -> Result<LdapOp, String> {
    Ok(LdapOp::SearchRequest(LdapSearchRequest {
        base: base.to_string(),
        scope,
        aliases: LdapDerefAliases::Never,
        sizelimit: 0,
        timelimit: 0,
        typesonly: false,
        filter: ldap3_proto::parse_ldap_filter_str(filter)
            .map_err(|e| format!("filter {filter}: {e:?}"))?,
        attrs: vec!["cn".into(), "mail".into()],
    }))
}

/// Pre-encoded requests: `[kind][user]`.
fn templates(a: &BenchArgs, kinds: &[Kind]) -> Result<HashMap<Kind, Vec<Vec<u8>>>, String> {
    let mut out = HashMap::new();
    for &k in kinds {
        let mut v = Vec::with_capacity(a.users);
        for n in 0..a.users.max(1) {
            let uid = format!("user{n:04}");
            let dn = format!("uid={uid},{}", a.people);
            let op = match k {
                Kind::Eq => search(&a.base, LdapSearchScope::Subtree, &format!("(uid={uid})"))?,
                Kind::Base => search(&dn, LdapSearchScope::Base, "(objectClass=*)")?,
                Kind::Sub => search(&a.base, LdapSearchScope::Subtree, &a.sub_filter)?,
                Kind::Compare => LdapOp::CompareRequest(LdapCompareRequest {
                    dn,
                    atype: "uid".into(),
                    val: uid.into_bytes(),
                }),
                Kind::Bind => LdapOp::BindRequest(LdapBindRequest {
                    version: 3,
                    dn,
                    cred: LdapBindCred::Simple(a.password.clone()),
                }),
            };
            v.push(encode(op));
            if k == Kind::Sub {
                break; // one request serves every pick
            }
        }
        out.insert(k, v);
    }
    Ok(out)
}

fn parse_mix(mix: &str) -> Result<Vec<(Kind, u32)>, String> {
    let mut out = Vec::new();
    for part in mix.split(',').filter(|p| !p.is_empty()) {
        let (name, w) = part.split_once('=').unwrap_or((part, "1"));
        let kind = match name.trim() {
            "eq" => Kind::Eq,
            "base" => Kind::Base,
            "sub" => Kind::Sub,
            "compare" => Kind::Compare,
            "bind" => Kind::Bind,
            other => {
                return Err(format!(
                    "unknown op {other} in --mix (eq, base, sub, compare, bind)"
                ))
            }
        };
        let w: u32 = w
            .trim()
            .parse()
            .map_err(|_| format!("bad weight in --mix: {part}"))?;
        if w > 0 {
            out.push((kind, w));
        }
    }
    if out.is_empty() {
        return Err("--mix selects no operation".into());
    }
    Ok(out)
}

/// xorshift64*: cheap, seedable, good enough to pick users.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[derive(Default)]
struct Tally {
    ok: u64,
    errors: BTreeMap<u8, u64>,
    lat_us: Vec<u32>,
    io_errors: u64,
    /// TLS handshakes made (measured operations' connections), and how
    /// many of them resumed a session.
    handshakes: u64,
    resumed: u64,
}

impl Tally {
    fn handshake(&mut self, c: &Conn) {
        if let Some(r) = c.resumed {
            self.handshakes += 1;
            self.resumed += u64::from(r);
        }
    }

    /// One measured operation of `kind`, sent at `at`, that ended with `code`.
    fn record(&mut self, kind: Kind, code: u8, at: Instant) {
        let good = match kind {
            Kind::Compare => code == 5 || code == 6,
            _ => code == 0,
        };
        if good {
            self.ok += 1;
            self.lat_us
                .push(at.elapsed().as_micros().min(u32::MAX as u128) as u32);
        } else {
            *self.errors.entry(code).or_insert(0) += 1;
        }
    }
}

struct Plan {
    mix: Vec<(Kind, u32)>,
    total: u32,
    templates: HashMap<Kind, Vec<Vec<u8>>>,
    measure_from: Instant,
    end: Instant,
    depth: usize,
    /// Time between sends on one connection, at a fixed rate.
    interval: Option<Duration>,
}

impl Plan {
    fn pick(&self, rng: &mut Rng) -> (Kind, &[u8]) {
        let mut r = (rng.next() % self.total as u64) as u32;
        let mut kind = self.mix[0].0;
        for &(k, w) in &self.mix {
            if r < w {
                kind = k;
                break;
            }
            r -= w;
        }
        let v = &self.templates[&kind];
        let i = (rng.next() % v.len() as u64) as usize;
        (kind, &v[i])
    }
}

async fn connection(conn: Arc<Connector>, plan: Arc<Plan>, seed: u64) -> Tally {
    let mut t = Tally::default();
    let c = match conn.connect().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            t.io_errors += 1;
            return t;
        }
    };
    t.handshake(&c);
    let mut s = c.io;
    let mut rng = Rng(seed | 1);
    let mut sent: HashMap<i32, (Instant, Kind)> = HashMap::with_capacity(plan.depth * 2);
    let mut next_id: i32 = 1;
    let mut out = BytesMut::with_capacity(4096);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    // At a fixed rate, connections start spread over one interval.
    let mut next_send = Instant::now()
        + plan.interval.map_or(Duration::ZERO, |iv| {
            iv.mul_f64((seed % 1000) as f64 / 1000.0)
        });
    loop {
        let now = Instant::now();
        if now < plan.end {
            while sent.len() < plan.depth && (plan.interval.is_none() || now >= next_send) {
                let (kind, pdu) = plan.pick(&mut rng);
                let Ok(h) = frame::header(pdu) else { break };
                frame::rewrite(pdu, &h, next_id, None, &mut out);
                if let Some(iv) = plan.interval {
                    next_send += iv;
                }
                sent.insert(next_id, (now, kind));
                next_id = if next_id == i32::MAX { 1 } else { next_id + 1 };
            }
            if !out.is_empty() {
                if s.write_all(&out).await.is_err() || s.flush().await.is_err() {
                    t.io_errors += 1;
                    return t;
                }
                out.clear();
            }
        } else if sent.is_empty() {
            return t;
        }
        // At a fixed rate, wake for the next scheduled send.
        let wait = match plan.interval {
            Some(_) if sent.len() < plan.depth && Instant::now() < plan.end => {
                next_send.saturating_duration_since(Instant::now())
            }
            _ => Duration::from_secs(10),
        };
        match tokio::time::timeout(wait, s.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            Err(_) if wait < Duration::from_secs(10) => continue,
            _ => {
                t.io_errors += 1;
                return t;
            }
        }
        while let Ok(Some(len)) = frame::frame_len(&buf, 64 << 20) {
            let pdu = buf.split_to(len);
            let Ok(h) = frame::header(&pdu) else { continue };
            if !tag::is_final_response(h.op_tag) {
                continue;
            }
            let Some((at, kind)) = sent.remove(&h.msgid) else {
                continue;
            };
            if at < plan.measure_from {
                continue;
            }
            t.record(kind, result_code(&pdu, &h).unwrap_or(80), at);
        }
    }
}

/// `--churn`: one connection per operation, until the end of the run.
async fn churn(conn: Arc<Connector>, plan: Arc<Plan>, seed: u64) -> Tally {
    let mut t = Tally::default();
    let mut rng = Rng(seed | 1);
    let mut out = BytesMut::with_capacity(512);
    let mut buf = BytesMut::with_capacity(4096);
    let binds = &plan.templates[&Kind::Bind];
    while Instant::now() < plan.end {
        let at = Instant::now();
        let user = (rng.next() % binds.len() as u64) as usize;
        let (kind, _) = plan.pick(&mut rng);
        let reqs = &plan.templates[&kind];
        let req = &reqs[user.min(reqs.len() - 1)];
        let mut resumed = None;
        let once = churn_once(&conn, &binds[user], req, &mut out, &mut buf, &mut resumed);
        let code = match once.await {
            Ok(code) => code,
            Err(()) => {
                t.io_errors += 1;
                continue;
            }
        };
        if at < plan.measure_from {
            continue;
        }
        if let Some(r) = resumed {
            t.handshakes += 1;
            t.resumed += u64::from(r);
        }
        t.record(kind, code, at);
    }
    t
}

/// Connect (TLS: a handshake, `resumed` says whether it resumed a
/// session), bind, send `req`, unbind, close: the bind's result when it
/// failed, else the request's.
async fn churn_once(
    conn: &Connector,
    bind: &[u8],
    req: &[u8],
    out: &mut BytesMut,
    buf: &mut BytesMut,
    resumed: &mut Option<bool>,
) -> Result<u8, ()> {
    let c = conn.connect().await.map_err(|_| ())?;
    *resumed = c.resumed;
    let mut s = c.io;
    buf.clear();
    for (id, pdu) in [(1, bind), (2, req)] {
        let h = frame::header(pdu).map_err(|_| ())?;
        out.clear();
        frame::rewrite(pdu, &h, id, None, out);
        s.write_all(out).await.map_err(|_| ())?;
        s.flush().await.map_err(|_| ())?;
        let code = loop {
            match frame::frame_len(buf, 64 << 20) {
                Ok(Some(len)) => {
                    let pdu = buf.split_to(len);
                    let Ok(h) = frame::header(&pdu) else {
                        return Err(());
                    };
                    if tag::is_final_response(h.op_tag) && h.msgid == id {
                        break result_code(&pdu, &h).unwrap_or(80);
                    }
                }
                Ok(None) => {
                    let read = tokio::time::timeout(Duration::from_secs(10), s.read_buf(buf));
                    match read.await {
                        Ok(Ok(n)) if n > 0 => {}
                        _ => return Err(()),
                    }
                }
                Err(_) => return Err(()),
            }
        };
        if id == 1 && code != 0 || id == 2 {
            // An unbind (message 3), then close.
            let _ = s
                .write_all(&[0x30, 0x05, 0x02, 0x01, 0x03, 0x42, 0x00])
                .await;
            // TLS: close_notify, as client libraries send.
            let _ = s.shutdown().await;
            return Ok(code);
        }
    }
    Err(())
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

// The same allocator as the router's binary, as when the load generator
// was `dsa-router bench`: its own CPU per operation stays comparable.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    run(&BenchArgs::parse())
}

fn run(a: &BenchArgs) -> ExitCode {
    match run_inner(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(a: &BenchArgs) -> Result<ExitCode, String> {
    let conn = Arc::new(Connector::new(
        &a.url,
        a.starttls,
        a.ca_file.as_deref(),
        a.tls_resume,
    )?);
    let mix = parse_mix(&a.mix)?;
    if mix.iter().any(|(k, _)| *k == Kind::Bind) && a.depth > 1 {
        return Err("bind in the mix needs --depth 1 (LDAP allows nothing else while a bind is outstanding)".into());
    }
    if a.churn && mix.iter().any(|(k, _)| *k == Kind::Bind) {
        return Err("--churn binds each connection itself: leave bind out of --mix".into());
    }
    let mut kinds: Vec<Kind> = mix.iter().map(|(k, _)| *k).collect();
    if a.churn {
        kinds.push(Kind::Bind);
    }
    let templates = templates(a, &kinds)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let warm = Duration::from_secs_f64(a.warmup.max(0.0));
    let dur = Duration::from_secs_f64(a.duration.max(0.1));
    let plan = Arc::new(Plan {
        total: mix.iter().map(|(_, w)| w).sum(),
        mix,
        templates,
        measure_from: start + warm,
        end: start + warm + dur,
        depth: a.depth.max(1),
        interval: (a.rate > 0.0)
            .then(|| Duration::from_secs_f64(a.connections.max(1) as f64 / a.rate)),
    });
    let tallies: Vec<Tally> = rt.block_on(async {
        let tasks: Vec<_> = (0..a.connections.max(1))
            .map(|i| {
                let seed = 0x9E37_79B9_7F4A_7C15 ^ ((i as u64 + 1) * 7919);
                if a.churn {
                    tokio::spawn(churn(conn.clone(), plan.clone(), seed))
                } else {
                    tokio::spawn(connection(conn.clone(), plan.clone(), seed))
                }
            })
            .collect();
        let mut v = Vec::new();
        for t in tasks {
            if let Ok(t) = t.await {
                v.push(t);
            }
        }
        v
    });
    let mut all = Tally::default();
    for t in tallies {
        all.ok += t.ok;
        all.io_errors += t.io_errors;
        all.handshakes += t.handshakes;
        all.resumed += t.resumed;
        all.lat_us.extend(t.lat_us);
        for (c, n) in t.errors {
            *all.errors.entry(c).or_insert(0) += n;
        }
    }
    all.lat_us.sort_unstable();
    let secs = dur.as_secs_f64();
    let ops = all.ok as f64 / secs;
    let p = |q| percentile(&all.lat_us, q);
    if a.json {
        let errors: serde_json::Map<String, serde_json::Value> = all
            .errors
            .iter()
            .map(|(c, n)| (c.to_string(), serde_json::json!(n)))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "ops_per_sec": ops,
                "ok": all.ok,
                "errors": errors,
                "io_errors": all.io_errors,
                "latency_ms": {"p50": p(0.5), "p90": p(0.9), "p99": p(0.99), "p999": p(0.999), "max": p(1.0)},
                "duration_s": secs,
                "connections": a.connections,
                "depth": a.depth,
                "mix": a.mix,
                "rate": a.rate,
                "churn": a.churn,
                "tls": {"mode": conn.mode().name(), "handshakes": all.handshakes, "resumed": all.resumed},
            })
        );
    } else {
        println!(
            "{} connections x depth {}, mix {}, {:.1} s measured after {:.1} s warm-up",
            a.connections,
            a.depth,
            a.mix,
            secs,
            warm.as_secs_f64()
        );
        println!(
            "ops/s {ops:.1}  ok {}  errors {:?}  io errors {}",
            all.ok, all.errors, all.io_errors
        );
        println!(
            "latency ms  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
            p(0.5),
            p(0.9),
            p(0.99),
            p(0.999),
            p(1.0)
        );
        if conn.mode() != tls::Mode::Plain {
            println!(
                "TLS {}: {} handshakes, {} resumed",
                conn.mode().name(),
                all.handshakes,
                all.resumed
            );
        }
    }
    Ok(if all.ok == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
