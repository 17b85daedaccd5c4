//! The real servers the wire tests run against, on loopback, each with
//! object_store's own client for it: S3 (s3s-fs), GCS (fake-gcs-server),
//! Azure Blob (Azurite) and HTTP (rclone's WebDAV server).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion_prefetch_s3server::{ACCESS_KEY, REGION, S3Server, SECRET_KEY};
use datafusion_prefetch_wireservers::{AzureServer, GcsServer, HttpServer};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};
use url::Url;

/// The bucket, container or folder the table lives in.
pub const BUCKET: &str = "data";

/// A stopped server must fail a query in well under a second, not after
/// object_store's default of 10 retries over 3 minutes.
fn fast_retries() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            base: 2.0,
        },
        max_retries: 1,
        retry_timeout: Duration::from_secs(2),
    }
}

/// A real server on loopback holding [`BUCKET`], and object_store's client
/// for it.
pub trait Server: Sized + Send + Sync + 'static {
    /// Shown in messages.
    const NAME: &'static str;
    /// Part of the error a query gets when a GET answers that the object is
    /// gone.
    const NOT_FOUND: &'static str;
    /// Parts of the error when the server refuses the client's credentials
    /// (empty: the server checks none).
    const REFUSED: &'static [&'static str];
    /// Part of the error when the server is gone.
    const GONE: &'static str;

    fn start() -> Self;

    /// object_store's client; with `refused`, credentials the server
    /// refuses (only called when [`Self::REFUSED`] is not empty).
    fn client(&self, refused: bool) -> Arc<dyn ObjectStore>;

    /// The URL the store is registered under (`s3://data`, …).
    fn store_url(&self) -> Url;

    /// Where `relative` (e.g. `t/x.parquet`) lies in the client's paths.
    fn path(&self, relative: &str) -> Path {
        Path::from(relative)
    }

    /// The URL of the folder `relative` (e.g. `t/`) for DataFusion.
    fn url(&self, relative: &str) -> String {
        format!(
            "{}/{relative}",
            self.store_url().as_str().trim_end_matches('/')
        )
    }

    /// Upload an object (through the client, unless the server refuses it).
    fn put(&self, path: &Path, bytes: Bytes) -> impl std::future::Future<Output = ()> + Send {
        let client = self.client(false);
        let path = path.clone();
        async move {
            client.put(&path, bytes.into()).await.unwrap();
        }
    }

    /// Whether an error names a file: by its name, or as the client writes
    /// it in a URL.
    fn names_a_file(err: &str) -> bool {
        err.contains(".parquet")
    }

    /// Kill the server at once.
    fn kill(&mut self);
}

pub struct S3 {
    server: S3Server,
}

impl Server for S3 {
    const NAME: &'static str = "S3 (s3s-fs)";
    const NOT_FOUND: &'static str = "not found";
    const REFUSED: &'static [&'static str] = &["403 Forbidden", "SignatureDoesNotMatch"];
    const GONE: &'static str = "error sending request";

    fn start() -> Self {
        let server = S3Server::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
        Self { server }
    }

    fn client(&self, refused: bool) -> Arc<dyn ObjectStore> {
        let secret = if refused { "wrong-secret" } else { SECRET_KEY };
        Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(self.server.endpoint())
                .with_allow_http(true)
                .with_virtual_hosted_style_request(false)
                .with_bucket_name(BUCKET)
                .with_region(REGION)
                .with_access_key_id(ACCESS_KEY)
                .with_secret_access_key(secret)
                .with_retry(fast_retries())
                .build()
                .unwrap(),
        )
    }

    fn store_url(&self) -> Url {
        Url::parse(&format!("s3://{BUCKET}")).unwrap()
    }

    fn kill(&mut self) {
        self.server.kill();
    }
}

pub struct Gcs {
    server: GcsServer,
}

