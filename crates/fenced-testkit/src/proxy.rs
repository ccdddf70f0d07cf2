//! A TCP proxy on loopback that passes, delays, swallows or cuts the traffic to one server:
//! faults that a real network produces and a SIGSTOP cannot (a reply lost after the command
//! ran, a slow link).
//!
//! It runs on a thread of its own, with its own runtime, so it behaves the same under any
//! test's runtime, and stops (closing every connection) when dropped.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to the traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    Pass,
    /// Hold every byte from the server this long before forwarding it.
    DelayReplies(Duration),
    /// Forward nothing in either direction (connections stay open): a partition.
    Blackhole,
    /// Let requests through, but when the server's next reply arrives, drop it and close that
    /// connection: the command ran, its answer never came. Back to `Pass` afterwards.
    CutNextReply,
}

/// A running proxy; see the module documentation.
pub struct Proxy {
    port: u16,
    fault: Arc<Mutex<Fault>>,
    changed: watch::Sender<u64>,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port in front of `target`.
    pub fn start(target: SocketAddr) -> std::io::Result<Proxy> {
        let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        std_listener.set_nonblocking(true)?;
        let port = std_listener.local_addr()?.port();
        let fault = Arc::new(Mutex::new(Fault::Pass));
        let (changed, _) = watch::channel(0u64);
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (fault_for_thread, changed_for_thread) = (fault.clone(), changed.clone());
        let thread =
            std::thread::spawn(move || {
                runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(std_listener) else { return };
                let stop = tokio::task::spawn_blocking(move || {
                    let _ = stopped.recv();
                });
                tokio::select! {
                    _ = accept_loop(listener, target, fault_for_thread, changed_for_thread) => {}
                    _ = stop => {}
                }
            });
                // Dropping the runtime here aborts every connection task and closes its sockets.
            });
        Ok(Proxy {
            port,
            fault,
            changed,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `redis://127.0.0.1:<port>` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets the fault for every connection, current and future.
    pub fn set(&self, fault: Fault) {
        *lock(&self.fault) = fault;
        self.changed.send_modify(|n| *n += 1);
    }

    /// The fault in force (`CutNextReply` turns back into `Pass` once it has struck).
    pub fn fault(&self) -> Fault {
        *lock(&self.fault)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(fault: &Mutex<Fault>) -> std::sync::MutexGuard<'_, Fault> {
    fault.lock().unwrap_or_else(|e| e.into_inner())
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    fault: Arc<Mutex<Fault>>,
    changed: watch::Sender<u64>,
) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // Out of file descriptors, say: try again shortly rather than spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let (fault, changed) = (fault.clone(), changed.clone());
        // One task per connection: a slow connect (to a paused server) holds up no one else.
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(target).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let cut = Arc::new(Cut::default());
            tokio::spawn(pump(
                client_read,
                server_write,
                fault.clone(),
                changed.subscribe(),
                false,
                cut.clone(),
            ));
            tokio::spawn(pump(
                server_read,
                client_write,
                fault,
                changed.subscribe(),
                true,
                cut,
            ));
        });
    }
}

/// Tells both directions of a connection that it was cut. A flag as well as a wake-up, so a
/// direction busy writing when the cut happens still sees it.
#[derive(Default)]
struct Cut {
    done: std::sync::atomic::AtomicBool,
    wake: tokio::sync::Notify,
}

impl Cut {
    fn cut(&self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        self.wake.notify_waiters();
    }

    fn is_cut(&self) -> bool {
        self.done.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Copies one direction of one connection, applying the fault.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    fault: Arc<Mutex<Fault>>,
    mut changed: watch::Receiver<u64>,
    replies: bool,
    cut: Arc<Cut>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if cut.is_cut() || !hold_while_blackholed(&fault, &mut changed, &cut).await {
            return;
        }
        let n = tokio::select! {
            // A fault change wins over data that is ready at the same moment.
            biased;
            _ = cut.wake.notified() => return,
            r = changed.changed() => if r.is_err() { return } else { continue },
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        let now = *lock(&fault);
        match now {
            Fault::CutNextReply if replies => {
                *lock(&fault) = Fault::Pass;
                // Close both directions of this connection; the reply is lost.
                cut.cut();
                return;
            }
            Fault::DelayReplies(d) if replies => tokio::time::sleep(d).await,
            _ => {}
        }
        // Bytes read just before a partition began are held until it ends, not delivered.
        if cut.is_cut() || !hold_while_blackholed(&fault, &mut changed, &cut).await {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Waits while the fault is `Blackhole`; false if the connection was cut meanwhile.
async fn hold_while_blackholed(
    fault: &Mutex<Fault>,
    changed: &mut watch::Receiver<u64>,
    cut: &Cut,
) -> bool {
    while *lock(fault) == Fault::Blackhole {
        tokio::select! {
            r = changed.changed() => if r.is_err() { return false },
            _ = cut.wake.notified() => return false,
        }
    }
    !cut.is_cut()
}
