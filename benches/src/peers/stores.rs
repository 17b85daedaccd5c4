//! The object store each race runs on: its server, how files get into it,
//! and object_store's client for it (the DataFusion engine's).

use std::path::Path;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion_prefetch_s3server::{ACCESS_KEY, REGION, S3Server, SECRET_KEY};
use datafusion_prefetch_wireservers::{AzureServer, GcsServer, HttpServer, azure, gcs, http};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use url::Url;

use super::BUCKET;
use crate::proxy::Wire;

/// The object store server (and wire) the engines race on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Store {
    /// S3: s3s-fs.
    #[default]
    S3,
    /// Google Cloud Storage: fake-gcs-server.
    Gcs,
    /// Azure Blob Storage: Azurite's blob service.
    Azure,
    /// Plain HTTP: rclone serving a folder over WebDAV.
    Http,
}

impl Store {
    /// The name `--store` takes.
    pub fn name(self) -> &'static str {
        match self {
            Store::S3 => "s3",
            Store::Gcs => "gcs",
            Store::Azure => "azure",
            Store::Http => "http",
        }
    }

    pub(super) fn parse(name: &str) -> Result<Self, String> {
        [Store::S3, Store::Gcs, Store::Azure, Store::Http]
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| format!("unknown store {name:?} (s3, gcs, azure or http)"))
    }

    /// The server that plays this store.
    pub(super) fn server_name(self) -> &'static str {
        match self {
            Store::S3 => "s3s-fs",
            Store::Gcs => "fake-gcs-server 1.54.0",
            Store::Azure => "Azurite 3.35.0",
            Store::Http => "rclone 1.75.2 serve webdav",
        }
    }

    /// The URL of `key` (a table's prefix) in the bucket, for DataFusion, and
    /// the URL its store is registered for; `endpoint` is the proxy's.
    pub(super) fn table_url(self, endpoint: &str, key: &str) -> (String, Url) {
        let base = match self {
            Store::S3 => format!("s3://{BUCKET}"),
            Store::Gcs => format!("gs://{BUCKET}"),
            Store::Azure => format!("az://{BUCKET}"),
            // object_store's HttpStore is built on the server's root; the
            // bucket is its first folder.
            Store::Http => endpoint.trim_end_matches('/').to_string(),
        };
        let url = Url::parse(&base).expect("a valid url");
        let table = match self {
            Store::Http => format!("{base}/{BUCKET}/{key}"),
            _ => format!("{base}/{key}"),
        };
        (table, url)
    }
}

/// Why `engine` cannot run on `store`'s wire, if it cannot: no client of its
/// own for that store, or one that cannot reach the local server. Reported
/// like an engine that is not installed.
pub fn impossible(engine: &str, store: Store) -> Option<&'static str> {
    match (engine, store) {
        ("pyarrow", Store::Http) => Some(
            "PyArrow has no HTTP filesystem (pyarrow.fs has S3, GCS, Azure, HDFS and local ones); \
             fsspec's HTTPFileSystem would race fsspec's aiohttp client, not PyArrow's",
        ),
        ("datafusion-python", Store::Http) => Some(
            "datafusion.object_store.Http(url) takes no client options, so object_store's \
             HTTP client keeps allow_http off and refuses the local server's plain http:// \
             (`HTTP error: builder error`); with this project's wheel it runs",
        ),
        _ => None,
    }
}

/// object_store's client for bucket [`BUCKET`] of `store` at `endpoint` (the
/// proxy's): for S3 signing as it would on S3 (the proxy drops the signature
/// before s3s-fs); for the others the wire-servers crate's client for the
/// emulator.
pub(super) fn client(store: Store, endpoint: &str) -> Result<Arc<dyn ObjectStore>> {
    Ok(match store {
        Store::S3 => Arc::new(builder(endpoint).build()?),
        Store::Gcs => Arc::new(gcs::builder(endpoint, BUCKET).build()?),
        Store::Azure => {
            Arc::new(azure::builder(&format!("{endpoint}/{}", azure::ACCOUNT), BUCKET).build()?)
        }
        Store::Http => Arc::new(http::builder(endpoint).build()?),
    })
}

/// The S3 store of `endpoint`, its attempts counted by an
/// [`AttemptCountingConnector`].
#[cfg(test)]
pub(super) fn counted_s3_client(
    endpoint: &str,
) -> Result<(
    Arc<dyn ObjectStore>,
    Arc<datafusion_prefetch::attempts::AttemptTotals>,
)> {
    use datafusion_prefetch::attempts::AttemptCountingConnector;
    let connector = AttemptCountingConnector::default();
    let totals = connector.totals();
    let store = builder(endpoint).with_http_connector(connector).build()?;
    Ok((Arc::new(store), totals))
}

fn builder(endpoint: &str) -> AmazonS3Builder {
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_bucket_name(BUCKET)
        .with_region(REGION)
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY)
}

