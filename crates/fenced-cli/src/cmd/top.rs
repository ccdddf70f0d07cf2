//! `fenced top`: a live view of every lock, semaphore, read-write lock, fair queue and latch of
//! the namespace, with holders, ttl left, waiters, and grants per second with their trend.
//!
//! Grants per second. With keyspace notifications on (`notify-keyspace-events` containing `K`
//! and `$` or `A`), each grant of a lock is one `set` event on its key (`<ns>{name}`: a grant
//! sets it, a renewal only re-times it), and the rate is exact. Otherwise the view compares
//! each name between two refreshes: a semaphore's fence that moved, or a lock whose fence
//! moved and whose holder changed, means at least one grant (a lock's fence alone also counts
//! refused attempts, since grants count with `INCR`), so the rate shown is a lower bound,
//! marked `≥`.
//!
//! The collecting ([`Tracker::refresh`]) and the drawing ([`draw`]) are separate from the
//! terminal, so a test can draw one frame against a live server into a buffer.

use std::collections::{HashMap, VecDeque};
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use tokio::time::Instant;

use crate::args::Global;
use crate::cmd::{address, check_url, connect};
use crate::exit::{self, Failure, show};

/// Refreshes kept for the trend column.
const TREND: usize = 24;

/// Grants counted from keyspace events, per name, since the last refresh; `live` turns false
/// when the event stream ends (a restart, a dropped connection), and the view falls back to
/// sampling.
#[derive(Default)]
pub struct Events {
    counts: Mutex<HashMap<String, u64>>,
    live: std::sync::atomic::AtomicBool,
}

impl Events {
    fn live(&self) -> bool {
        self.live.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[cfg(test)]
    fn count(&self, name: &str) -> u64 {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(name).copied().unwrap_or(0)
    }
}

/// One line of the view.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub kind: &'static str,
    pub name: String,
    pub holder: String,
    pub ttl_left: String,
    pub waiting: String,
    /// Grants per second over the last refresh, if the name granted within the retention.
    pub rate: Option<f64>,
    pub trend: String,
}

/// What one refresh found.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub entries: Vec<Entry>,
    /// Rates counted from keyspace events (exact), or from token changes (lower bounds).
    pub exact_rates: bool,
    /// The last refresh's error, shown in the status line; the view keeps going.
    pub error: Option<String>,
    pub held: usize,
    pub waiting: u64,
}

/// Keeps what rates and trends need between refreshes.
pub struct Tracker {
    client: fenced::Client,
    pattern: String,
    last_tokens: HashMap<String, u64>,
    /// Each lock's holder (owner prefix) at the last refresh.
    last_holders: HashMap<String, Option<String>>,
    last_at: Option<Instant>,
    history: HashMap<String, VecDeque<f64>>,
    /// Grants seen per name since the last refresh, from keyspace events.
    events: Option<Arc<Events>>,
}

impl Tracker {
    pub fn new(client: fenced::Client, pattern: &str) -> Self {
        Tracker {
            client,
            pattern: pattern.to_owned(),
            last_tokens: HashMap::new(),
            last_holders: HashMap::new(),
            last_at: None,
            history: HashMap::new(),
            events: None,
        }
    }

    /// Counts grants from keyspace events from now on.
    pub fn count_events(&mut self, events: Arc<Events>) {
        self.events = Some(events);
    }

    /// Reads everything once and updates the rates.
    pub async fn refresh(&mut self) -> Result<Snapshot, fenced::Error> {
        if self.events.as_ref().is_some_and(|e| !e.live()) {
            self.events = None; // the stream ended: sample from here on
        }
        let c = &self.client;
        let p = self.pattern.as_str();
        let listing = c.list(p).await?;
        let (locks, semaphores, rw, queues, latches, elections, grants) = (
            listing.locks,
            listing.semaphores,
            listing.rw_locks,
            listing.fair_queues,
            listing.latches,
            listing.elections,
            listing.grants,
        );

        let now = Instant::now();
        let elapsed = self.last_at.map(|at| now.duration_since(at).as_secs_f64());
        self.last_at = Some(now);
        let counted = self.events.as_ref().map(|events| {
            let mut counts = events.counts.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *counts)
        });
        let mut rates = HashMap::new();
        let holders: HashMap<&str, Option<&str>> = locks
            .iter()
            .map(|l| {
                let holder = l.holder.as_ref().map(|h| h.owner_prefix.as_str());
                (l.name.as_str(), holder)
            })
            .collect();
        for g in &grants {
            let token = g.fence.get();
            let previous = self.last_tokens.insert(g.name.clone(), token);
            let holder = holders.get(g.name.as_str()).copied().flatten();
            let held_before = self
                .last_holders
                .insert(g.name.clone(), holder.map(str::to_owned));
            let Some(secs) = elapsed.filter(|s| *s > 0.0) else {
                continue;
            };
            let moved = previous.is_none_or(|p| p != token);
            let grants_seen = match &counted {
                Some(counts) => counts.get(&g.name).copied().unwrap_or(0),
                // A name new since the last refresh was granted at least once. A lock's fence
                // also moves with refused attempts: it counts with a new holder only.
                None if g.semaphore => u64::from(moved),
                None => {
                    u64::from(moved && held_before.is_none_or(|before| before.as_deref() != holder))
                }
            };
            rates.insert(g.name.clone(), grants_seen as f64 / secs);
        }
        self.last_tokens
            .retain(|name, _| grants.iter().any(|g| &g.name == name));
        self.last_holders
            .retain(|name, _| grants.iter().any(|g| &g.name == name));

