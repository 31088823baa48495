//! OTLP/HTTP export of the engine's spans, turned on by the standard OpenTelemetry variables.
//!
//! | variable | effect |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | base URL; spans go to `{it}/v1/traces` |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the traces URL itself (wins over the above) |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL`, `…_TRACES_PROTOCOL` | `http/protobuf` (the default and the only one built in) |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource (`service.name` is `hookloop` by default) |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | sampling (default `parentbased_always_on`) |
//! | `OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `OTEL_BSP_*` | headers, export timeout, batching |
//! | `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` | no export |
//!
//! With no endpoint set nothing is built: no thread, no layer, no cost. With one, spans are
//! batched on the exporter's own thread through a bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`,
//! 2048): a collector that is slow or gone never blocks a session; when the queue is full,
//! spans are dropped, the first drop is logged once, and the total at exit. Captured content
//! ([`CAPTURE_VARIABLE`](super::CAPTURE_VARIABLE)) waits in that queue with its spans: at most
//! [`DEFAULT_CONTENT_BUDGET`] bytes of it ([`ContentBudget`]); a span past it goes with its
//! content omitted.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use super::budget::{ContentBudget, DEFAULT_CONTENT_BUDGET};
use super::names;

/// The provider the binary installed, for [`flush_in_background`].
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
/// A flush is under way: a second waits for nothing and is skipped.
static FLUSHING: AtomicBool = AtomicBool::new(false);

/// Why the OpenTelemetry variables could not be followed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A variable has a value this build cannot follow.
    #[error("{variable}={value:?}: {reason}")]
    Invalid {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What this build can follow.
        reason: &'static str,
    },
    /// The exporter could not be built.
    #[error("cannot build the OTLP exporter: {0}")]
    Build(String),
}

/// The exporter's blocking HTTP client, as opentelemetry-otlp would build its own (its timeout
/// the export timeout of the variables) but with the crate's TLS. Built on a thread of its own:
/// a blocking client cannot be made or dropped inside an async runtime, and an embedder may
/// call [`Exporter::from_env`] from one.
fn http_client() -> Result<reqwest::blocking::Client, TelemetryError> {
    let timeout = export_timeout();
    let builder = crate::net::tls::client_builder()
        .map_err(|e| TelemetryError::Build(format!("cannot build the HTTP client: {e}")))?;
    std::thread::Builder::new()
        .name("otlp-client-build".into())
        .spawn(move || {
            reqwest::blocking::ClientBuilder::from(builder)
                .timeout(timeout)
                .build()
        })
        .map_err(|e| TelemetryError::Build(format!("cannot start a thread: {e}")))?
        .join()
        .map_err(|_| TelemetryError::Build("building the HTTP client panicked".into()))?
        .map_err(|e| TelemetryError::Build(format!("cannot build the HTTP client: {e}")))
}

/// The export timeout as opentelemetry-otlp reads it: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
/// `OTEL_EXPORTER_OTLP_TIMEOUT`, in milliseconds; one that does not parse counts as unset.
fn export_timeout() -> Duration {
    [
        opentelemetry_otlp::OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
        opentelemetry_otlp::OTEL_EXPORTER_OTLP_TIMEOUT,
    ]
    .into_iter()
    .find_map(|name| std::env::var(name).ok()?.parse().ok())
    .map_or(
        opentelemetry_otlp::OTEL_EXPORTER_OTLP_TIMEOUT_DEFAULT,
        Duration::from_millis,
    )
}

/// The OTLP exporter of a process and the tracer provider feeding it.
#[derive(Debug)]
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// The exporter the standard variables ask for, or `None` when they ask for none (no
    /// endpoint set, or export turned off). Build it before starting an async runtime, and
    /// [`shutdown`](Self::shutdown) it after the runtime is gone: its HTTP client blocks, on
    /// the exporter's own thread.
    pub fn from_env() -> Result<Option<Self>, TelemetryError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match var("OTEL_TRACES_EXPORTER") {
            None => {}
            Some(v) if v.trim() == "otlp" => {}
            Some(v) if v.trim() == "none" => return Ok(None),
            Some(value) => {
                return Err(TelemetryError::Invalid {
                    variable: "OTEL_TRACES_EXPORTER",
                    value,
                    reason: "this build exports `otlp` or `none`",
                });
            }
        }
        if var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
            && var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        {
            return Ok(None);
        }
        for variable in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(value) = var(variable) {
                if value.trim() != "http/protobuf" {
                    return Err(TelemetryError::Invalid {
                        variable,
                        value,
                        reason: "this build speaks OTLP over `http/protobuf` only",
                    });
                }
                break;
            }
        }
        // The endpoint, headers and timeout come from the variables, read by the builder; the
        // client is the crate's (its TLS reads no root store until a collector speaks https).
        let exporter = SpanExporter::builder()
            .with_http()
            .with_http_client(http_client()?)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()
            .map_err(|e| TelemetryError::Build(e.to_string()))?;
        let mut resource = Resource::builder();
        if var("OTEL_SERVICE_NAME").is_none()
            && !var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|v| v.contains("service.name="))
        {
            resource = resource.with_service_name(names::AGENT);
        }
        let provider = provider(exporter, resource.build());
        // A second exporter in the process (tests build several) does not replace the first's
        // flush; each still shuts down its own.
        let _ = PROVIDER.set(provider.clone());
        Ok(Some(Self { provider }))
    }

    /// A `tracing` layer that turns the engine's spans (and only them: target
    /// [`names::TARGET`]) into OpenTelemetry spans of this exporter.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        layer(self.provider.tracer(names::AGENT))
    }

    /// Sends what is queued and stops the exporter, waiting at most `timeout` for the
    /// collector. The spans of a collector that does not answer in time are lost (and said so
    /// by the SDK's log).
    /// A collector whose address refuses connections is not waited for: the SDK retries a
    /// failed connection with backoff until the deadline, though a refusal is known at once.
    pub fn shutdown(self, timeout: Duration) {
        let timeout = if collector_refuses() {
            Duration::ZERO
        } else {
            timeout
        };
        if let Err(error) = self.provider.shutdown_with_timeout(timeout) {
            tracing::debug!(%error, "the span exporter did not shut down cleanly");
        }
    }
}

