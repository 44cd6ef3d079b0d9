//! `lakehouse.toml`: where the lake, the landing zone and the schemas are,
//! and how ingestion runs. Relative paths are relative to the file.
//!
//! ```toml
//! lake = "lake"               # the same lake as artifacts: a folder, or s3://…, az://…, abfss://…
//! schemas = "schemas"         # one <table>.yaml per raw table
//!
//! # [storage]                 # options of a lake in a store, spelt as object_store
//! # aws_endpoint = "http://127.0.0.1:5555"   # and delta-rs spell them (on top of
//! # allow_http = "true"                     # the AWS_* / AZURE_* environment)
//!
//! [queue]
//! kind = "local"
//! landing = "landing"         # files arrive as landing/<table>/<file>; or a prefix
//!                             # in a store: "s3://bucket/landing" (spool = "spool")
//! visibility_timeout_secs = 300
//! max_attempts = 3            # failed attempts, then the file is dead-lettered
//! max_deliveries = 100        # deliveries without an outcome (its processes died), then too
//! settle_ms = 1000            # a file must be unchanged this long to be claimed
//! poll_ms = 500
//! retry_delay_ms = 1000       # a failed file waits attempt × this before its next delivery
//! after_ingest = "archive"    # archive | delete
//!
//! # or: messages on an Azure Storage Queue naming blobs of a container
//! # [queue]
//! # kind = "azure"
//! # [queue.azure]
//! # account = "myaccount"     # AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN, or Entra ID
//! # queue = "landing"         # dead letters go to "landing-poison"
//! # container = "landing"     # blobs arrive as <table>/<file>
//! # spool = "spool"           # blobs are streamed here before parsing
//! # use_emulator = false      # true: Azurite with its development account
//!
//! [ingest]
//! workers = 2
//! flush_rows = 500000
//! flush_bytes = 268435456
//! flush_interval_ms = 2000
//! dedup_content = true        # the same bytes under another name land once
//!
//! [hooks]                     # told of each dead-lettered file (table, file, attempts, reason)
//! on_dead_letter = { url = "https://hooks.example.org/ingest" }   # or a command, as a pipeline's
//!
//! [[transform]]               # aggregate/<name>: appends, incremental
//! name = "zone_days"
//! layer = "aggregate"
//! from = "raw/trips"          # the rows added upstream since the last run
//! sql = "SELECT CAST(pickup_at AS DATE) AS day, zone, count(*) AS trips FROM trips GROUP BY 1, 2"
//! partition_by = ["day"]
//!
//! [[transform]]               # curated/<name>: MERGE upsert by primary key
//! name = "daily"
//! layer = "curated"
//! from = "aggregate/zone_days"
//! sql = "SELECT day, zone, sum(trips) AS trips FROM zone_days GROUP BY 1, 2"
//! primary_key = ["day", "zone"]
//! on_match = { trips = "target.trips + source.trips" }   # default: the source's value
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::transform::Transform;
use crate::error::{Error, Result};
use crate::lake::io::location::{LakeRoot, local_root};

/// The parsed `lakehouse.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestConfig {
    /// The file it was read from.
    pub path: PathBuf,
    /// The lake: a folder, or a prefix in an object store.
    pub lake: LakeRoot,
    /// The schemas folder.
    pub schemas: PathBuf,
    /// The queue.
    pub queue: QueueConfig,
    /// Workers and flushing.
    pub ingest: IngestOptions,
    /// The medallion transforms, in the order they run.
    pub transforms: Vec<Transform>,
    /// What to tell when a file is dead-lettered.
    pub hooks: crate::tool::hooks::IngestHooks,
}

