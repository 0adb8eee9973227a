//! Batched completion writes: deliveries that finish together share one `complete_many`
//! transaction (each item still fenced by its own lease token).

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use onestep_core::ports::LeaseStore;
use onestep_core::{Completion, Execution, ExecutionError, LeaseRef};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

type Reply = oneshot::Sender<Result<Execution, ExecutionError>>;

struct Item {
    lease: LeaseRef,
    completion: Completion,
    reply: Reply,
}

/// A handle to the completion writer of one store. Cloned into every delivery; the writer task
/// ends when the last handle is dropped and the queue is empty.
#[derive(Clone)]
pub(crate) struct Completer {
    tx: mpsc::Sender<Item>,
}

impl Completer {
    /// Starts the writer task over `store`, writing at most `max_batch` completions per
    /// transaction.
    pub(crate) fn spawn(store: Arc<dyn LeaseStore>, max_batch: usize) -> (Self, JoinHandle<()>) {
        let max_batch = max_batch.max(1);
        let (tx, rx) = mpsc::channel::<Item>(max_batch * 4);
        let handle = tokio::spawn(write_loop(store, rx, max_batch));
        (Completer { tx }, handle)
    }

    /// Queues one completion and waits for its outcome.
    pub(crate) async fn complete(
        &self,
        lease: LeaseRef,
        completion: Completion,
    ) -> Result<Execution, ExecutionError> {
        let (reply, rx) = oneshot::channel();
        let item = Item {
            lease,
            completion,
            reply,
        };
        if self.tx.send(item).await.is_err() {
            return Err(writer_gone());
        }
        rx.await.unwrap_or_else(|_| Err(writer_gone()))
    }
}

fn writer_gone() -> ExecutionError {
    ExecutionError::Backend(onestep_core::BackendError {
        backend: "worker",
        operation: "ack",
        kind: onestep_core::ConnectorKind::Disconnected,
        message: "the completion writer has stopped".into(),
    })
}

async fn write_loop(store: Arc<dyn LeaseStore>, mut rx: mpsc::Receiver<Item>, max_batch: usize) {
    let mut batch: Vec<Item> = Vec::with_capacity(max_batch);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        write_batch(&*store, std::mem::take(&mut batch)).await;
    }
}

async fn write_batch(store: &dyn LeaseStore, batch: Vec<Item>) {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_max_times(4)
        .with_jitter();
    if let [single] = batch.as_slice() {
        let outcome = (|| store.complete(&single.lease, &single.completion))
            .retry(backoff)
            .when(ExecutionError::is_transient)
            .await;
        if let Some(item) = batch.into_iter().next() {
            let _ = item.reply.send(outcome);
        }
        return;
    }
    let items: Vec<(LeaseRef, Completion)> = batch
        .iter()
        .map(|i| (i.lease, i.completion.clone()))
        .collect();
    let outcome = (|| store.complete_many(&items))
        .retry(backoff)
        .when(ExecutionError::is_transient)
        .await;
    match outcome {
        Ok(results) => {
            let mut results = results.into_iter();
            for item in batch {
                let r = results.next().unwrap_or_else(|| {
                    Err(ExecutionError::invalid(
                        "complete_many returned fewer results than items",
                    ))
                });
                let _ = item.reply.send(r);
            }
        }
        Err(e) => {
            for item in batch {
                let _ = item.reply.send(Err(e.clone()));
            }
        }
    }
}
