//! A redis-server of the demo's own, for a machine where none runs: started on a free
//! loopback port without persistence, stopped when dropped. (The test kit starts servers for
//! the tests; an installed command carries none of it.)

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running throwaway redis-server.
pub struct Throwaway {
    child: Child,
    port: u16,
}

impl Throwaway {
    /// Starts `$FENCED_REDIS_SERVER`, or `redis-server` from the `PATH`, and waits until it
    /// answers `PING` (a few tries, should another program take the free port first).
    pub fn start() -> Result<Self, String> {
        let binary = std::env::var("FENCED_REDIS_SERVER")
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| "redis-server".to_owned());
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port().map_err(|e| format!("no free loopback port: {e}"))?;
            let child = Command::new(&binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args([
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--protected-mode",
                    "yes",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("{binary}: {e}"))?;
            let mut server = Throwaway { child, port };
            match server.answers(Duration::from_secs(5)) {
                Ok(()) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn answers(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("redis-server exited at start ({status})"));
            }
            // Ours, not a program that took the port first: its process id is our child's.
            if server_pid(self.port) == Some(self.child.id()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "redis-server did not answer on port {} in time",
            self.port
        ))
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The process id the Redis server on `port` reports (`INFO server`), if one answers.
fn server_pid(port: u16) -> Option<u32> {
    let timeout = Duration::from_millis(200);
    let mut conn = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout).ok()?;
    conn.set_read_timeout(Some(timeout)).ok()?;
    conn.write_all(b"INFO server\r\n").ok()?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while reply.len() < 64 * 1024 {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some(rest) = text.split("process_id:").nth(1)
            && let Some((pid, _)) = rest.split_once("\r\n")
        {
            return pid.trim().parse().ok();
        }
    }
    None
}