/// `[queue]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// `local` (a landing directory) or `azure` (an Azure Storage Queue).
    pub kind: String,
    /// The Azure queue and container, when `kind = "azure"`.
    pub azure: Option<AzureQueueConfig>,
    /// The landing zone: a directory, or a prefix in an object store
    /// (`s3://…`, `az://…`, `abfss://…`: see [`Self::landing_store`]).
    pub landing: PathBuf,
    /// The landing prefix, when `landing` names one in an object store
    /// (read with the `[storage]` options and the environment's
    /// credentials, as the lake is).
    #[serde(skip)]
    pub landing_store: Option<LakeRoot>,
    /// A local folder files of a landing prefix are streamed to before
    /// they are parsed.
    pub spool: PathBuf,
    /// A claimed file not acknowledged within this time is delivered again.
    pub visibility_timeout_secs: u64,
    /// Failed attempts before a file is dead-lettered.
    pub max_attempts: u32,
    /// Deliveries that ended without an ack or a nack — the process working
    /// on the file died — before the file is dead-lettered. Counted apart
    /// from failures, and high by default: a SIGKILL, an OOM kill of a busy
    /// process or a reboot counts against every file in flight (a run
    /// killed 50 times before it ever commits has delivered its first files
    /// 50 times), so a low limit would bury good files; a file that kills
    /// its process every time still does not loop forever.
    pub max_deliveries: u32,
    /// A file must keep its size and modification time this long before it
    /// is claimed (it may still be being written).
    pub settle_ms: u64,
    /// How often the landing zone is polled.
    pub poll_ms: u64,
    /// A failed file is delivered again after attempt × this delay.
    pub retry_delay_ms: u64,
    /// What happens to an ingested file: `archive` (kept under
    /// `.sluice/done/`) or `delete`.
    pub after_ingest: String,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            kind: "local".into(),
            azure: None,
            landing: PathBuf::from("landing"),
            landing_store: None,
            spool: PathBuf::from("spool"),
            visibility_timeout_secs: 300,
            max_attempts: 3,
            max_deliveries: 100,
            settle_ms: 1000,
            poll_ms: 500,
            retry_delay_ms: 1000,
            after_ingest: "archive".into(),
        }
    }
}

impl QueueConfig {
    /// The visibility timeout.
    pub fn visibility_timeout(&self) -> Duration {
        Duration::from_secs(self.visibility_timeout_secs)
    }
}

/// `[queue.azure]`: messages on an Azure Storage Queue, each naming a blob
/// `<table>/<file>` of a container (see [`super::queue::azure`]). The
/// account key comes from `AZURE_STORAGE_ACCOUNT_KEY`, a SAS token from
/// `AZURE_STORAGE_SAS_TOKEN`, else an Entra ID token (a service principal's
/// `AZURE_CLIENT_*` and `AZURE_TENANT_ID`, workload identity, or a managed
/// identity), never from this file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AzureQueueConfig {
    /// The storage account (Azurite's `devstoreaccount1` with the emulator).
    pub account: String,
    /// The queue the messages arrive on.
    pub queue: String,
    /// Where dead letters go; default `<queue>-poison`.
    pub dead_letter_queue: Option<String>,
    /// The container holding the blobs.
    pub container: String,
    /// A local folder blobs are streamed to before they are parsed.
    pub spool: PathBuf,
    /// Use Azurite (the development account and key, local endpoints).
    pub use_emulator: bool,
    /// The queue service URL (default from the account, or Azurite's).
    pub queue_endpoint: Option<String>,
    /// The blob service URL (default from the account, or Azurite's).
    pub blob_endpoint: Option<String>,
}

impl Default for AzureQueueConfig {
    fn default() -> Self {
        AzureQueueConfig {
            account: String::new(),
            queue: String::new(),
            dead_letter_queue: None,
            container: String::new(),
            spool: PathBuf::from("spool"),
            use_emulator: false,
            queue_endpoint: None,
            blob_endpoint: None,
        }
    }
}

/// `[ingest]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngestOptions {
    /// Parse workers.
    pub workers: usize,
    /// Flush a table once this many rows are buffered.
    pub flush_rows: usize,
    /// ... or this many bytes.
    pub flush_bytes: usize,
    /// ... or when the oldest buffered file waited this long.
    pub flush_interval_ms: u64,
    /// The same content under another name is ingested once.
    pub dedup_content: bool,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            workers: 2,
            flush_rows: 500_000,
            flush_bytes: 256 << 20,
            flush_interval_ms: 2000,
            dedup_content: true,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    lake: String,
    #[serde(default)]
    storage: std::collections::HashMap<String, String>,
    #[serde(default = "default_schemas")]
    schemas: PathBuf,
    #[serde(default)]
    queue: QueueConfig,
    #[serde(default)]
    ingest: IngestOptions,
    #[serde(default, rename = "transform")]
    transforms: Vec<Transform>,
    #[serde(default)]
    hooks: crate::tool::hooks::IngestHooks,
}

fn default_schemas() -> PathBuf {
    PathBuf::from("schemas")
}

