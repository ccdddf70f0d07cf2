//! The lab: redis-servers, one proxy per worker and server, the worker processes, the
//! nemesis schedule, and the history they write.
//!
//! The protected counters live on a separate "store" server that no nemesis touches: it plays
//! the database a lock protects. Faults strike the lock servers, the links between workers
//! and lock servers, and the workers themselves.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fenced::redis;
use fenced_testkit::{Fault as ProxyFault, Proxy, RedisServer};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;

use crate::admin::{LabError, bounded, connection};
use crate::evict::{self, Policy};
use crate::history::{Event, Rng, Section, Write, now_ns};
use crate::nemesis::{Fault, Nemesis};
use crate::restore::{self, Restore};
use crate::worker::Config;
use crate::workload::Workload;

/// The settings of one run of one workload.
#[derive(Clone, Debug)]
pub struct Plan {
    /// What the workers do.
    pub workload: Workload,
    /// The faults to inject, in turn (or at random when `mixed`).
    pub nemeses: Vec<Nemesis>,
    /// Draw faults at random instead of in turn.
    pub mixed: bool,
    /// How long to run.
    pub duration: Duration,
    /// Worker processes.
    pub workers: u32,
    /// Independent keys.
    pub keys: u32,
    /// Lease ttl.
    pub ttl: Duration,
    /// Per-call timeout of the lock clients.
    pub timeout: Duration,
    /// How long an acquire may wait.
    pub wait: Duration,
    /// Work inside each section, µs.
    pub work_us: u64,
    /// The `fenced` command, for the `run` workload.
    pub fenced_bin: Option<std::path::PathBuf>,
    /// The broken behaviour worker 0 plays (`mutants.rs`).
    pub mutant: Option<crate::mutants::Mutant>,
}

/// Everything a run recorded.
#[derive(Debug, Default)]
pub struct Record {
    /// The workers' events, in arrival order.
    pub events: Vec<Event>,
    /// The faults injected.
    pub faults: Vec<Fault>,
    /// Per worker, the windows (start, end) in which it was frozen or dead on purpose.
    pub frozen: Vec<(u32, u64, u64)>,
    /// Workers silent for longer than any call may take while not frozen: hangs.
    pub silent: u32,
    /// Lines with "panicked" on a worker's stderr.
    pub panics: u32,
    /// Workers that exited with a failure, or did not exit when told to.
    pub crashes: u32,
    /// The last stderr lines of the workers, for the report.
    pub stderr: Vec<String>,
    /// Each counter's final value, by key.
    pub counters: HashMap<u32, i64>,
    /// The `run` workload's files (what each CMD wrote), by key.
    pub run_files: HashMap<u32, String>,
}

#[derive(Default)]
struct Shared {
    record: Record,
    /// Worker -> (key, acquisition event) while it holds.
    holding: HashMap<u32, (u32, Event)>,
    last_heard: HashMap<u32, u64>,
    /// Workers stopped at their linger point, waiting for a fault, with the pid of the
    /// process holding the lease when it is not the worker.
    lingering: HashMap<u32, Option<u32>>,
}

struct WorkerProc {
    child: Child,
    stdin: ChildStdin,
    readers: Vec<JoinHandle<()>>,
}