/// The provider of `exporter`: spans batched on the exporter's thread, the captured content
/// the batch queue holds bounded by [`DEFAULT_CONTENT_BUDGET`]. The sampler is the SDK's
/// default: `OTEL_TRACES_SAMPLER` and its argument.
pub(super) fn provider<E>(exporter: E, resource: Resource) -> SdkTracerProvider
where
    E: opentelemetry_sdk::trace::SpanExporter + 'static,
{
    let batch = BatchSpanProcessor::builder(exporter).build();
    SdkTracerProvider::builder()
        .with_span_processor(ContentBudget::new(batch, DEFAULT_CONTENT_BUDGET))
        .with_resource(resource)
        .build()
}

/// How long the exit's look at the collector's address may take, name resolution included.
const PROBE: Duration = Duration::from_millis(250);

/// Whether every address of the traces endpoint refuses a connection now (nothing listens):
/// a look on a thread of its own, `false` when it cannot say within [`PROBE`].
fn collector_refuses() -> bool {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let Some(endpoint) =
        var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
    else {
        return false;
    };
    let Ok(url) = reqwest::Url::parse(endpoint.trim()) else {
        return false;
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("otel-probe".into())
        .spawn(move || {
            let refused = url.socket_addrs(|| None).is_ok_and(|addrs| {
                !addrs.is_empty()
                    && addrs.iter().all(|addr| {
                        std::net::TcpStream::connect_timeout(addr, PROBE)
                            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
                    })
            });
            let _ = tx.send(refused);
        });
    spawned.is_ok() && rx.recv_timeout(PROBE).unwrap_or(false)
}

/// A `tracing` layer that turns the engine's spans (target [`names::TARGET`]) into spans of
/// `tracer`: what an embedder adds to its own subscriber, with its own provider's tracer.
pub fn layer<S, T>(tracer: T) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    T: opentelemetry::trace::Tracer + Send + Sync + 'static,
    T::Span: Send + Sync,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target(names::TARGET, Level::INFO))
}

/// Asks the exporter to send the spans ended so far, on a thread of its own; returns at once.
/// Skipped when a flush is still under way (a collector that does not answer).
pub(super) fn flush_in_background() {
    let Some(provider) = PROVIDER.get() else {
        return;
    };
    if FLUSHING.swap(true, Ordering::AcqRel) {
        return;
    }
    let provider = provider.clone();
    let spawned = std::thread::Builder::new()
        .name("otel-flush".into())
        .spawn(move || {
            if let Err(error) = provider.force_flush() {
                tracing::debug!(%error, "the span exporter could not flush");
            }
            FLUSHING.store(false, Ordering::Release);
        });
    if spawned.is_err() {
        FLUSHING.store(false, Ordering::Release);
    }
}

/// A filter for the process's log layer: each kind of log line of the OpenTelemetry crates (an
/// export that failed, the first dropped span, the count dropped at exit) passes once, so a
/// collector that stays unreachable is said once rather than at every batch. Public only for
/// the binary, which builds the process's log layer.
#[doc(hidden)]
pub fn once_per_kind<S>() -> impl tracing_subscriber::layer::Filter<S> {
    static SEEN: std::sync::Mutex<Vec<tracing::callsite::Identifier>> =
        std::sync::Mutex::new(Vec::new());
    tracing_subscriber::filter::dynamic_filter_fn(|meta, _| {
        if !meta.target().starts_with("opentelemetry") {
            return true;
        }
        // The callsites are the crates' own: a fixed, small set.
        let mut seen = crate::text::lock(&SEEN);
        if seen.contains(&meta.callsite()) {
            return false;
        }
        seen.push(meta.callsite());
        true
    })
    .with_callsite_filter(|_| tracing::subscriber::Interest::sometimes())
}
