//! Google Cloud Storage: [fake-gcs-server](https://github.com/fsouza/fake-gcs-server)
//! 1.54.0 on loopback.
//!
//! object_store's `GoogleCloudStorage` talks GCS's XML API: `GET`/`HEAD
//! {base}/{bucket}/{object}` (object names percent-encoded), `GET
//! {base}/{bucket}?list-type=2&prefix=..[&delimiter=/]`, `DELETE`, and
//! `PUT {base}/{bucket}/{object}` to upload. fake-gcs-server answers the XML
//! API only for requests whose `Host` is its `-public-host`, so the server is
//! started with `-public-host 127.0.0.1:<port>` — which needs the port before
//! it starts: it cannot bind port 0 and tell which port it got (it logs `:0`).
//!
//! What it does and does not do, as observed (`probe.py`):
//!
//! - Ranged GET: `206` with `Content-Range: bytes 100-199/10240`, `Content-Length`,
//!   `ETag`, `Last-Modified` (seconds), `x-goog-generation`. A range running past
//!   the end is clipped (`bytes=10000-20000` → `206`, `bytes 10000-10239/10240`);
//!   one starting past the end is `416`. Suffix ranges work (`bytes=-100`).
//! - HEAD: `200` with `Content-Length`, `ETag`, `Last-Modified`.
//! - LIST (`list-type=2`, with or without `delimiter`): `200`, every object in
//!   one page (it ignores `max-keys` and sends no continuation token).
//! - DELETE: `200`.
//! - **Uploads through object_store fail**: a plain XML-API `PUT` is answered
//!   `400 invalid uploadType` (fake-gcs-server takes XML `PUT`s only as signed
//!   URLs). Upload with [`GcsServer::put_object`] (JSON API media upload).
//!   object_store's own CI uses a fork of fake-gcs-server for this reason.
//! - **No authentication**: any or no bearer token is accepted, so a
//!   wrong-credentials test has no GCS counterpart here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use object_store::ClientOptions;
use object_store::gcp::GoogleCloudStorageBuilder;

use crate::{
    Install, Root, Running, ServerProcess, free_port, http_request, percent_encode, port_after,
};

/// The fake-gcs-server release `install-gcs.sh` installs.
pub const FAKE_GCS_SERVER_VERSION: &str = "1.54.0";

const INSTALL: Install = Install {
    name: "fake-gcs-server 1.54.0",
    script: "install-gcs.sh",
    program: "gcs/1.54.0/bin/fake-gcs-server",
    folder: "gcs/1.54.0",
    env: "DFPREFETCH_FAKE_GCS_SERVER",
};

/// Attempts at a free port (another process may take it first).
const PORT_ATTEMPTS: usize = 3;

/// The fake-gcs-server binary, installing it (once per process) if needed.
pub fn server_binary() -> Result<PathBuf, String> {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALL.binary(&INSTALLED)
}

/// The line fake-gcs-server logs once it listens:
/// `level=INFO msg="server started at http://127.0.0.1:PORT"`.
fn announce(line: &str) -> Option<u16> {
    port_after(line, "server started at http://127.0.0.1:")
}

/// A running fake-gcs-server on `127.0.0.1`, killed when dropped.
///
/// Its root holds `storage/` (the filesystem backend: objects survive a
/// restart on a kept root) and `seed/<bucket>/`, the empty folders it creates
/// the buckets from at start.
#[derive(Debug)]
pub struct GcsServer {
    running: Running,
}

impl GcsServer {
    /// Start a server over a fresh temporary folder holding the (empty)
    /// `buckets`.
    pub fn start(buckets: &[&str]) -> Result<Self, String> {
        Self::start_with_root(Root::temporary()?, buckets)
    }

    /// Start a server over `root`, which keeps its objects after the server
    /// stops; `buckets` are created if missing.
    pub fn start_in(root: &Path, buckets: &[&str]) -> Result<Self, String> {
        Self::start_with_root(Root::Kept(root.to_path_buf()), buckets)
    }

    fn start_with_root(root: Root, buckets: &[&str]) -> Result<Self, String> {
        let storage = root.path().join("storage");
        let seed = root.path().join("seed");
        for dir in buckets
            .iter()
            .map(|b| seed.join(b))
            .chain([storage.clone()])
        {
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let binary = server_binary()?;
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let public = format!("127.0.0.1:{port}");
            let mut command = Command::new(&binary);
            command
                .args(["-scheme", "http", "-host", "127.0.0.1"])
                .args(["-port", &port.to_string()])
                // The XML API answers only requests whose Host is this.
                .args(["-public-host", &public])
                .args(["-external-url", &format!("http://{public}")])
                .args(["-backend", "filesystem"])
                .arg("-filesystem-root")
                .arg(&storage)
                // Each (empty) folder of the seed becomes an (empty) bucket.
                .arg("-data")
                .arg(&seed)
                // `info` logs the line that says it listens (and each request).
                .args(["-log-level", "info"]);
            let what = format!("fake-gcs-server ({})", binary.display());
            match ServerProcess::start(what, command, announce) {
                Ok((process, addr)) => {
                    return Ok(Self {
                        running: Running::new(process, addr, root, binary),
                    });
                }
                Err(e) if e.contains("address already in use") => last_error = e,
                Err(e) => return Err(e),
            }
        }
        Err(last_error)
    }