impl Server for Gcs {
    const NAME: &'static str = "GCS (fake-gcs-server)";
    const NOT_FOUND: &'static str = "not found";
    // fake-gcs-server checks no credentials.
    const REFUSED: &'static [&'static str] = &[];
    const GONE: &'static str = "error sending request";

    fn start() -> Self {
        let server = GcsServer::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
        Self { server }
    }

    fn client(&self, _refused: bool) -> Arc<dyn ObjectStore> {
        Arc::new(
            self.server
                .builder(BUCKET)
                .with_retry(fast_retries())
                .build()
                .unwrap(),
        )
    }

    fn store_url(&self) -> Url {
        Url::parse(&format!("gs://{BUCKET}")).unwrap()
    }

    /// object_store's GCS client percent-encodes the object's name in the
    /// URL its errors quote (`file%5F00%2Eparquet`).
    fn names_a_file(err: &str) -> bool {
        err.contains(".parquet") || err.contains("%2Eparquet")
    }

    /// fake-gcs-server refuses object_store's XML-API upload: the JSON API.
    fn put(&self, path: &Path, bytes: Bytes) -> impl std::future::Future<Output = ()> + Send {
        self.server
            .put_object(BUCKET, path.as_ref(), &bytes)
            .unwrap_or_else(|e| panic!("{e}"));
        std::future::ready(())
    }

    fn kill(&mut self) {
        self.server.kill();
    }
}

pub struct Azure {
    server: AzureServer,
}

impl Server for Azure {
    const NAME: &'static str = "Azure Blob (Azurite)";
    const NOT_FOUND: &'static str = "not found";
    const REFUSED: &'static [&'static str] = &["403", "AuthorizationFailure"];
    const GONE: &'static str = "error sending request";

    fn start() -> Self {
        let server = AzureServer::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
        Self { server }
    }

    fn client(&self, refused: bool) -> Arc<dyn ObjectStore> {
        let mut builder = self.server.builder(BUCKET).with_retry(fast_retries());
        if refused {
            // Base64 of another key.
            builder = builder.with_access_key("d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXk=");
        }
        Arc::new(builder.build().unwrap())
    }

    fn store_url(&self) -> Url {
        Url::parse(&format!("az://{BUCKET}")).unwrap()
    }

    fn kill(&mut self) {
        self.server.kill();
    }
}

pub struct Http {
    server: HttpServer,
}

impl Server for Http {
    const NAME: &'static str = "HTTP (rclone serve webdav)";
    const NOT_FOUND: &'static str = "not found";
    // A plain HTTP server: no credentials.
    const REFUSED: &'static [&'static str] = &[];
    const GONE: &'static str = "error sending request";

    fn start() -> Self {
        let server = HttpServer::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
        Self { server }
    }

    /// Requests that time out are sent again, up to twice, within
    /// object_store's 30 s timeout. (rclone once left requests unanswered
    /// for longer than that while other tests loaded the machine: the cause
    /// was rclone itself spinning a core with a zero directory-cache time,
    /// see `HttpServer::start`; the retries stay as a margin.) A 10 s timeout
    /// cut one footer's body short while a build loaded the machine. A
    /// stopped server still fails at once (connection refused).
    fn client(&self, _refused: bool) -> Arc<dyn ObjectStore> {
        let retry = RetryConfig {
            max_retries: 2,
            retry_timeout: Duration::from_secs(120),
            ..fast_retries()
        };
        Arc::new(
            self.server
                .builder()
                .with_client_options(
                    ClientOptions::new()
                        .with_allow_http(true)
                        .with_timeout(Duration::from_secs(30)),
                )
                .with_retry(retry)
                .build()
                .unwrap(),
        )
    }

    /// The server's root: the store's paths start with the folder.
    fn store_url(&self) -> Url {
        Url::parse(&self.server.endpoint()).unwrap()
    }

    fn path(&self, relative: &str) -> Path {
        Path::from(format!("{BUCKET}/{relative}"))
    }

    fn url(&self, relative: &str) -> String {
        format!("{}{relative}", self.server.url(BUCKET))
    }

    fn kill(&mut self) {
        self.server.kill();
    }
}
