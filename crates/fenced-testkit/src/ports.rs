//! Loopback ports for the kit's servers, never handed out twice in a process.
//!
//! Tests run side by side. A server this kit kills keeps its port: [`free_port`] never hands
//! out a port it handed out before, so another test's server cannot take it and pass for
//! this one restarted (a client reconnecting to the address would talk to a stranger). A
//! killed server's port refuses connections, as a dead server's does.

use std::collections::HashSet;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_handed_out_once() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len());
    }
}
