//! `sluice ui`: a read-only web view of a lake, served on this machine.
//!
//! A process the user starts and stops, reading the lake with the
//! library's typed API: no request changes the lake (only `GET` is
//! routed, and the readers used write nothing — steps whose orchestrator
//! died are shown abandoned, not recorded so). Pages are HTML rendered
//! here ([`pages`]), every value from the lake escaped ([`html::esc`]); the
//! same values are JSON under `/api/`. Every response forbids loading
//! anything from elsewhere (a Content-Security-Policy of `'self'` only).
//! It listens on 127.0.0.1 unless told otherwise; from a cluster's login
//! node, reach it with `ssh -L 8080:127.0.0.1:8080 login-node`.

mod html;
mod pages;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use sluice::Lake;
use sluice::lake::io::location::LakeRoot;
use sluice::lineage::Direction;
use sluice::pipeline::status;

/// Where the UI listens and what it may do.
#[derive(Debug, Clone)]
pub struct UiOptions {
    /// The address to bind (127.0.0.1 by default).
    pub host: std::net::IpAddr,
    /// The port (0: any free one).
    pub port: u16,
}

/// What every response says about where its page may load from.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

type Shared = Arc<Lake>;

/// Serve the lake at `root` until Ctrl-C.
pub async fn serve(root: &LakeRoot, options: UiOptions) -> anyhow::Result<()> {
    let lake = Arc::new(Lake::open(root).await?);
    let app = router(lake);
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(options.host, options.port))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}:{}: {e}", options.host, options.port))?;
    let address = listener.local_addr()?;
    crate::output::print(&format!("sluice ui: http://{address}/ (Ctrl-C stops it)"))?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

fn router(lake: Shared) -> Router {
    Router::new()
        .route("/", get(runs_page))
        .route("/runs/{id}", get(run_page))
        .route("/artifacts/{id}", get(artifact_page))
        .route("/tables", get(tables_page))
        .route("/static/style.css", get(style))
        .route("/api/runs", get(runs_api))
        .route("/api/runs/{id}", get(run_api))
        .route("/api/tables", get(tables_api))
        .fallback(|| async { failure(StatusCode::NOT_FOUND, "Not found", "no such page") })
        .layer(axum::middleware::map_response(secure))
        .with_state(lake)
}

/// Headers every response carries.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

fn failure(code: StatusCode, title: &str, text: &str) -> Response {
    (code, Html(pages::problem(title, text))).into_response()
}

/// What the user asked for that is not there is a 404, the rest a 500.
fn status_of(e: &sluice::Error) -> StatusCode {
    match e {
        sluice::Error::InvalidInput(_) | sluice::Error::ArtifactNotFound(_) => {
            StatusCode::NOT_FOUND
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A library error as a page, with the library's message.
fn error_page(e: sluice::Error) -> Response {
    failure(status_of(&e), "Cannot show this", &e.to_string())
}

async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], html::STYLE)
}

async fn runs_page(State(lake): State<Shared>) -> Response {
    match status::runs_as_seen(&lake).await {
        Ok(runs) => Html(pages::runs(&runs)).into_response(),
        Err(e) => error_page(e),
    }
}

async fn run_page(State(lake): State<Shared>, Path(id): Path<String>) -> Response {
    let shown = async {
        let run = status::status_as_seen(&lake, Some(&id)).await?;
        let request = sluice::pipeline::logs::LogsRequest {
            target: Some(run.pipeline_run_id.clone()),
            step: None,
            all: false,
        };
        let failed = sluice::pipeline::logs::logs(&lake, &request).await?;
        Ok::<_, sluice::Error>(pages::run(&run, &failed))
    };
    match shown.await {
        Ok(page) => Html(page).into_response(),
        Err(e) => error_page(e),
    }
}

async fn artifact_page(State(lake): State<Shared>, Path(id): Path<String>) -> Response {
    let shown = async {
        let id = lake.resolve(&id).await?;
        let artifact = lake.get(id).await?;
        let rendered = lake.registry().get(&artifact.type_key)?.render(&artifact)?;
        let graph = lake.lineage(id).with_direction(Direction::Up).with_depth(0).execute().await?;
        let producer = graph.nodes.get(&id).and_then(|n| n.produced_by.clone());
        Ok::<_, sluice::Error>(pages::artifact(&artifact, &rendered, producer.as_ref()))
    };
    match shown.await {
        Ok(page) => Html(page).into_response(),
        Err(e) => error_page(e),
    }
}

async fn tables_page(State(lake): State<Shared>) -> Response {
    match lake.table_infos().await {
        Ok(infos) => Html(pages::tables(&infos)).into_response(),
        Err(e) => error_page(e),
    }
}

/// A JSON answer, or the error as `{"error": …}` with its status.
fn json_of<T: serde::Serialize>(value: sluice::Result<T>) -> Response {
    match value {
        Ok(v) => Json(v).into_response(),
        Err(e) => {
            (status_of(&e), Json(serde_json::json!({ "error": e.to_string() }))).into_response()
        }
    }
}

async fn runs_api(State(lake): State<Shared>) -> Response {
    json_of(status::runs_as_seen(&lake).await)
}

async fn run_api(State(lake): State<Shared>, Path(id): Path<String>) -> Response {
    json_of(status::status_as_seen(&lake, Some(&id)).await)
}

async fn tables_api(State(lake): State<Shared>) -> Response {
    json_of(lake.table_infos().await)
}
