//! An axum application served from a thread of its own beside a running job, stopped (gracefully)
//! when dropped: the job's `/metrics` and `run --serve`'s dashboards.

use std::net::SocketAddr;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use axum::Router;

/// A running server; dropping it stops it and waits for its thread.
#[derive(Debug)]
pub struct HttpThread {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HttpThread {
    /// Serves `app` on `listener` (bound beforehand, so that a taken port fails the caller at
    /// once) from a thread named `name` running a runtime of `workers` threads (1: a
    /// current-thread runtime).
    ///
    /// # Errors
    /// The runtime or the thread cannot be started.
    pub fn start(
        listener: std::net::TcpListener,
        app: Router,
        name: &str,
        workers: usize,
    ) -> Result<Self> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = if workers <= 1 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .thread_name(name)
                .enable_all()
                .build()
        }
        .with_context(|| format!("starting the {name} server's runtime"))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let what = name.to_string();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                runtime.block_on(async move {
                    let served = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => axum::serve(listener, app)
                            .with_graceful_shutdown(async {
                                let _ = stopped.await;
                            })
                            .await
                            .map_err(anyhow::Error::from),
                        Err(e) => Err(e.into()),
                    };
                    if let Err(e) = served {
                        tracing::error!(error = %e, "the {what} server stopped");
                    }
                });
            })
            .with_context(|| format!("starting the {name} thread"))?;
        Ok(HttpThread {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port chosen for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
