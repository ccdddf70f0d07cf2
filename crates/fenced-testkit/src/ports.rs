//! Loopback ports for the kit's servers, never handed out twice.
//!
//! Tests run side by side, in one process and in several. A server this kit stops keeps its
//! port in two ways, so that another test's server cannot take it and pass for this one
//! restarted (a client reconnecting to the address would talk to a stranger):
//! 1. within the process, [`free_port`] never hands out a port it handed out before;
//! 2. across processes, a killed server's port is held by a [`PortHold`] (a listener that
//!    closes every connection at once, as a dead server's clients expect) until the server
//!    starts again or the test ends.

use std::collections::HashSet;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Every port [`free_port`] handed out in this process.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A TCP port on 127.0.0.1 that was free a moment ago, and that this process never handed
/// out before: a port a stopped server may come back on is not given to another.
pub fn free_port() -> std::io::Result<u16> {
    // The kernel picks from tens of thousands; a few tries find one not handed out.
    for _ in 0..1000 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let mut handed = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
        if handed.get_or_insert_with(HashSet::new).insert(port) {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        ErrorKind::AddrInUse,
        "no loopback port left that this process has not handed out",
    ))
}

/// A killed server's port, held until it starts again: connections are accepted and
/// closed at once (what a client of a dead server meets is a closed connection), and no
/// other process can listen there meanwhile.
#[derive(Debug)]
pub(crate) struct PortHold {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PortHold {
    /// Holds `port`; `None` when it cannot be bound (someone took it already: the restart
    /// will say so).
    pub(crate) fn take(port: u16) -> Option<PortHold> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).ok()?;
        listener.set_nonblocking(true).ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("port-hold-{port}"))
            .spawn(move || {
                while !stopped.load(Ordering::Acquire) {
                    match listener.accept() {
                        // Closed at once: the server is gone.
                        Ok((conn, _)) => drop(conn),
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
            .ok()?;
        Some(PortHold {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for PortHold {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // The listener closes with the thread, within one sleep.
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    #[test]
    fn a_port_is_handed_out_once() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len());
    }

    #[test]
    fn a_held_port_closes_connections_and_cannot_be_taken_until_let_go() {
        let port = free_port().unwrap();
        let hold = PortHold::take(port).unwrap();
        assert!(TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err());
        let mut conn = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 1];
        // Closed by the hold: end of stream (or a reset), never a timeout.
        match std::io::Read::read(&mut conn, &mut buf) {
            Ok(n) => assert_eq!(n, 0),
            Err(e) => assert!(
                !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "{e}"
            ),
        }
        drop(hold);
        assert!(TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok());
    }
}
