//! The object stores a lake's tables can live on, registered with delta-rs:
//! S3 (and S3-compatible endpoints) as `s3://` / `s3a://`, and Azure Blob
//! Storage / ADLS Gen2 as `az://`, `azure://`, `abfs://`, `abfss://` and
//! `adl://`.
//!
//! Each store is built by object_store's own builder from the environment —
//! `AWS_*` (keys, `AWS_ENDPOINT_URL`, `AWS_REGION`, web identity, container
//! and instance credentials) and `AZURE_STORAGE_*` / `AZURE_CLIENT_*`
//! (account key, SAS, an Entra ID service principal, managed identity) —
//! then the table's storage options, spelt as object_store and delta-rs
//! spell them (`aws_endpoint`, `allow_http`, `azure_storage_account_name`,
//! `use_emulator`, any case), so one set of settings serves sluice and the
//! user's Python readers. An option no store knows is an error naming it,
//! never ignored: a typo in a credential setting would otherwise fall back
//! to other credentials silently.
//!
//! sluice registers these itself rather than through deltalake's `s3` and
//! `azure` features: those bring the AWS SDK (about 90 crates, ~7 minutes
//! of a cold build here) for credentials object_store already resolves, and
//! a lock client sluice never uses — a log entry is created by a
//! conditional put ([`log_entry::put_if_absent`](crate::lake::io::log_entry)).

use std::collections::HashMap;
use std::sync::{Arc, Once};

use deltalake::logstore::{
    LogStore, LogStoreFactory, ObjectStoreFactory, ObjectStoreRef, StorageConfig, default_logstore,
    logstore_factories, object_store_factories,
};
use deltalake::{DeltaResult, DeltaTableError};
use object_store::ObjectStore;
use object_store::RetryConfig;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::path::Path;
use url::Url;

use super::log_cache::LogCached;
use super::requests::Counted;
use crate::error::{Error, Result};

/// URL schemes of S3.
const S3: [&str; 2] = ["s3", "s3a"];
/// URL schemes of Azure Blob Storage and ADLS Gen2.
const AZURE: [&str; 5] = ["az", "azure", "abfs", "abfss", "adl"];

/// Whether `scheme` (lowercase) names a store sluice keeps lakes in.
pub(crate) fn is_store_scheme(scheme: &str) -> bool {
    S3.contains(&scheme) || AZURE.contains(&scheme)
}

/// Make delta-rs open `s3://…` and Azure tables through sluice's stores.
/// Idempotent; every entry that opens a table by URL calls it first.
pub fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for scheme in S3.iter().chain(AZURE.iter()) {
            let url = Url::parse(&format!("{scheme}://")).expect("a scheme is a URL");
            object_store_factories().insert(url.clone(), Arc::new(Stores));
            logstore_factories().insert(url, Arc::new(Stores));
        }
    });
}

/// The store at `url`'s bucket or container (its root), and the path of
/// `url` in it; see [the module](self) for where its settings come from.
pub fn store_for(url: &Url, options: &HashMap<String, String>) -> Result<Arc<dyn ObjectStore>> {
    build(url, options, RetryConfig::default()).map_err(|source| Error::Store {
        what: format!("opening {}", without_secrets(url)),
        source,
    })
}

fn build(
    url: &Url,
    options: &HashMap<String, String>,
    retry: RetryConfig,
) -> object_store::Result<Arc<dyn ObjectStore>> {
    let scheme = url.scheme();
    let options = options.iter().map(|(k, v)| (k.to_ascii_lowercase(), v));
    if S3.contains(&scheme) {
        let mut builder = AmazonS3Builder::from_env().with_url(url.as_str()).with_retry(retry);
        for (key, value) in options {
            builder = builder.with_config(key.parse::<AmazonS3ConfigKey>()?, value);
        }
        Ok(seamed(url, Arc::new(builder.build()?)))
    } else if AZURE.contains(&scheme) {
        let mut builder =
            MicrosoftAzureBuilder::from_env().with_url(url.as_str()).with_retry(retry);
        for (key, value) in options {
            builder = builder.with_config(key.parse::<AzureConfigKey>()?, value);
        }
        Ok(seamed(url, Arc::new(builder.build()?)))
    } else {
        Err(object_store::Error::NotSupported {
            source: format!("sluice keeps no tables at {scheme}://").into(),
        })
    }
}

/// The store of `url`'s bucket or container as the lake uses it: its
/// requests counted ([`requests`](super::requests)), its log entries kept
/// once read ([`log_cache`](super::log_cache)).
fn seamed(url: &Url, store: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
    let counted = Arc::new(Counted::new(url, store));
    Arc::new(LogCached::new(super::requests::store_key(url), counted))
}

/// `url` as it may be shown: without a user, password or query (a SAS
/// token travels in the query).
pub(crate) fn without_secrets(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.to_string()
}

/// The factory delta-rs asks for a table's store and log store.
#[derive(Debug)]
struct Stores;

impl ObjectStoreFactory for Stores {
    fn parse_url_opts(
        &self,
        url: &Url,
        config: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, Path)> {
        // What delta-rs did not take for itself (its runtime and request
        // limits) is the store's.
        let store =
            build(url, &config.unknown_properties, RetryConfig::default()).map_err(|e| {
                DeltaTableError::Generic(format!("opening {}: {e}", without_secrets(url)))
            })?;
        let path = Path::from_url_path(url.path())
            .map_err(|e| DeltaTableError::Generic(format!("{}: {e}", without_secrets(url))))?;
        Ok((store, path))
    }
}

impl LogStoreFactory for Stores {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(prefixed_store, root_store, location, options))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn options_are_spelt_as_object_store_and_delta_rs_spell_them_in_any_case() {
        let s3 = Url::parse("s3://bucket/lake").unwrap();
        let given = options(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5555"),
            ("allow_http", "true"),
            ("aws_access_key_id", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("region", "eu-west-1"),
        ]);
        store_for(&s3, &given).unwrap();
        let azure = Url::parse("abfss://c@account.dfs.core.windows.net/lake").unwrap();
        let given = options(&[
            ("azure_storage_account_key", "a2V5"),
            ("AZURE_STORAGE_ACCOUNT_NAME", "account"),
        ]);
        store_for(&azure, &given).unwrap();
    }

    #[test]
    fn an_unknown_option_is_refused_naming_it() {
        let url = Url::parse("az://container/lake").unwrap();
        let err = store_for(&url, &options(&[("azure_storage_acount_key", "x")])).unwrap_err();
        assert!(err.to_string().contains("azure_storage_acount_key"), "{err}");
    }

    #[test]
    fn a_url_is_shown_without_its_credentials() {
        let url = Url::parse("s3://user:secret@bucket/lake?sig=token").unwrap();
        let shown = without_secrets(&url);
        assert!(!shown.contains("secret") && !shown.contains("token"), "{shown}");
        assert!(shown.contains("bucket/lake"), "{shown}");
    }
}
