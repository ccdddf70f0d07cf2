//! A TCP proxy on loopback that adds a fixed one-way delay to every byte in both directions,
//! like a network between two machines: a Redis in the same zone is about 200 µs away.
//!
//! Unlike [`Proxy`](crate::Proxy)'s `DelayReplies`, it delays without holding up what follows:
//! bytes read while earlier ones are in flight keep their own due time, so a pipeline of
//! commands pays the delay once, not once per command. Each direction of each connection is
//! two OS threads (a reader that stamps what it reads with its due time, and a writer that
//! sends it then), because the OS's sleep is precise to tens of microseconds where tokio's
//! timer rounds up to a millisecond.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running delay proxy; see the module documentation. Dropping it stops accepting
/// connections; those it carries end when their clients close them (a benchmark's tool, it
/// keeps no registry of them).
pub struct LatencyProxy {
    port: u16,
    stopped: Arc<AtomicBool>,
}

impl LatencyProxy {
    /// Starts a proxy on a free loopback port in front of `target`, delaying each direction
    /// by `one_way`.
    pub fn start(target: SocketAddr, one_way: Duration) -> std::io::Result<LatencyProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let stopped = Arc::new(AtomicBool::new(false));
        let stop = stopped.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else {
                    // Out of file descriptors, say: try again shortly rather than spin.
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let _ = carry(client, server, one_way);
            }
        });
        Ok(LatencyProxy { port, stopped })
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
    }
}

/// Starts both directions of one connection; each closes its sockets' halves as it ends.
fn carry(client: TcpStream, server: TcpStream, one_way: Duration) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    direction(client.try_clone()?, server.try_clone()?, one_way);
    direction(server, client, one_way);
    Ok(())
}

/// Copies `from` to `to`, each chunk sent `one_way` after it was read.
fn direction(mut from: TcpStream, mut to: TcpStream, one_way: Duration) {
    let (chunks, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if chunks
                        .send((Instant::now() + one_way, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Read);
    });
    std::thread::spawn(move || {
        for (at, bytes) in due {
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_takes_twice_the_delay_and_a_pipeline_pays_it_once() {
        let echo = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = echo.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in echo.incoming() {
                let Ok(mut s) = s else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let proxy = LatencyProxy::start(addr, Duration::from_millis(100)).unwrap();
        let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port)).unwrap();
        c.set_nodelay(true).unwrap();
        let started = Instant::now();
        // Ten writes 1 ms apart: with the delay paid once, all echoes are back ~210 ms later;
        // paid once per write, 2 s later.
        for _ in 0..10 {
            c.write_all(b"x").unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut got = 0;
        let mut buf = [0u8; 16];
        while got < 10 {
            got += c.read(&mut buf).unwrap();
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(
            took < Duration::from_millis(1500),
            "delays added up: {took:?}"
        );
    }
}
