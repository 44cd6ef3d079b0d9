//! The lake's config file, `sluice.toml` at the lake root.
//!
//! It is optional. It declares custom artifact types (see
//! [`crate::registry::declared`]) and tunes automatic maintenance
//! (`[maintenance]`); unknown keys are rejected so a typo is an error rather
//! than a silently ignored setting.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::lake::io::location::LakeRoot;
use crate::registry::declared::DeclaredTypeSpec;

mod declare;
pub use declare::{Declaration, declare_type};

/// File name of the lake config, at the lake root.
pub const CONFIG_FILE: &str = "sluice.toml";

/// The parsed `sluice.toml`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LakeConfig {
    /// Declared artifact types.
    #[serde(default, rename = "artifact_type")]
    pub artifact_types: Vec<DeclaredTypeSpec>,
    /// Automatic maintenance after each pipeline step.
    #[serde(default)]
    pub maintenance: MaintenanceConfig,
}

/// `[maintenance]` in `sluice.toml`: the light compaction run after each
/// pipeline step (see `sluice::maintenance::auto`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MaintenanceConfig {
    /// Run it at all (also off with `SLUICE_AUTO_MAINTENANCE=0`).
    pub auto: bool,
    /// Compact a step's partition of a table once it has more active files
    /// than this.
    pub small_files: usize,
    /// Stop starting new compactions after this many seconds.
    pub budget_seconds: f64,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig { auto: true, small_files: 64, budget_seconds: 10.0 }
    }
}

impl MaintenanceConfig {
    /// Whether automatic maintenance runs (config and environment).
    pub fn enabled(&self) -> bool {
        self.auto && std::env::var("SLUICE_AUTO_MAINTENANCE").map_or(true, |v| v != "0")
    }
}

impl LakeConfig {
    /// Read the config of a lake; a missing file is an empty config.
    pub async fn load(lake_root: &LakeRoot) -> Result<Self> {
        match read_text(lake_root).await? {
            Some(text) => Self::parse(&text, &lake_root.shown(CONFIG_FILE)),
            None => Ok(LakeConfig::default()),
        }
    }

    /// Parse config text; `path` is only used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        toml::from_str(text)
            .map_err(|e| Error::Config { path: PathBuf::from(path), message: e.to_string() })
    }
}

/// The text of the lake's `sluice.toml`; `None` when there is none.
async fn read_text(lake_root: &LakeRoot) -> Result<Option<String>> {
    let Some(bytes) = Box::pin(lake_root.read_file(CONFIG_FILE)).await? else {
        return Ok(None);
    };
    String::from_utf8(bytes.to_vec()).map(Some).map_err(|e| Error::Config {
        path: lake_root.shown(CONFIG_FILE),
        message: format!("not UTF-8: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_are_errors_with_the_path() {
        let err = LakeConfig::parse("[[artifact_typ]]\nkey='x'", Path::new("/l/sluice.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/l/sluice.toml") && err.contains("artifact_typ"), "{err}");
    }

    #[tokio::test]
    async fn missing_file_is_empty_config() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(LakeConfig::load(&dir.path().into()).await.unwrap(), LakeConfig::default());
    }
}