impl IngestConfig {
    /// Read a config file.
    pub fn load(path: &Path) -> Result<IngestConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        IngestConfig::parse(&text, path)
    }

    /// Parse config text; relative paths are resolved against `path`'s folder.
    pub fn parse(text: &str, path: &Path) -> Result<IngestConfig> {
        let bad = |message: String| Error::Config { path: path.to_path_buf(), message };
        let file: ConfigFile = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        match (file.queue.kind.as_str(), &file.queue.azure) {
            ("local", None) => {}
            ("local", Some(_)) => {
                return Err(bad("[queue.azure] is set but queue kind is `local`".into()));
            }
            ("azure", Some(a)) => {
                if a.queue.is_empty() || a.container.is_empty() {
                    return Err(bad("[queue.azure] needs `queue` and `container`".into()));
                }
                if a.account.is_empty() && !a.use_emulator {
                    return Err(bad(
                        "[queue.azure] needs `account` (or use_emulator = true)".into()
                    ));
                }
            }
            ("azure", None) => {
                return Err(bad("queue kind `azure` needs a [queue.azure] table".into()));
            }
            (other, _) => {
                return Err(bad(format!("queue kind `{other}`: expected `local` or `azure`")));
            }
        }
        if !["archive", "delete"].contains(&file.queue.after_ingest.as_str()) {
            return Err(bad(format!(
                "after_ingest `{}`: expected `archive` or `delete`",
                file.queue.after_ingest
            )));
        }
        if file.ingest.workers == 0
            || file.queue.max_attempts == 0
            || file.queue.max_deliveries == 0
        {
            return Err(bad("workers, max_attempts and max_deliveries must be at least 1".into()));
        }
        super::transform::validate(&file.transforms).map_err(bad)?;
        if let Some(problem) = file.hooks.problem() {
            return Err(bad(problem));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &Path| if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
        // A store's options are the file's `[storage]`: an error in them is
        // said to be there.
        let named = |what: &str, text: &str| match file.storage.is_empty() {
            true => format!("{what} `{text}`"),
            false => format!("{what} `{text}` with the options of [storage]"),
        };
        let mut queue = file.queue.clone();
        let landing = queue.landing.to_string_lossy().into_owned();
        queue.landing_store = match LakeRoot::parse_with(&landing, file.storage.clone()) {
            Ok(store @ LakeRoot::Store(_)) if queue.kind == "local" => Some(store),
            Ok(LakeRoot::Store(_)) => {
                return Err(bad(format!(
                    "landing `{landing}` is a prefix in a store, but queue kind is `{}`",
                    queue.kind
                )));
            }
            Ok(LakeRoot::Local(_)) => None,
            Err(e) => return Err(bad(format!("{}: {e}", named("landing", &landing)))),
        };
        if queue.landing_store.is_none() {
            queue.landing = resolve(&queue.landing);
        }
        queue.spool = resolve(&queue.spool);
        if let Some(azure) = &mut queue.azure {
            azure.spool = resolve(&azure.spool);
        }
        Ok(IngestConfig {
            path: path.to_path_buf(),
            lake: match LakeRoot::parse_with(&file.lake, file.storage.clone()) {
                Ok(LakeRoot::Local(_))
                    if !file.storage.is_empty() && queue.landing_store.is_none() =>
                {
                    return Err(bad(format!(
                        "[storage] sets options of an object store, but lake `{}` is a folder and so is the landing zone",
                        file.lake
                    )));
                }
                // Absolute: its tables are opened by URL.
                Ok(LakeRoot::Local(_)) => {
                    let folder = resolve(
                        &local_root(&file.lake)
                            .map_err(|e| bad(format!("lake `{}`: {e}", file.lake)))?,
                    );
                    LakeRoot::Local(
                        std::path::absolute(&folder).map_err(|e| Error::io(&folder, e))?,
                    )
                }
                Ok(store @ LakeRoot::Store(_)) => store,
                Err(e) => return Err(bad(format!("{}: {e}", named("lake", &file.lake)))),
            },
            schemas: resolve(&file.schemas),
            queue,
            ingest: file.ingest,
            transforms: file.transforms,
            hooks: file.hooks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_to_the_file_and_defaults_apply() {
        let c = IngestConfig::parse("lake = \"lk\"\n", Path::new("/etc/x/lakehouse.toml")).unwrap();
        assert_eq!(c.lake, LakeRoot::Local(PathBuf::from("/etc/x/lk")));
        assert_eq!(c.schemas, PathBuf::from("/etc/x/schemas"));
        assert_eq!(c.queue.landing, PathBuf::from("/etc/x/landing"));
        assert_eq!(c.ingest.workers, 2);
        let url =
            IngestConfig::parse("lake = \"file:///data/lk\"\n", Path::new("/c.toml")).unwrap();
        assert_eq!(url.lake, LakeRoot::Local(PathBuf::from("/data/lk")));
        let store = IngestConfig::parse("lake = \"s3://b/lk\"\n", Path::new("/c.toml")).unwrap();
        assert_eq!(store.lake.to_string(), "s3://b/lk/");
        let refused = IngestConfig::parse("lake = \"gs://b/lk\"\n", Path::new("/c.toml"));
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("lake `gs://b/lk`: gs://"), "{message}");
    }

    #[test]
    fn a_relative_config_path_gives_an_absolute_lake_folder() {
        let c = IngestConfig::parse("lake = \"lk\"\n", Path::new("lakehouse.toml")).unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(c.lake, LakeRoot::Local(cwd.join("lk")));
    }

    #[test]
    fn storage_options_reach_a_store_lake_and_are_checked() {
        let text =
            "lake = \"s3://b/lk\"\n[storage]\naws_region = \"eu-west-1\"\nALLOW_HTTP = \"true\"\n";
        let c = IngestConfig::parse(text, Path::new("/c.toml")).unwrap();
        let store = c.lake.store_root().unwrap();
        assert_eq!(store.options().get("aws_region").map(String::as_str), Some("eu-west-1"));
        let typo = "lake = \"s3://b/lk\"\n[storage]\naws_regoin = \"eu-west-1\"\n";
        let message = IngestConfig::parse(typo, Path::new("/c.toml")).unwrap_err().to_string();
        assert!(message.contains("[storage]") && message.contains("aws_regoin"), "{message}");
        let folder = "lake = \"lk\"\n[storage]\naws_region = \"eu-west-1\"\n";
        let message = IngestConfig::parse(folder, Path::new("/c.toml")).unwrap_err().to_string();
        assert!(message.contains("is a folder"), "{message}");
    }

    #[test]
    fn a_landing_prefix_in_a_store_takes_the_storage_options() {
        let text = "lake = \"lk\"\n[storage]\naws_region = \"eu-west-1\"\n\
                    [queue]\nlanding = \"s3://b/landing\"\n";
        let c = IngestConfig::parse(text, Path::new("/etc/x/lakehouse.toml")).unwrap();
        let landing = c.queue.landing_store.expect("a landing prefix");
        assert_eq!(landing.to_string(), "s3://b/landing/");
        let store = landing.store_root().unwrap();
        assert_eq!(store.options().get("aws_region").map(String::as_str), Some("eu-west-1"));
        assert_eq!(c.queue.spool, PathBuf::from("/etc/x/spool"));
        assert_eq!(c.lake, LakeRoot::Local(PathBuf::from("/etc/x/lk")));
        let gcs = "lake = \"lk\"\n[queue]\nlanding = \"gs://b/landing\"\n";
        let message = IngestConfig::parse(gcs, Path::new("/c.toml")).unwrap_err().to_string();
        assert!(message.contains("landing `gs://b/landing`"), "{message}");
        let azure = "lake = \"lk\"\n[queue]\nkind = \"azure\"\nlanding = \"s3://b/l\"\n\
                     [queue.azure]\nqueue = \"q\"\ncontainer = \"c\"\nuse_emulator = true\n";
        let message = IngestConfig::parse(azure, Path::new("/c.toml")).unwrap_err().to_string();
        assert!(message.contains("queue kind is `azure`"), "{message}");
    }

    #[test]
    fn an_azure_queue_resolves_its_spool_next_to_the_file() {
        let text = "lake = \"lk\"\n[queue]\nkind = \"azure\"\n[queue.azure]\nqueue = \"landing\"\n\
                    container = \"drop\"\nuse_emulator = true\n";
        let c = IngestConfig::parse(text, Path::new("/etc/x/lakehouse.toml")).unwrap();
        let azure = c.queue.azure.unwrap();
        assert_eq!((azure.queue.as_str(), azure.container.as_str()), ("landing", "drop"));
        assert_eq!(azure.spool, PathBuf::from("/etc/x/spool"));
    }

    #[test]
    fn typos_and_bad_values_are_errors() {
        for text in [
            "lake = \"l\"\n[queue]\nlandng = \"x\"\n",
            "lake = \"l\"\n[queue]\nkind = \"kafka\"\n",
            "lake = \"l\"\n[ingest]\nworkers = 0\n",
            "lake = \"l\"\n[queue]\nkind = \"azure\"\n",
            "lake = \"l\"\n[queue]\nkind = \"azure\"\n[queue.azure]\nqueue = \"q\"\n",
            "lake = \"l\"\n[queue]\nkind = \"azure\"\n[queue.azure]\nqueue = \"q\"\ncontainer = \"c\"\n",
            "lake = \"l\"\n[queue.azure]\nqueue = \"q\"\ncontainer = \"c\"\nuse_emulator = true\n",
            "lake = \"l\"\n[[transform]]\nname = \"t\"\nlayer = \"gold\"\nfrom = \"x\"\nsql = \"SELECT 1\"\n",
        ] {
            assert!(IngestConfig::parse(text, Path::new("/c.toml")).is_err(), "{text}");
        }
    }
}
