//! The attempts of object_store's HTTP stores, counted where they are made.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};

use super::{record_attempt, record_throttled};

/// An [`HttpConnector`] whose clients report every attempt they make —
/// each request, each of object_store's retries — with
/// [`record_attempt`] (and each `503` or `429` with [`record_throttled`]),
/// so that a prefetching scan's `EXPLAIN ANALYZE`
/// shows what the wire saw of its reads (`prefetch_attempts`,
/// `prefetch_attempts_throttled`), and keep totals of their own
/// ([`Self::totals`]) for every request of the store, planning included.
///
/// Wraps another connector (object_store's reqwest one by default):
///
/// ```
/// use datafusion_prefetch::attempts::AttemptCountingConnector;
/// use object_store::aws::AmazonS3Builder;
///
/// let connector = AttemptCountingConnector::default();
/// let totals = connector.totals();
/// let s3 = AmazonS3Builder::new()
///     .with_bucket_name("bucket")
///     .with_region("us-east-1")
///     .with_http_connector(connector)
///     .build()?;
/// assert_eq!(totals.attempts(), 0);
/// # Ok::<_, object_store::Error>(())
/// ```
#[derive(Debug)]
pub struct AttemptCountingConnector<C = ReqwestConnector> {
    inner: C,
    totals: Arc<AttemptTotals>,
}

impl Default for AttemptCountingConnector {
    /// Counts the attempts of object_store's own (reqwest) clients.
    fn default() -> Self {
        Self::new(ReqwestConnector::default())
    }
}

impl<C: HttpConnector> AttemptCountingConnector<C> {
    /// Counts the attempts of the clients `inner` makes.
    pub fn new(inner: C) -> Self {
        Self {
            inner,
            totals: Arc::default(),
        }
    }

    /// The attempts of every client this connector made, whichever scan (or
    /// none) they were for.
    pub fn totals(&self) -> Arc<AttemptTotals> {
        Arc::clone(&self.totals)
    }
}

impl<C: HttpConnector> HttpConnector for AttemptCountingConnector<C> {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(CountingService {
            inner: self.inner.connect(options)?,
            totals: Arc::clone(&self.totals),
        }))
    }
}

/// Attempts counted by an [`AttemptCountingConnector`]'s clients.
#[derive(Debug, Default)]
pub struct AttemptTotals {
    attempts: AtomicU64,
    throttled: AtomicU64,
}

impl AttemptTotals {
    /// Attempts made (answered or not).
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::SeqCst)
    }

    /// Of [`Self::attempts`], those answered `503` or `429`.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::SeqCst)
    }
}

#[derive(Debug)]
struct CountingService {
    inner: HttpClient,
    totals: Arc<AttemptTotals>,
}

#[async_trait]
impl HttpService for CountingService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        // Sent is sent, whether or not the answer is awaited.
        self.totals.attempts.fetch_add(1, Ordering::SeqCst);
        record_attempt();
        let response = self.inner.execute(request).await;
        if let Ok(answer) = &response
            && matches!(answer.status().as_u16(), 429 | 503)
        {
            self.totals.throttled.fetch_add(1, Ordering::SeqCst);
            record_throttled();
        }
        response
    }
}