        let mut entries = Vec::new();
        let mut listed = std::collections::HashSet::new();
        let mut waiting_total = 0;
        for l in &locks {
            let (holder, ttl) = match &l.holder {
                Some(h) => (
                    h.owner_prefix.clone(),
                    h.ttl_left.map_or("none".into(), show),
                ),
                None => ("-".into(), "-".into()),
            };
            let holder = if l.holds > 1 {
                format!("{holder} ×{}", l.holds)
            } else {
                holder
            };
            waiting_total += l.waiting_clients;
            listed.insert(l.name.clone());
            entries.push(entry(
                "lock",
                &l.name,
                holder,
                ttl,
                l.waiting_clients.to_string(),
            ));
        }
        for s in &semaphores {
            listed.insert(s.name.clone());
            entries.push(entry(
                "semaphore",
                &s.name,
                format!("{} permit(s), {} holder(s)", s.held, s.holders),
                s.next_expiry.map_or("-".into(), show),
                "-".into(),
            ));
        }
        for r in &rw {
            listed.insert(r.name.clone());
            waiting_total += r.waiting_writers;
            entries.push(entry(
                "rw_lock",
                &r.name,
                format!("{} readers", r.readers),
                "-".into(),
                format!("{} writers", r.waiting_writers),
            ));
        }
        for q in &queues {
            listed.insert(q.name.clone());
            waiting_total += q.queued;
            entries.push(entry(
                "fair_queue",
                &q.name,
                "-".into(),
                "-".into(),
                format!("{} queued", q.queued),
            ));
        }
        for e in &elections {
            waiting_total += e.status.candidates;
            let (leader, left) = match &e.status.leader {
                Some(l) => (format!("{:?} term {}", l.value, l.term), show(l.lease_left)),
                None => ("-".into(), "-".into()),
            };
            entries.push(entry(
                "election",
                &e.name,
                leader,
                left,
                format!("{} candidates", e.status.candidates),
            ));
        }
        for l in &latches {
            entries.push(entry(
                "latch",
                &l.name,
                if l.count == 0 {
                    "open".into()
                } else {
                    format!("{} left", l.count)
                },
                "-".into(),
                "-".into(),
            ));
        }
        // Trends per granting name, whether it is held now or not.
        for (name, rate) in &rates {
            let h = self.history.entry(name.clone()).or_default();
            if h.len() == TREND {
                h.pop_front();
            }
            h.push_back(*rate);
        }
        self.history.retain(|name, _| rates.contains_key(name));
        // Names granted within the trend's window but free now: shown as free locks.
        for g in &grants {
            let busy = self
                .history
                .get(&g.name)
                .is_some_and(|h| h.iter().any(|r| *r > 0.0));
            if busy && !listed.contains(&g.name) {
                entries.push(entry(
                    "lock",
                    &g.name,
                    "free".into(),
                    "-".into(),
                    "0".into(),
                ));
            }
        }
        for e in &mut entries {
            e.rate = rates.get(&e.name).copied();
            if let Some(h) = self.history.get(&e.name) {
                e.trend = sparkline(h);
            }
        }
        // Busiest first, then by name.
        entries.sort_by(|a, b| {
            b.rate
                .unwrap_or(0.0)
                .total_cmp(&a.rate.unwrap_or(0.0))
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.kind.cmp(b.kind))
        });
        Ok(Snapshot {
            held: locks.iter().filter(|l| l.holder.is_some()).count(),
            waiting: waiting_total,
            entries,
            exact_rates: self.events.is_some(),
            error: None,
        })
    }
}

