//! What a reload asks of the settings file `serve --config` read: the
//! settings a running router changes (those knowledge's `set
//! dsa-router-*` lines may also set: thresholds, the concurrency limit,
//! hedged reads, outlier ejection), and the names of the settings changed
//! in the file that take effect only after a restart. The file's format
//! is the command line's business (`crate::app`).

use crate::backend::settings::Live;
use crate::base::error::Result;
use std::path::Path;

/// A settings file, read again on each reload.
pub trait SettingsFile: Send + Sync {
    /// The file (for `--watch`).
    fn path(&self) -> &Path;
    /// Read the file again; an error keeps everything as it was.
    fn reread(&self) -> Result<Reread>;
}

/// A settings file read again.
#[derive(Debug, Clone)]
pub struct Reread {
    /// The settings a reload changes, as the file and command line now
    /// give them.
    pub live: Live,
    /// Settings changed in the file that need a restart (`[table] key`).
    pub restart: Vec<String>,
}
