//! The metrics listener: `GET /metrics`, `GET /healthz` and `GET /readyz` on `--metrics-addr`
//! (docs/observability.md).

use super::*;

async fn metrics_route(State(m): State<Arc<Metrics>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.render(),
    )
        .into_response()
}

async fn healthz_route(State(m): State<Arc<Metrics>>) -> Response {
    let (healthy, doc) = m.health();
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(doc)).into_response()
}

async fn readyz_route(State(m): State<Arc<Metrics>>) -> Response {
    let (ready, doc) = m.readiness();
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(doc)).into_response()
}

/// The `/metrics`, `/healthz`, `/readyz` routes.
pub(crate) fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_route))
        .route("/healthz", get(healthz_route))
        .route("/readyz", get(readyz_route))
        .with_state(metrics)
}

/// Binds `addr` and serves [`router`] until `stop` fires; returns the bound address.
pub(crate) async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("metrics_addr {addr}: cannot listen: {e}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let server = axum::serve(listener, router(metrics))
            .with_graceful_shutdown(async move { stop.cancelled().await });
        if let Err(e) = server.await {
            tracing::warn!(error = %e, "metrics server stopped");
        }
    });
    Ok(bound)
}
