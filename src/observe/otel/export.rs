//! The exporter: OTLP over HTTP (protobuf) to `--otlp-endpoint`, through
//! `ureq` (already linked for `ctl`, so no second HTTP stack), batched by
//! the SDK's batch span processor on a thread of its own.

use crate::base::error::{Error, Result};
use bytes::Bytes;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use std::time::Duration;

/// What `serve` was asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The collector's OTLP/HTTP base URL (`/v1/traces` is added when the
    /// URL has no path), or the traces URL itself.
    pub endpoint: String,
    /// The share of operations sampled (0.0-1.0) when the request carries
    /// no trace context.
    pub ratio: f64,
    /// How often batches are sent.
    pub every: Duration,
    /// Operations per second traced because their caller's trace context
    /// said so, beyond the ratio (0: a caller's flag counts for nothing).
    pub caller_rate: u32,
}

/// The traces URL for `endpoint`.
pub(super) fn traces_url(endpoint: &str) -> String {
    let e = endpoint.trim_end_matches('/');
    let path_start = e.find("://").map(|i| i + 3).unwrap_or(0);
    if e[path_start..].contains('/') {
        e.to_string()
    } else {
        format!("{e}/v1/traces")
    }
}

/// OTLP requests over `ureq`.
#[derive(Debug)]
struct Ureq(ureq::Agent);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Ureq {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> std::result::Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let mut r = self
            .0
            .request(request.method().as_str(), &request.uri().to_string());
        for (k, v) in request.headers() {
            r = r.set(k.as_str(), v.to_str()?);
        }
        let resp = match r.send_bytes(request.body()) {
            Ok(resp) | Err(ureq::Error::Status(_, resp)) => resp,
            Err(e) => return Err(Box::new(e)),
        };
        let status = resp.status();
        let mut body = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(resp.into_reader(), 1 << 20),
            &mut body,
        )?;
        Ok(http::Response::builder()
            .status(status)
            .body(Bytes::from(body))?)
    }
}

/// The tracer provider exporting as `s` says.
pub(super) fn provider(s: &Settings) -> Result<SdkTracerProvider> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Ureq(agent))
        .with_endpoint(traces_url(&s.endpoint))
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| Error::config(format!("--otlp-endpoint {}: {e}", s.endpoint)))?;
    let batch = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(s.every)
                .with_max_queue_size(8192)
                .build(),
        )
        .build();
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("dsa-router")
        .build();
    Ok(SdkTracerProvider::builder()
        .with_id_generator(super::ids::Preset)
        .with_span_processor(batch)
        .with_resource(resource)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_is_added_to_a_base_url_only() {
        let cases = [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
            ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
            (
                "http://c:4318/otlp/v1/traces",
                "http://c:4318/otlp/v1/traces",
            ),
        ];
        for (given, want) in cases {
            assert_eq!(traces_url(given), want, "{given}");
        }
    }
}
