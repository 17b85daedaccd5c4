//! [`PrefetchPhysicalCodec`]: prefetching scans across the wire.

use std::sync::Arc;

use ballista_core::serde::BallistaPhysicalExtensionCodec;
use datafusion::common::{DataFusionError, Result, internal_datafusion_err};
use datafusion::datasource::physical_plan::{FileScanConfig, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{AggregateUDF, HigherOrderUDF, ScalarUDF, WindowUDF};
use datafusion::physical_expr_common::physical_expr::proto_decode::PhysicalExprDecodeCtx;
use datafusion::physical_expr_common::physical_expr::proto_encode::PhysicalExprEncodeCtx;
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use datafusion_prefetch::StoreProfiles;
use datafusion_prefetch::{PrefetchingParquetSource, prefetching_scan};
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanNodeExt, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::PhysicalPlanNode;
use prost::Message;

use crate::settings::{options_from_pairs, options_to_pairs};

/// Starts every node this codec encodes. Field number 0 is not a valid
/// protobuf tag, so no message of the wrapped codec can start with it.
const MAGIC: &[u8] = b"\0datafusion-prefetch/scan/v1\0";

/// A `DataSourceExec` over a [`PrefetchingParquetSource`] on the wire.
#[derive(Clone, PartialEq, prost::Message)]
struct PrefetchScanNode {
    /// The same scan over the wrapped `ParquetSource`, as `datafusion-proto`
    /// encodes it: files, schema, projection, predicate, statistics, Parquet
    /// options.
    #[prost(message, optional, tag = "1")]
    scan: Option<PhysicalPlanNode>,
    /// The scan's `prefetch.*` settings, keys without the prefix.
    #[prost(message, repeated, tag = "2")]
    settings: Vec<Setting>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Setting {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(string, tag = "2")]
    value: String,
}

/// A [`PhysicalExtensionCodec`] that carries prefetching Parquet scans between
/// a Ballista scheduler and its executors, and hands every other node to the
/// codec it wraps (Ballista's own by default).
///
/// A scan is encoded as the same scan over the wrapped `ParquetSource` —
/// serialized by `datafusion-proto`, so files, projection, predicate, statistics
/// and Parquet options travel exactly as they do for a stock scan — plus the
/// scan's `prefetch.*` settings. The executor decoding it rebuilds the
/// [`PrefetchingParquetSource`] with those settings over its own runtime: its
/// memory pool, its footer cache and the object stores registered there.
///
/// Install it on the client with Ballista's
/// `SessionConfigExt::with_ballista_physical_extension_codec`, and on the
/// scheduler and every executor as their physical codec (the setups in
/// [`crate::session`] do all three).
///
/// The scans one codec decodes share `auto`'s store measurements
/// ([`StoreProfiles`]): an executor's tasks after its first start from the
/// round trip and bandwidth measured before, with no probe.
#[derive(Debug, Clone)]
pub struct PrefetchPhysicalCodec {
    inner: Arc<dyn PhysicalExtensionCodec>,
    profiles: Arc<StoreProfiles>,
}

impl Default for PrefetchPhysicalCodec {
    fn default() -> Self {
        Self::new(Arc::new(BallistaPhysicalExtensionCodec::default()))
    }
}

impl PrefetchPhysicalCodec {
    /// Prefetching scans, and `inner` for everything else.
    pub fn new(inner: Arc<dyn PhysicalExtensionCodec>) -> Self {
        Self {
            inner,
            profiles: Arc::default(),
        }
    }

    /// The codec every other node goes to.
    pub fn inner(&self) -> &Arc<dyn PhysicalExtensionCodec> {
        &self.inner
    }
}

fn decode_error(e: impl std::fmt::Display) -> DataFusionError {
    internal_datafusion_err!("could not decode a prefetching Parquet scan: {e}")
}

impl PhysicalExtensionCodec for PrefetchPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(body) = buf.strip_prefix(MAGIC) else {
            return self.inner.try_decode(buf, inputs, ctx, proto_converter);
        };
        let node = PrefetchScanNode::decode(body).map_err(decode_error)?;
        let scan = node
            .scan
            .ok_or_else(|| decode_error("the node has no scan"))?;
        let plan = scan.try_into_physical_plan_with_converter(ctx, self, proto_converter)?;
        let exec = plan
            .downcast_ref::<DataSourceExec>()
            .ok_or_else(|| decode_error("the scan is not a DataSourceExec"))?;
        let config = exec
            .data_source()
            .downcast_ref::<FileScanConfig>()
            .ok_or_else(|| decode_error("the scan is not a file scan"))?;
        let parquet = config
            .file_source()
            .downcast_ref::<ParquetSource>()
            .ok_or_else(|| decode_error("the scan is not a Parquet scan"))?;
        let options = options_from_pairs(
            node.settings
                .iter()
                .map(|s| (s.key.as_str(), s.value.as_str())),
        )?;
        // The executor's runtime: staged bytes count against its memory pool,
        // footers go through its cache.
        let source = PrefetchingParquetSource::new(parquet.clone(), options)
            .with_runtime(ctx.runtime_env().as_ref())
            .with_store_profiles(Arc::clone(&self.profiles))
            .with_work_stealing(
                ctx.session_config()
                    .options()
                    .execution
                    .enable_file_stream_work_stealing,
            );
        let config = FileScanConfigBuilder::from(config.clone())
            .with_source(Arc::new(source))
            .build();
        Ok(Arc::new(exec.clone().with_data_source(Arc::new(config))))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some((exec, config, source)) = prefetching_scan(node.as_ref()) else {
            return self.inner.try_encode(node, buf, proto_converter);
        };
        let plain = FileScanConfigBuilder::from(config.clone())
            .with_source(Arc::new(source.inner().clone()))
            .build();
        let plain: Arc<dyn ExecutionPlan> =
            Arc::new(exec.clone().with_data_source(Arc::new(plain)));
        let scan =
            PhysicalPlanNode::try_from_physical_plan_with_converter(plain, self, proto_converter)?;
        let node = PrefetchScanNode {
            scan: Some(scan),
            settings: options_to_pairs(source.options())
                .into_iter()
                .map(|(key, value)| Setting { key, value })
                .collect(),
        };
        buf.extend_from_slice(MAGIC);
        node.encode(buf)
            .map_err(|e| internal_datafusion_err!("could not encode a prefetching scan: {e}"))
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        self.inner.try_decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.try_encode_udf(node, buf)
    }

    fn try_decode_higher_order_function(
        &self,
        name: &str,
        buf: &[u8],
    ) -> Result<Arc<HigherOrderUDF>> {
        self.inner.try_decode_higher_order_function(name, buf)
    }

    fn try_encode_higher_order_function(
        &self,
        node: &HigherOrderUDF,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        self.inner.try_encode_higher_order_function(node, buf)
    }

    fn try_decode_expr(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn PhysicalExpr>],
        ctx: &PhysicalExprDecodeCtx<'_>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        self.inner.try_decode_expr(buf, inputs, ctx)
    }

    fn try_encode_expr(
        &self,
        node: &Arc<dyn PhysicalExpr>,
        buf: &mut Vec<u8>,
        ctx: &PhysicalExprEncodeCtx<'_>,
    ) -> Result<()> {
        self.inner.try_encode_expr(node, buf, ctx)
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        self.inner.try_decode_udaf(name, buf)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.try_encode_udaf(node, buf)
    }

    fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> Result<Arc<WindowUDF>> {
        self.inner.try_decode_udwf(name, buf)
    }

    fn try_encode_udwf(&self, node: &WindowUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.try_encode_udwf(node, buf)
    }
}
