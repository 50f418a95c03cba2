//! A tiny HTTP server on 127.0.0.1 for tests: the notification receiver, and a fault-injecting
//! stand-in for EventBridge. The handler gets the request head and the whole body.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

pub type Response = http::Response<Full<Bytes>>;

#[derive(Debug)]
pub struct LocalServer {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl LocalServer {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn respond(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response {
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()))
        .expect("response")
}

/// Serves `handler` on an ephemeral loopback port until the server is dropped.
pub async fn serve<F, Fut>(handler: F) -> LocalServer
where
    F: Fn(http::request::Parts, Bytes) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handler = Arc::new(handler);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let handler = Arc::clone(&handler);
            tokio::spawn(async move {
                let service = service_fn(move |request: http::Request<Incoming>| {
                    let handler = Arc::clone(&handler);
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        Ok::<_, std::convert::Infallible>(handler(parts, body).await)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    LocalServer { addr, task }
}