/// A running lab.
pub struct Lab {
    plan: Plan,
    servers: Vec<RedisServer>,
    store: RedisServer,
    proxies: Vec<Vec<Proxy>>,
    workers: Vec<Option<WorkerProc>>,
    shared: Arc<Mutex<Shared>>,
    rng: Rng,
    /// Faults that made a holder linger so far (the linger point alternates).
    lingers: u64,
    /// Restores so far (the way of restoring goes round).
    restores: u64,
    /// The `run` workload's files.
    run_dir: tempfile::TempDir,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Lab {
    /// Starts the servers, the proxies and the workers.
    ///
    /// # Errors
    ///
    /// When redis-server is missing or a process cannot start.
    pub async fn start(plan: Plan) -> Result<Lab, LabError> {
        let mut servers = Vec::new();
        for _ in 0..plan.workload.servers() {
            // As its README section advises, the events are in the server's configuration,
            // so that a restarted server sends them too.
            servers.push(match plan.workload {
                Workload::LockEvents => {
                    RedisServer::start_with(&["--notify-keyspace-events", "Kgx"])?
                }
                _ => RedisServer::start()?,
            });
        }
        let store = RedisServer::start()?;
        let mut proxies = Vec::new();
        for _ in 0..plan.workers {
            let mut mine = Vec::new();
            for server in &servers {
                mine.push(Proxy::start(server.addr())?);
            }
            proxies.push(mine);
        }
        let mut lab = Lab {
            plan,
            servers,
            store,
            proxies,
            workers: Vec::new(),
            shared: Arc::default(),
            rng: Rng::new(None),
            lingers: 0,
            restores: 0,
            run_dir: tempfile::tempdir()?,
        };
        for w in 0..lab.plan.workers {
            let proc = lab.spawn(w)?;
            lab.workers.push(Some(proc));
        }
        lab.wait_ready().await?;
        Ok(lab)
    }

    fn config(&self, w: u32) -> Config {
        Config {
            id: w,
            workload: self.plan.workload,
            lock_urls: self.proxies[w as usize].iter().map(Proxy::url).collect(),
            store_url: self.store.url(),
            keys: self.plan.keys,
            ttl_ms: millis(self.plan.ttl),
            timeout_ms: millis(self.plan.timeout),
            wait_ms: millis(self.plan.wait),
            work_us: self.plan.work_us,
            fenced_bin: self
                .plan
                .fenced_bin
                .as_ref()
                .map(|p| p.display().to_string()),
            run_dir: Some(self.run_dir.path().display().to_string()),
            mutant: self.plan.mutant.filter(|_| w == 0),
        }
    }

    fn spawn(&self, w: u32) -> Result<WorkerProc, LabError> {
        let config = serde_json::to_string(&self.config(w))?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("worker")
            .arg(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // A group of its own (a pause nemesis stops workers): a stopped process in the
            // lab's group makes the kernel hang up on the whole group once it is orphaned,
            // the lab included, as it is from the start without job control (`setsid`).
            .process_group(0)
            .spawn()?;
        // Heard from at birth: one that never says anything is reported as silent.
        lock(&self.shared).last_heard.insert(w, now_ns());
        let stdin = child.stdin.take().ok_or("worker without stdin")?;
        let stdout = child.stdout.take().ok_or("worker without stdout")?;
        let stderr = child.stderr.take().ok_or("worker without stderr")?;
        let shared = self.shared.clone();
        let out = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(event) = serde_json::from_str::<Event>(&line) else {
                    lock(&shared)
                        .record
                        .stderr
                        .push(format!("worker {w}: {line}"));
                    continue;
                };
                let mut s = lock(&shared);
                // An observer's report says nothing of the worker's loop being alive.
                if !matches!(event, Event::Observed { .. }) {
                    s.last_heard.insert(w, now_ns());
                }
                match &event {
                    Event::Acquired { key, .. } => {
                        s.holding.insert(w, (*key, event.clone()));
                    }
                    Event::Section(_) | Event::AcquireFailed { .. } => {
                        s.holding.remove(&w);
                        s.lingering.remove(&w);
                    }
                    Event::Lingering { pid, .. } => {
                        s.lingering.insert(w, *pid);
                    }
                    Event::Ready { .. } | Event::Observed { .. } => {}
                }
                s.record.events.push(event);
            }
        });
        let shared = self.shared.clone();
        let err = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut s = lock(&shared);
                if line.contains("panicked") {
                    s.record.panics += 1;
                }
                if s.record.stderr.len() < 40 {
                    s.record.stderr.push(format!("worker {w}: {line}"));
                }
            }
        });
        Ok(WorkerProc {
            child,
            stdin,
            readers: vec![out, err],
        })
    }

    async fn wait_ready(&self) -> Result<(), LabError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ready = lock(&self.shared)
                .record
                .events
                .iter()
                .filter(|e| matches!(e, Event::Ready { .. }))
                .count();
            if ready >= self.plan.workers as usize {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("{ready} of {} workers connected", self.plan.workers).into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Runs the schedule: quiet, fault, heal, again, until the plan's duration is over; then
    /// a quiet spell to see every fault recovered, and the workers are stopped.
    ///
    /// # Errors
    ///
    /// When a server cannot be restarted or the store cannot be read.
    pub async fn run(mut self) -> Result<Record, LabError> {
        let end = now_ns() + nanos(self.plan.duration);
        let ttl = self.plan.ttl;
        let mut turn = 0usize;
        // In turn, every kind at least once, however short the run.
        while now_ns() < end || (!self.plan.mixed && turn < self.plan.nemeses.len()) {
            let quiet = ttl + ttl.mul_f64(self.rng.below(100) as f64 / 100.0);
            self.watch(quiet).await;
            if self.plan.nemeses.is_empty() {
                continue;
            }
            let pick = if self.plan.mixed {
                self.rng.below(self.plan.nemeses.len() as u64) as usize
            } else {
                turn % self.plan.nemeses.len()
            };
            turn += 1;
            if let Some(fault) = self.inject(self.plan.nemeses[pick]).await? {
                lock(&self.shared).record.faults.push(fault);
            }
        }
        self.watch(ttl * 6).await;
        self.stop().await
    }

    /// Waits `d`, checking that no worker went silent while not frozen.
    async fn watch(&mut self, d: Duration) {
        let until = now_ns() + nanos(d);
        let bound = nanos(self.call_bound()) + 2_000_000_000;
        while now_ns() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = now_ns();
            let mut s = lock(&self.shared);
            let silent: Vec<u32> = s
                .last_heard
                .iter()
                .filter(|&(_, &t)| now.saturating_sub(t) > bound)
                .map(|(&w, _)| w)
                .collect();
            for w in silent {
                s.record.silent += 1;
                s.record
                    .stderr
                    .push(format!("worker {w} silent for over {bound} ns"));
                s.last_heard.insert(w, now);
            }
        }
    }

    /// The longest any one critical section may take, frozen time aside.
    pub fn call_bound(&self) -> Duration {
        self.plan.wait + self.plan.timeout * 12 + Duration::from_secs(1)
    }

    /// A worker stopped mid-section, holding its lease: a random worker is asked to linger
    /// at its next section (after its lost-signal check, or before it, in turn), and this
    /// waits until it does. Falls back to any worker if none arrives in time.
    async fn holder(&mut self) -> Option<(u32, Option<Pid>)> {
        let w = self.rng.below(u64::from(self.plan.workers)) as u32;
        // In turn, starting with the worst case: after the check, between read and write.
        self.lingers += 1;
        let point = if self.lingers % 2 == 1 {
            "linger-after-check"
        } else {
            "linger-before-check"
        };
        let linger = millis(self.plan.ttl.mul_f64(0.75));
        // A late answer to an earlier, withdrawn request must not count for this one.
        lock(&self.shared).lingering.remove(&w);
        self.tell(w, &format!("{point} {linger}")).await;
        let holder = self.await_lingering(w).await?;
        Some((w, holder.or_else(|| self.pid(w))))
    }

    /// Waits until worker `w` says it stopped mid-section: `Some` with the process holding
    /// the lease when it is not the worker, `None` when no grant came within a few acquire
    /// waits (the fault is then skipped, never aimed at a worker that holds nothing).
    async fn await_lingering(&mut self, w: u32) -> Option<Option<Pid>> {
        let deadline = now_ns() + nanos(self.plan.wait) * 3;
        while now_ns() < deadline {
            if let Some(pid) = lock(&self.shared).lingering.remove(&w) {
                return Some(pid.and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Withdraw the request, so that it does not fire later, unwatched.
        self.tell(w, "linger-after-check 0").await;
        None
    }

    /// The lock servers a server fault strikes: the one, or a majority of Redlock's masters.
    fn server_targets(&mut self) -> Vec<usize> {
        let n = self.servers.len();
        let first = self.rng.below(n as u64) as usize;
        (0..n / 2 + 1).map(|i| (first + i) % n).collect()
    }

    /// Injects one fault and heals it; `None` when a holder fault found no holder.
    async fn inject(&mut self, kind: Nemesis) -> Result<Option<Fault>, LabError> {
        let ttl = self.plan.ttl;
        let long = ttl.mul_f64(2.5);
        let mut start = now_ns();
        let mut struck = None;
        let mut evicted = None;
        let target = match kind {
            Nemesis::PauseHolder => {
                let Some((w, pid)) = self.holder().await else {
                    return Ok(None);
                };
                struck = self.held_by(w);
                start = now_ns();
                if let Some(pid) = pid {
                    let _ = kill(pid, Signal::SIGSTOP);
                    tokio::time::sleep(long).await;
                    let _ = kill(pid, Signal::SIGCONT);
                }
                lock(&self.shared).record.frozen.push((w, start, now_ns()));
                format!("worker {w}")
            }
            Nemesis::StarveRenewal => {
                // The worker starves itself inside its next section, right after its grant.
                let w = self.rng.below(u64::from(self.plan.workers)) as u32;
                self.tell(w, &format!("starve {}", millis(long))).await;
                if self.await_lingering(w).await.is_none() {
                    self.tell(w, "starve 0").await;
                    return Ok(None);
                }
                struck = self.held_by(w);
                start = now_ns();
                tokio::time::sleep(long).await;
                format!("worker {w}")
            }
            Nemesis::KillHolder => {
                let Some((w, pid)) = self.holder().await else {
                    return Ok(None);
                };
                struck = self.held_by(w);
                start = now_ns();
                if self.plan.workload == Workload::Run {
                    // The holder is the worker's `fenced run`: kill it, and only it.
                    if let Some(pid) = pid {
                        let _ = kill(pid, Signal::SIGKILL);
                    }
                } else {
                    self.kill_and_replace(w).await?;
                }
                format!("worker {w}")
            }
            Nemesis::PauseRedis => {
                let targets = self.server_targets();
                for &i in &targets {
                    self.servers[i].pause()?;
                }
                tokio::time::sleep(ttl.mul_f64(1.5)).await;
                for &i in &targets {
                    self.servers[i].resume()?;
                }
                servers_label(&targets)
            }
            Nemesis::RestartRedis | Nemesis::RestartRedisDelayed => {
                let targets = self.server_targets();
                for &i in &targets {
                    self.servers[i].kill()?;
                }
                if kind == Nemesis::RestartRedisDelayed {
                    tokio::time::sleep(ttl.mul_f64(1.5)).await;
                }
                for &i in &targets {
                    self.servers[i].restart()?;
                }
                servers_label(&targets)
            }
            Nemesis::RestoreRedis => {
                let targets = self.server_targets();
                let how = Restore::nth(self.restores);
                self.restores += 1;
                let mut kept = Vec::new();
                for &i in &targets {
                    kept.push(restore::keep(&self.servers[i].url(), how).await?);
                }
                // Grants go on, and raise the fences past the kept ones.
                tokio::time::sleep(ttl).await;
                if how == Restore::Restart {
                    for &i in &targets {
                        self.servers[i].kill()?;
                    }
                }
                for (&i, kept) in targets.iter().zip(kept) {
                    let url = self.servers[i].url();
                    if how == Restore::Restart {
                        // Starts from the snapshot in its directory, then forgets it.
                        self.servers[i].restart()?;
                        restore::forget_snapshot(&url).await?;
                    } else {
                        restore::put_back(&url, kept, how).await?;
                    }
                }
                format!("{} by {}", servers_label(&targets), how.name())
            }
            Nemesis::Partition => {
                let Some((w, _)) = self.holder().await else {
                    return Ok(None);
                };
                struck = self.held_by(w);
                start = now_ns();
                self.set_proxies(Some(w), ProxyFault::Blackhole);
                tokio::time::sleep(long).await;
                self.set_proxies(Some(w), ProxyFault::Pass);
                format!("worker {w}")
            }
            Nemesis::Latency => {
                self.set_proxies(None, ProxyFault::DelayReplies(ttl / 8));
                tokio::time::sleep(ttl * 3).await;
                self.set_proxies(None, ProxyFault::Pass);
                "every link".to_owned()
            }
            Nemesis::Reset => {
                for _ in 0..5 {
                    self.set_proxies(None, ProxyFault::CutNextReply);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                self.set_proxies(None, ProxyFault::Pass);
                "every link".to_owned()
            }
            Nemesis::ClockStep => {
                let targets = self.server_targets();
                for &i in &targets {
                    step_clock(&self.servers[i].url()).await?;
                }
                servers_label(&targets)
            }
            Nemesis::Evict | Nemesis::EvictFences => {
                let targets = self.server_targets();
                let policy = if kind == Nemesis::Evict {
                    Policy::Ttl
                } else {
                    Policy::Random
                };
                let urls: Vec<String> = targets.iter().map(|&i| self.servers[i].url()).collect();
                evicted = Some(evict::run(&urls, policy, ttl * 3).await?);
                format!("{} under {}", servers_label(&targets), policy.name())
            }
        };
        Ok(Some(Fault {
            kind,
            target,
            start,
            end: now_ns(),
            holder: struck,
            evicted,
        }))
    }

    fn held_by(&self, w: u32) -> Option<(u32, u32)> {
        lock(&self.shared).holding.get(&w).map(|(key, _)| (w, *key))
    }

    fn pid(&self, w: u32) -> Option<Pid> {
        let proc = self.workers.get(w as usize)?.as_ref()?;
        Some(Pid::from_raw(i32::try_from(proc.child.id()?).ok()?))
    }

    async fn tell(&mut self, w: u32, line: &str) {
        if let Some(Some(proc)) = self.workers.get_mut(w as usize) {
            let _ = proc.stdin.write_all(format!("{line}\n").as_bytes()).await;
            let _ = proc.stdin.flush().await;
        }
    }

    fn set_proxies(&self, worker: Option<u32>, fault: ProxyFault) {
        for (w, mine) in self.proxies.iter().enumerate() {
            if worker.is_none_or(|x| x as usize == w) {
                for p in mine {
                    p.set(fault);
                }
            }
        }
    }

    /// SIGKILLs worker `w`, records what it held as a section cut short (its write's fate
    /// unknown), and starts a new worker with the same id.
    async fn kill_and_replace(&mut self, w: u32) -> Result<(), LabError> {
        let Some(Some(mut proc)) = self.workers.get_mut(w as usize).map(Option::take) else {
            return Ok(());
        };
        let start = now_ns();
        let _ = proc.child.kill().await;
        let died = now_ns();
        // Read what it printed before dying, so the cut-short section is not doubled.
        for reader in proc.readers.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        {
            let mut s = lock(&self.shared);
            if let Some((
                key,
                Event::Acquired {
                    t, inv, ok, writer, ..
                },
            )) = s.holding.remove(&w)
            {
                let workload = self.plan.workload;
                let write = if workload.counts() && (workload != Workload::Rw || writer) {
                    Write::Indeterminate
                } else {
                    Write::None
                };
                s.record.events.push(Event::Section(Section {
                    w,
                    key,
                    t,
                    inv,
                    ok,
                    write,
                    value: None,
                    rel_inv: died,
                    rel_end: died,
                    release: "killed".to_owned(),
                    stalled: 0,
                    writer,
                }));
            }
            s.last_heard.remove(&w);
            s.lingering.remove(&w);
        }
        let proc = self.spawn(w)?;
        self.workers[w as usize] = Some(proc);
        lock(&self.shared).record.frozen.push((w, start, now_ns()));
        Ok(())
    }

    /// Tells every worker to stop, waits for them, and reads the final counters.
    async fn stop(mut self) -> Result<Record, LabError> {
        for w in 0..self.plan.workers {
            self.tell(w, "stop").await;
        }
        let mut crashes = 0;
        for proc in self.workers.iter_mut().flatten() {
            match tokio::time::timeout(Duration::from_secs(15), proc.child.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                _ => {
                    crashes += 1;
                    let _ = proc.child.kill().await;
                }
            }
            for reader in proc.readers.drain(..) {
                let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
            }
        }
        let counters = self.read_counters().await?;
        let mut run_files = HashMap::new();
        for key in 0..self.plan.keys {
            if let Ok(text) = std::fs::read_to_string(self.run_dir.path().join(key.to_string())) {
                run_files.insert(key, text);
            }
        }
        let mut s = lock(&self.shared);
        s.record.crashes += crashes;
        s.record.counters = counters;
        s.record.run_files = run_files;
        Ok(std::mem::take(&mut s.record))
    }

    async fn read_counters(&self) -> Result<HashMap<u32, i64>, LabError> {
        let workload = self.plan.workload;
        let mut out = HashMap::new();
        if !workload.counts() {
            return Ok(out);
        }
        let (url, fenced_store) = match workload {
            Workload::Optimistic => (self.servers[0].url(), false),
            _ => (self.store.url(), workload.fenced()),
        };
        let client = fenced::Client::connect(&url).await?;
        let mut conn = connection(&url).await?;
        for key in 0..self.plan.keys {
            let counter = workload.counter(key);
            let raw: Option<Vec<u8>> = if fenced_store {
                client.resource(counter).get("n").await?
            } else {
                bounded(redis::cmd("GET").arg(&counter).query_async(&mut conn)).await?
            };
            let n = raw
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            out.insert(key, n);
        }
        Ok(out)
    }
}

fn servers_label(targets: &[usize]) -> String {
    let list: Vec<String> = targets.iter().map(ToString::to_string).collect();
    format!("server {}", list.join(","))
}

/// The simulated clock step: every lease on this server ends now.
async fn step_clock(url: &str) -> Result<(), LabError> {
    let mut conn = connection(url).await?;
    let keys: Vec<String> = bounded(
        redis::cmd("KEYS")
            .arg("fenced:{chaos:*")
            .query_async(&mut conn),
    )
    .await?;
    for key in keys {
        if key.ends_with('}') || key.ends_with("}:holds") {
            let _: i64 = bounded(
                redis::cmd("PEXPIRE")
                    .arg(&key)
                    .arg(1)
                    .query_async(&mut conn),
            )
            .await?;
        } else if key.ends_with("}:permits") || key.ends_with("}:readers") {
            let holders: Vec<String> = bounded(
                redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn),
            )
            .await?;
            for holder in holders {
                let _: i64 = bounded(
                    redis::cmd("ZADD")
                        .arg(&key)
                        .arg("XX")
                        .arg(0)
                        .arg(holder)
                        .query_async(&mut conn),
                )
                .await?;
            }
        }
    }
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
