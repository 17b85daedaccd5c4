//! The object store for a table URL, from `storage_options` over the usual
//! environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`), with the same keys
//! object_store's builders accept (`aws_endpoint`, `aws_allow_http`,
//! `google_service_account`, `azure_storage_account_name`, …).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_prefetch::attempts::AttemptCountingConnector;
use datafusion_prefetch_simstore::{LatencyModel, SimulatedStore, SimulatedStoreConfig};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::local::LocalFileSystem;
use object_store::{ClientConfigKey, ObjectStore};
use pyo3::PyResult;
use pyo3::exceptions::PyValueError;
use url::Url;

/// Options as given, sorted: also what tells two tables' stores apart.
pub type StorageOptions = BTreeMap<String, String>;

/// The store serving `url` (`None`: local files, DataFusion's own), behind a
/// [`SimulatedStore`] when `simulation` is given (local files too).
pub fn store_for(
    url: &Url,
    options: &StorageOptions,
    simulation: Option<LatencyModel>,
) -> PyResult<Option<Arc<dyn ObjectStore>>> {
    let store = real_store_for(url, options)?;
    Ok(match simulation {
        None => store,
        Some(latency) => {
            let store = match store {
                Some(store) => store,
                None => Arc::new(LocalFileSystem::new()),
            };
            let config = SimulatedStoreConfig::from_latency(latency);
            Some(Arc::new(SimulatedStore::new(store, config)))
        }
    })
}

fn real_store_for(url: &Url, options: &StorageOptions) -> PyResult<Option<Arc<dyn ObjectStore>>> {
    let invalid = |e: object_store::Error| PyValueError::new_err(format!("{url}: {e}"));
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        "file" => {
            if let Some(key) = options.keys().next() {
                return Err(PyValueError::new_err(format!(
                    "storage option '{key}' given for local files, which take none"
                )));
            }
            return Ok(None);
        }
        "s3" | "s3a" => {
            let builder = AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .with_http_connector(AttemptCountingConnector::default());
            let builder = configured(builder, options, AmazonS3Builder::with_config, invalid)?;
            Arc::new(builder.build().map_err(invalid)?)
        }
        "gs" => {
            let builder = GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .with_http_connector(AttemptCountingConnector::default());
            let builder = configured(
                builder,
                options,
                GoogleCloudStorageBuilder::with_config,
                invalid,
            )?;
            Arc::new(builder.build().map_err(invalid)?)
        }
        "az" | "adl" | "azure" | "abfs" | "abfss" => {
            let builder = MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .with_http_connector(AttemptCountingConnector::default());
            let builder = configured(
                builder,
                options,
                MicrosoftAzureBuilder::with_config,
                invalid,
            )?;
            Arc::new(builder.build().map_err(invalid)?)
        }
        "http" | "https" => {
            let base = &url[..url::Position::AfterPort];
            let builder = HttpBuilder::new()
                .with_url(base)
                .with_config(
                    ClientConfigKey::AllowHttp,
                    (url.scheme() == "http").to_string(),
                )
                .with_http_connector(AttemptCountingConnector::default());
            let builder = configured(builder, options, HttpBuilder::with_config, invalid)?;
            Arc::new(builder.build().map_err(invalid)?)
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "unsupported URL scheme '{other}' in {url}: expected a local path, file://, \
                 s3://, gs://, az://, abfss://, http:// or https://"
            )));
        }
    };
    Ok(Some(store))
}

/// `builder` with every option set through `set`, keys parsed as the
/// builder's own (`aws_endpoint`, `google_service_account`, …).
fn configured<B, K>(
    builder: B,
    options: &StorageOptions,
    set: fn(B, K, String) -> B,
    invalid: impl Fn(object_store::Error) -> pyo3::PyErr,
) -> PyResult<B>
where
    K: std::str::FromStr<Err = object_store::Error>,
{
    options.iter().try_fold(builder, |builder, (key, value)| {
        Ok(set(builder, key.parse().map_err(&invalid)?, value.clone()))
    })
}
