//! Knowledge files (CA Directory DXserver syntax) for the tests: one
//! builder instead of a `set dsa` format string per test.
//!
//! ```ignore
//! let k = Knowledge::new()
//!     .dsa(Dsa::new("D1", port).prefix("<c AU><o DEMOCORP>").flags("multi-write"))
//!     .line("set write-precedence = D1;")
//!     .write(dir);
//! ```
//!
//! A [`Dsa`] renders as
//!
//! ```text
//! set dsa "D1" =
//! {
//!     prefix = <c AU><o DEMOCORP>
//!     address = tcp "127.0.0.1" port 389
//!     dsa-flags = multi-write
//! };
//! ```
//!
//! with `prefix` and `address` first and the other attributes in the order
//! they were given (the order of a block's attributes means nothing to the
//! router).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The distinguished name of the router as its DSAs know it, under
/// `prefix`: `prefix<cn router>`.
pub fn router_dn(prefix: &str) -> String {
    format!("{prefix}<cn router>")
}

/// One `set dsa` block.
#[derive(Clone, Debug)]
pub struct Dsa {
    name: String,
    prefix: Option<String>,
    address: String,
    attrs: Vec<(String, String)>,
}

impl Dsa {
    /// DSA `name` at `127.0.0.1:port`.
    pub fn new(name: &str, port: u16) -> Dsa {
        Dsa::at_host(name, "127.0.0.1", port)
    }

    /// DSA `name` at `addr`.
    pub fn at(name: &str, addr: SocketAddr) -> Dsa {
        Dsa::at_host(name, &addr.ip().to_string(), addr.port())
    }

    /// DSA `name` at `host` (a name or an IP address), `port`.
    pub fn at_host(name: &str, host: &str, port: u16) -> Dsa {
        Dsa {
            name: name.to_string(),
            prefix: None,
            address: format!("tcp \"{host}\" port {port}"),
            attrs: Vec::new(),
        }
    }

    /// `address = value` as written (several addresses, other protocols),
    /// in place of the one given to [`Dsa::new`].
    pub fn address(mut self, value: &str) -> Dsa {
        self.address = value.to_string();
        self
    }

    /// `prefix = value` (`<c AU><o DEMOCORP>`, or a quoted LDAP DN).
    pub fn prefix(mut self, value: &str) -> Dsa {
        self.prefix = Some(value.to_string());
        self
    }

    /// Any attribute, `key = value`, the value as written.
    pub fn set(mut self, key: &str, value: &str) -> Dsa {
        self.attrs.push((key.to_string(), value.to_string()));
        self
    }

    /// `dsa-name = dn` and `dsa-password = "password"`.
    pub fn dsa_name(self, dn: &str, password: &str) -> Dsa {
        self.set("dsa-name", dn)
            .set("dsa-password", &quote(password))
    }

    /// `dsa-name = dn` without a password.
    pub fn dsa_name_only(self, dn: &str) -> Dsa {
        self.set("dsa-name", dn)
    }

    /// `ldap-dsa-name = dn` and `ldap-dsa-password = "password"`: the
    /// router's own bind to the DSA.
    pub fn ldap_dsa(self, dn: &str, password: &str) -> Dsa {
        self.set("ldap-dsa-name", dn)
            .set("ldap-dsa-password", &quote(password))
    }

    /// `ldap-dsa-name = PREFIX<cn router>` and `ldap-dsa-password =
    /// "password"`, under the prefix given before.
    pub fn router(self, password: &str) -> Dsa {
        let dn = router_dn(self.prefix.as_deref().expect("prefix before router"));
        self.ldap_dsa(&dn, password)
    }

    /// `dsa-flags = flags` (`multi-write`, `load-share, read-only`...).
    pub fn flags(self, flags: &str) -> Dsa {
        self.set("dsa-flags", flags)
    }

    /// `load-share-group = "group"`.
    pub fn load_share_group(self, group: &str) -> Dsa {
        self.set("load-share-group", &quote(group))
    }

    /// `trust-flags = trust-conveyed-originator`.
    pub fn trust_conveyed(self) -> Dsa {
        self.set("trust-flags", "trust-conveyed-originator")
    }

    /// `link-flags = flags`.
    pub fn link_flags(self, flags: &str) -> Dsa {
        self.set("link-flags", flags)
    }

    /// `auth-levels = levels`.
    pub fn auth_levels(self, levels: &str) -> Dsa {
        self.set("auth-levels", levels)
    }

    /// `native-prefix = value`.
    pub fn native_prefix(self, value: &str) -> Dsa {
        self.set("native-prefix", value)
    }
}

impl fmt::Display for Dsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "set dsa {} =\n{{", quote(&self.name))?;
        if let Some(p) = &self.prefix {
            writeln!(f, "    prefix = {p}")?;
        }
        writeln!(f, "    address = {}", self.address)?;
        for (k, v) in &self.attrs {
            writeln!(f, "    {k} = {v}")?;
        }
        writeln!(f, "}};")
    }
}

/// `"s"`, with `\` and `"` escaped.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A knowledge file: `set dsa` blocks and other lines, in order.
#[derive(Clone, Debug, Default)]
pub struct Knowledge {
    text: String,
}

impl Knowledge {
    pub fn new() -> Knowledge {
        Knowledge::default()
    }

    /// A `set dsa` block.
    pub fn dsa(mut self, dsa: Dsa) -> Knowledge {
        self.text += &dsa.to_string();
        self
    }

    /// Several `set dsa` blocks.
    pub fn dsas(self, dsas: impl IntoIterator<Item = Dsa>) -> Knowledge {
        dsas.into_iter().fold(self, Knowledge::dsa)
    }

    /// Any line as written (`set write-precedence = D1, D2;`, a comment);
    /// a newline is added.
    pub fn line(mut self, line: &str) -> Knowledge {
        self.text += line;
        self.text.push('\n');
        self
    }

    /// Text as written, no newline added.
    pub fn raw(mut self, text: &str) -> Knowledge {
        self.text += text;
        self
    }

    /// `source "file";`.
    pub fn source(self, file: &str) -> Knowledge {
        self.line(&format!("source {};", quote(file)))
    }

    /// `set precedence = names;`.
    pub fn precedence(self, names: &[&str]) -> Knowledge {
        self.line(&format!("set precedence = {};", names.join(", ")))
    }

    /// `set write-precedence = names;`.
    pub fn write_precedence(self, names: &[&str]) -> Knowledge {
        self.line(&format!("set write-precedence = {};", names.join(", ")))
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Written to `dir/router.dxg`; its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        self.write_to(&dir.join("router.dxg"))
    }

    /// Written to `path`; the path.
    pub fn write_to(&self, path: &Path) -> PathBuf {
        std::fs::write(path, &self.text).expect("write knowledge");
        path.to_path_buf()
    }
}

impl fmt::Display for Knowledge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