/// The running server of a [`Store`].
pub(super) enum Server {
    S3(S3Server),
    Gcs(GcsServer),
    Azure(AzureServer),
    Http(HttpServer),
}

impl Server {
    /// Start `store`'s server over `root`, with bucket [`BUCKET`]. The S3
    /// server runs without credentials so that the proxy may change a request
    /// where s3s-fs would answer it unlike S3 (see proxy.rs); Azurite skips
    /// its API version check, which PyArrow's Azure SDK would fail.
    pub(super) fn start(store: Store, root: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(root).map_err(|e| format!("creating {}: {e}", root.display()))?;
        Ok(match store {
            Store::S3 => Server::S3(
                S3Server::start_anonymous_in(root, &[BUCKET]).map_err(|e| e.to_string())?,
            ),
            Store::Gcs => Server::Gcs(GcsServer::start_in(root, &[BUCKET])?),
            Store::Azure => Server::Azure(AzureServer::start_in_with_args(
                root,
                &[BUCKET],
                &["--skipApiVersionCheck"],
            )?),
            Store::Http => Server::Http(HttpServer::start_in(root, &[BUCKET])?),
        })
    }

    pub(super) fn addr(&self) -> std::net::SocketAddr {
        match self {
            Server::S3(s) => s.addr(),
            Server::Gcs(s) => s.addr(),
            Server::Azure(s) => s.addr(),
            Server::Http(s) => s.addr(),
        }
    }

    pub(super) fn binary(&self) -> &Path {
        match self {
            Server::S3(s) => s.binary(),
            Server::Gcs(s) => s.binary(),
            Server::Azure(s) => s.binary(),
            Server::Http(s) => s.binary(),
        }
    }

    /// What the proxy in front of this server must know of it.
    pub(super) fn wire(&self) -> Wire {
        match self {
            Server::S3(s) => Wire::S3 {
                s3s_fs_folder: Some(s.root().to_path_buf()),
            },
            Server::Gcs(_) => Wire::Gcs,
            Server::Azure(_) => Wire::Azure,
            Server::Http(_) => Wire::Http,
        }
    }

    /// Put the file at `path` into the bucket as `key`, unless an object of
    /// the same size is there already; whether it was put.
    pub(super) async fn upload(&self, path: &Path, key: &str) -> Result<bool> {
        let len = std::fs::metadata(path)?.len();
        let direct = match self {
            Server::S3(s) => builder(&s.endpoint())
                .with_skip_signature(true)
                .build()
                .map(|c| Arc::new(c) as Arc<dyn ObjectStore>)?,
            Server::Gcs(s) => Arc::new(s.builder(BUCKET).build()?),
            Server::Azure(s) => Arc::new(s.builder(BUCKET).build()?),
            Server::Http(s) => {
                // rclone serves its folder as it is: link the file in.
                let dest = s.root().join(BUCKET).join(key);
                if std::fs::metadata(&dest).is_ok_and(|m| m.len() == len) {
                    return Ok(false);
                }
                std::fs::create_dir_all(dest.parent().expect("a folder"))?;
                let _ = std::fs::remove_file(&dest);
                if std::fs::hard_link(path, &dest).is_err() {
                    std::fs::copy(path, &dest)?;
                }
                return Ok(true);
            }
        };
        let location = ObjectPath::from(key);
        if direct
            .head(&location)
            .await
            .is_ok_and(|meta| meta.size == len)
        {
            return Ok(false);
        }
        let bytes = std::fs::read(path)?;
        match self {
            // fake-gcs-server refuses object_store's uploads.
            Server::Gcs(s) => s
                .put_object(BUCKET, key, &bytes)
                .map_err(DataFusionError::Execution)?,
            _ => {
                direct.put(&location, bytes.into()).await?;
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_store_has_its_table_urls() {
        let endpoint = "http://127.0.0.1:9";
        let cases = [
            (Store::S3, "s3://peers/tpch/lineitem/", "s3://peers"),
            (Store::Gcs, "gs://peers/tpch/lineitem/", "gs://peers"),
            (Store::Azure, "az://peers/tpch/lineitem/", "az://peers"),
            (
                Store::Http,
                "http://127.0.0.1:9/peers/tpch/lineitem/",
                "http://127.0.0.1:9",
            ),
        ];
        for (store, table, registered) in cases {
            let (t, url) = store.table_url(endpoint, "tpch/lineitem/");
            assert_eq!(t, table);
            assert_eq!(url, Url::parse(registered).unwrap());
            assert_eq!(Store::parse(store.name()), Ok(store));
        }
    }

    #[test]
    fn only_pyarrow_and_stock_datafusion_python_over_http_are_impossible() {
        for store in [Store::S3, Store::Gcs, Store::Azure, Store::Http] {
            for engine in super::super::PYTHON_ENGINES {
                let expected =
                    ["pyarrow", "datafusion-python"].contains(&engine) && store == Store::Http;
                assert_eq!(
                    impossible(engine, store).is_some(),
                    expected,
                    "{engine} on {store:?}"
                );
            }
        }
    }
}