fn entry(
    kind: &'static str,
    name: &str,
    holder: String,
    ttl_left: String,
    waiting: String,
) -> Entry {
    Entry {
        kind,
        name: name.to_owned(),
        holder,
        ttl_left,
        waiting,
        rate: None,
        trend: String::new(),
    }
}

/// Eight levels of block characters, scaled to the largest value shown.
fn sparkline(values: &VecDeque<f64>) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().fold(0.0_f64, f64::max);
    values
        .iter()
        .map(|v| {
            if max <= 0.0 {
                BARS[0]
            } else {
                BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

/// Draws one frame: a title line, the table, and the key help.
pub fn draw(frame: &mut Frame, snapshot: &Snapshot, server: &str, table: &mut TableState) {
    let [title, body, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    // The hint goes on the bottom line, on its own: the title's counts would push it past a
    // narrow terminal's edge.
    let rates = if snapshot.exact_rates {
        "GRANTS/S exact (keyspace events)"
    } else {
        "GRANTS/S ≥ lower bounds (CONFIG SET notify-keyspace-events K$ for exact)"
    };
    let status = match &snapshot.error {
        Some(e) => format!("fenced top · {server} · error: {e}"),
        None => format!(
            "fenced top · {server} · {} entries · {} held · {} waiting",
            snapshot.entries.len(),
            snapshot.held,
            snapshot.waiting
        ),
    };
    frame.render_widget(
        Paragraph::new(Line::from(status)).style(Style::new().add_modifier(Modifier::BOLD)),
        title,
    );
    let marker = if snapshot.exact_rates { "" } else { "≥" };
    let rows = snapshot.entries.iter().map(|e| {
        Row::new([
            Cell::from(e.kind),
            Cell::from(e.name.as_str()),
            Cell::from(e.holder.as_str()),
            Cell::from(e.ttl_left.as_str()),
            Cell::from(e.waiting.as_str()),
            Cell::from(e.rate.map_or("-".into(), |r| format!("{marker}{r:.1}"))),
            Cell::from(e.trend.as_str()),
        ])
    });
    let widths = [
        Constraint::Length(10),
        Constraint::Fill(1),
        Constraint::Min(31), // an election's `"value" term` and a 16-digit token
        Constraint::Length(9),
        Constraint::Length(11),
        Constraint::Length(9),
        Constraint::Length(TREND as u16),
    ];
    let header = Row::new([
        "KIND", "NAME", "HOLDER", "TTL LEFT", "WAITING", "GRANTS/S", "TREND",
    ])
    .style(Style::new().add_modifier(Modifier::REVERSED));
    let empty = snapshot.entries.is_empty();
    let table_widget = Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(if empty {
            " nothing held, queued or counting "
        } else {
            " locks "
        }))
        .row_highlight_style(Style::new().add_modifier(Modifier::BOLD));
    frame.render_stateful_widget(table_widget, body, table);
    frame.render_widget(
        Paragraph::new(format!("q quit · ↑/↓ scroll · {rates}")),
        help,
    );
}

/// Subscribes to the lock keys' keyspace events if the server sends them; the counts of
/// grants per name land in the returned map.
async fn subscribe_events(global: &Global) -> Option<Arc<Events>> {
    // Keyspace events are each node's own: on a cluster (or several masters) one node's
    // count would pass for the whole. The token changes give lower bounds there.
    if !global.cluster.is_empty() || !global.sentinel.is_empty() || global.redis.len() > 1 {
        return None;
    }
    let url = global.redis_url();
    let mut info = redis::IntoConnectionInfo::into_connection_info(url).ok()?;
    if let Ok(Some(password)) = crate::cmd::password(global) {
        let settings = info.redis_settings().clone().set_password(password);
        info = info.set_redis_settings(settings);
    }
    let client = redis::Client::open(info).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let config: Vec<String> = tokio::time::timeout(
        global.timeout,
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("notify-keyspace-events")
            .query_async(&mut conn),
    )
    .await
    .ok()?
    .ok()?;
    let flags = config.get(1)?;
    if !(flags.contains('K') && (flags.contains('$') || flags.contains('A'))) {
        return None;
    }
    let ns = &global.namespace;
    let escaped: String = ns
        .chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    let mut pubsub = tokio::time::timeout(global.timeout, client.get_async_pubsub())
        .await
        .ok()?
        .ok()?;
    let channel_prefix = "__keyspace@";
    pubsub
        .psubscribe(format!("{channel_prefix}*__:{escaped}{{*}}"))
        .await
        .ok()?;
    let events = Arc::new(Events::default());
    events
        .live
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let sink = events.clone();
    let ns = ns.clone();
    tokio::spawn(async move {
        let mut messages = pubsub.into_on_message();
        while let Some(msg) = messages.next().await {
            let event: String = msg.get_payload().unwrap_or_default();
            if event != "set" {
                continue;
            }
            let channel = msg.get_channel_name();
            let name = channel
                .split_once("__:")
                .map(|(_, key)| key)
                .and_then(|k| k.strip_prefix(ns.as_str()))
                .and_then(|k| k.strip_prefix('{'))
                .and_then(|k| k.strip_suffix('}'));
            if let Some(name) = name {
                let mut counts = sink.counts.lock().unwrap_or_else(|e| e.into_inner());
                *counts.entry(name.to_owned()).or_insert(0) += 1;
            }
        }
        sink.live.store(false, std::sync::atomic::Ordering::Relaxed);
    });
    Some(events)
}

pub async fn top(global: &Global, pattern: &str, interval: Duration) -> Result<u8, Failure> {
    check_url(global.redis_url())?;
    if interval < Duration::from_millis(100) {
        return Err(Failure::usage(format!(
            "--interval {} is too short; at least 100ms",
            show(interval)
        )));
    }
    if !std::io::stdout().is_terminal() {
        return Err(Failure::usage(
            "fenced top needs a terminal; in scripts use `fenced list` or `fenced --json list`",
        ));
    }
    let client = connect(global).await?;
    let server = address(global.redis_url());
    let mut tracker = Tracker::new(client, pattern);
    if let Some(counts) = subscribe_events(global).await {
        tracker.count_events(counts);
    }
    let first = tracker
        .refresh()
        .await
        .map_err(|e| Failure::from_lib(e, &server))?;

    // Refreshes run on a task of their own, so keys are answered at once even while Redis is
    // slow or down (each refresh can take up to a few timeouts then).
    let (snapshots_tx, mut snapshots) = tokio::sync::watch::channel(first);
    let refresher = tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let next = match tracker.refresh().await {
                Ok(s) => s,
                Err(e) => Snapshot {
                    error: Some(e.to_string()),
                    ..snapshots_tx.borrow().clone()
                },
            };
            if snapshots_tx.send(next).is_err() {
                return;
            }
        }
    });

    let mut terminal = ratatui::try_init()
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot use the terminal: {e}")))?;
    // Terminal events come from a blocking reader thread, started once the terminal is in raw
    // mode; it ends soon after the receiver is dropped.
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use ratatui::crossterm::event;
        loop {
            match event::poll(Duration::from_millis(50)) {
                Ok(true) => match event::read() {
                    Ok(e) => {
                        if events_tx.send(e).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
                Ok(false) if events_tx.is_closed() => return,
                Ok(false) => {}
                Err(_) => return,
            }
        }
    });
    let mut table = TableState::default();
    let outcome = loop {
        let snapshot = snapshots.borrow_and_update().clone();
        if let Err(e) = terminal.draw(|f| draw(f, &snapshot, &server, &mut table)) {
            break Err(Failure::new(exit::SOFTWARE, format!("cannot draw: {e}")));
        }
        tokio::select! {
            changed = snapshots.changed() => {
                if changed.is_err() {
                    break Err(Failure::new(exit::SOFTWARE, "the refresh task stopped"));
                }
            }
            event = events.recv() => {
                use ratatui::crossterm::event::{Event, KeyCode, KeyEventKind, KeyModifiers};
                let Some(event) = event else { break Ok(exit::OK) };
                let Event::Key(key) = event else {
                    continue; // a resize: redraw
                };
                if key.kind != KeyEventKind::Press {
                    continue;
                }
                match key.code {
                    KeyCode::Char('q') | KeyCode::Esc => break Ok(exit::OK),
                    KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                        break Ok(exit::OK)
                    }
                    KeyCode::Down | KeyCode::Char('j') => table.select_next(),
                    KeyCode::Up | KeyCode::Char('k') => table.select_previous(),
                    _ => {}
                }
            }
        }
    };
    drop(events);
    refresher.abort();
    ratatui::restore();
    outcome
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::widgets::TableState;

    use super::{Tracker, draw};

    /// Takes and gives back the lock `name` `times` times: that many grants.
    async fn grant(client: &fenced::Client, name: &str, times: usize) {
        for _ in 0..times {
            let guard = client.lock(name).acquire().await.unwrap();
            guard.release().await.unwrap();
        }
    }

    #[test]
    fn sparklines_scale_to_the_largest_value() {
        let values = [0.0, 5.0, 10.0].into_iter().collect();
        assert_eq!(super::sparkline(&values), "▁▅█");
        let idle = [0.0, 0.0].into_iter().collect();
        assert_eq!(super::sparkline(&idle), "▁▁");
    }

    /// With keyspace events on, each grant of a name is counted once.
    #[tokio::test]
    async fn keyspace_events_count_every_grant() {
        use clap::Parser;
        let server = fenced_testkit::RedisServer::start().expect("this test needs redis-server");
        let url = server.url();
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let cli = crate::args::Cli::parse_from(["fenced", "--redis", &url, "top"]);
        assert!(
            super::subscribe_events(&cli.global).await.is_none(),
            "events are off by default"
        );
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg("K$")
            .query_async(&mut conn)
            .await
            .unwrap();
        let events = super::subscribe_events(&cli.global)
            .await
            .expect("events are on");
        let client = fenced::Client::connect(&url).await.unwrap();
        let mut tracker = Tracker::new(client.clone(), "*");
        tracker.count_events(events.clone());
        tracker.refresh().await.unwrap();
        grant(&client, "jobs:busy", 5).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while events.count("jobs:busy") < 5 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "events did not arrive"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(events.count("jobs:busy"), 5);
        let snapshot = tracker.refresh().await.unwrap();
        assert!(snapshot.exact_rates);
        let busy = snapshot
            .entries
            .iter()
            .find(|e| e.name == "jobs:busy")
            .unwrap();
        assert!(busy.rate.unwrap() > 0.0, "{busy:?}");
        // The server goes away: the event stream ends, and the view falls back to sampling.
        drop(server);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while events.live() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the stream did not end"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(tracker.refresh().await.is_err());
        assert!(
            tracker.events.is_none(),
            "still counting from a dead stream"
        );
    }

    /// One frame against a live server: a held lock with a waiter, a busy lock, a semaphore,
    /// a latch and an election, drawn into a buffer.
    #[tokio::test]
    async fn one_frame_shows_holders_waiters_and_grant_rates() {
        let server = fenced_testkit::RedisServer::start().expect("this test needs redis-server");
        let client = fenced::Client::connect(&server.url()).await.unwrap();
        let held = client
            .lock("deploy:web")
            .with_ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let waiter = tokio::spawn({
            let lock = client.lock("deploy:web");
            async move { lock.acquire().await }
        });
        let permits = client.semaphore("crawlers", 4).acquire().await.unwrap();
        assert!(client.latch("shards-ready").arm(3).await.unwrap());
        let leading = client
            .election("scheduler")
            .campaign("host-a")
            .await
            .unwrap();
        let mut tracker = Tracker::new(client.clone(), "*");
        // The waiter is registered once its subscription shows in the status.
        while tracker
            .refresh()
            .await
            .unwrap()
            .entries
            .iter()
            .find(|e| e.name == "deploy:web")
            .is_none_or(|e| e.waiting != "1")
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Grants between two refreshes show as a rate.
        grant(&client, "jobs:busy", 3).await;
        let snapshot = tracker.refresh().await.unwrap();
        // 130 columns: the hint on how to get exact rates is whole there too.
        let mut terminal = Terminal::new(TestBackend::new(130, 12)).unwrap();
        terminal
            .draw(|f| draw(f, &snapshot, "127.0.0.1:6379", &mut TableState::default()))
            .unwrap();
        let text: String = terminal
            .backend()
            .buffer()
            .content()
            .chunks(130)
            .map(|line| line.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        assert!(text.contains("fenced top · 127.0.0.1:6379"), "{text}");
        assert!(text.contains("KIND") && text.contains("GRANTS/S"), "{text}");
        assert!(
            text.contains("(CONFIG SET notify-keyspace-events K$ for exact)"),
            "{text}"
        );
        let line = |name: &str| {
            text.lines()
                .find(|l| l.contains(name))
                .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
                .to_owned()
        };
        let deploy = line("deploy:web");
        assert!(deploy.starts_with("│lock"), "{deploy}");
        assert!(deploy.contains(" 1 "), "one waiter: {deploy}");
        assert!(line("jobs:busy").contains("free"), "{text}");
        assert!(line("jobs:busy").contains('≥'), "a sampled rate: {text}");
        assert!(
            line("crawlers").contains("1 permit(s), 1 holder(s)"),
            "{text}"
        );
        assert!(line("shards-ready").contains("3 left"), "{text}");
        let scheduler = line("scheduler");
        assert!(scheduler.starts_with("│election"), "{scheduler}");
        assert!(
            scheduler.contains(&format!("\"host-a\" term {}", leading.term())),
            "{scheduler}"
        );
        leading.resign().await.unwrap();
        waiter.abort();
        permits.release().await.unwrap();
        held.release().await.unwrap();
    }
}
