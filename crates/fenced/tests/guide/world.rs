//! What the guide's snippets take as given: a client, and the application's own functions.

#[allow(unused_imports)] // the snippets that do not import their own
pub use std::time::Duration;

#[allow(unused_imports)]
pub use fenced::{Client, FencingToken};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A job of the application.
pub async fn build_report() {}

/// Blocking work that writes under a fencing token.
pub fn export_rows(_token: FencingToken) -> usize {
    0
}

/// A leader's work under its term.
pub async fn lead(_term: FencingToken) {}

/// Work handed to a worker with the lease's ticket.
pub struct Job {
    pub order: u64,
    pub ticket: String,
}

/// The worker's side of an order.
pub async fn fulfil(_order: u64, _token: FencingToken) -> fenced::Result<()> {
    Ok(())
}

/// A database the cache reads through.
pub struct Db;

impl Db {
    pub async fn load_product(&self, _id: &str) -> fenced::Result<Option<Vec<u8>>> {
        Ok(None)
    }
}