    /// `http://127.0.0.1:<port>`: the base URL of both the XML and the JSON API.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.running.addr())
    }

    /// A service-account key for object_store that turns OAuth off (no token
    /// is fetched or sent) and points it at this server: what object_store's
    /// own CI gives its client for fake-gcs-server.
    pub fn service_account_key(&self) -> String {
        service_account_key(&self.endpoint())
    }

    /// object_store's GCS client for `bucket` on this server: base URL, plain
    /// HTTP allowed, OAuth off. Add a retry policy etc. before `build()`.
    /// (An explicit key also keeps object_store from reading the machine's
    /// application default credentials.)
    pub fn builder(&self, bucket: &str) -> GoogleCloudStorageBuilder {
        builder(&self.endpoint(), bucket)
    }

    /// Create a bucket now (JSON API). `start`'s buckets need not be.
    pub fn create_bucket(&self, bucket: &str) -> Result<(), String> {
        let body = format!(r#"{{"name": "{bucket}"}}"#);
        let (status, response) = http_request(
            self.running.addr(),
            "POST",
            "/storage/v1/b",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )?;
        match status {
            200 | 409 => Ok(()),
            _ => Err(format!("creating bucket {bucket}: {response}")),
        }
    }

    /// Upload an object through the JSON API (`POST
    /// /upload/storage/v1/b/{bucket}/o?uploadType=media&name=..`), since
    /// fake-gcs-server refuses object_store's XML-API `PUT`.
    pub fn put_object(&self, bucket: &str, key: &str, bytes: &[u8]) -> Result<(), String> {
        let path = format!(
            "/upload/storage/v1/b/{}/o?uploadType=media&name={}",
            percent_encode(bucket),
            percent_encode(key)
        );
        let (status, response) = http_request(
            self.running.addr(),
            "POST",
            &path,
            &[("Content-Type", "application/octet-stream")],
            bytes,
        )?;
        if status == 200 {
            Ok(())
        } else {
            Err(format!("uploading gs://{bucket}/{key}: {response}"))
        }
    }
}

derefs_to_running!(GcsServer);

/// [`GcsServer::service_account_key`] for a fake-gcs-server reached at
/// `endpoint` (`http://host:port`), e.g. through a proxy in front of it.
pub fn service_account_key(endpoint: &str) -> String {
    format!(
        r#"{{"gcs_base_url": "{endpoint}", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}}"#
    )
}

/// [`GcsServer::builder`] for a fake-gcs-server reached at `endpoint`
/// (`http://host:port`), e.g. through a proxy in front of it. The XML API
/// answers only requests whose `Host` is the server's own address, so a proxy
/// must forward them with that `Host`.
pub fn builder(endpoint: &str, bucket: &str) -> GoogleCloudStorageBuilder {
    GoogleCloudStorageBuilder::new()
        .with_bucket_name(bucket)
        .with_service_account_key(service_account_key(endpoint))
        .with_base_url(endpoint)
        .with_client_options(ClientOptions::new().with_allow_http(true))
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;
    use std::time::Duration;

    use futures::TryStreamExt;
    use object_store::path::Path as ObjectPath;
    use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

    use super::*;

    #[tokio::test]
    async fn object_store_reads_heads_lists_and_deletes_but_cannot_upload() {
        let mut server = GcsServer::start(&["data"]).unwrap();
        assert!(server.addr().ip().is_loopback());
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_240).collect();
        server
            .put_object("data", "t/region=north/file_00.parquet", &bytes)
            .unwrap();
        let gcs = server.builder("data").build().unwrap();
        let path = ObjectPath::from("t/region=north/file_00.parquet");

        assert_eq!(
            gcs.get_range(&path, 100..200).await.unwrap(),
            &bytes[100..200]
        );
        // Past the end: clipped, as object_store expects of every store.
        assert_eq!(
            gcs.get_range(&path, 10_000..20_000).await.unwrap(),
            &bytes[10_000..]
        );
        assert_eq!(gcs.head(&path).await.unwrap().size, 10_240);
        let listed: Vec<_> = gcs
            .list(Some(&ObjectPath::from("t")))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].location, path);
        let upload = gcs
            .put(
                &ObjectPath::from("t/other"),
                PutPayload::from(vec![1u8, 2, 3]),
            )
            .await;
        assert!(
            upload.is_err(),
            "fake-gcs-server started taking XML uploads: {upload:?}"
        );
        gcs.delete(&path).await.unwrap();
        assert!(gcs.head(&path).await.is_err());

        let addr = server.addr();
        server.kill();
        assert!(!server.is_running());
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
    }
}
