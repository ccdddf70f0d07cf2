//! Results: one row per (scenario, library), printed as a table and written as JSON.

use serde::{Deserialize, Serialize};

/// One measured (scenario, library) pair. Fields that do not apply to a scenario are absent
/// from the JSON.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Row {
    /// Scenario name, e.g. `uncontended-1`.
    pub scenario: String,
    /// Library name, e.g. `fenced`.
    pub library: String,
    /// Completed operations per second (median of the runs): lock cycles, acquisitions,
    /// purchase attempts or counter changes, as the scenario says.
    pub ops_per_sec: f64,
    /// Slowest run's ops/s.
    pub ops_per_sec_min: f64,
    /// Fastest run's ops/s.
    pub ops_per_sec_max: f64,
    /// How many runs the median is taken from.
    pub runs: usize,
    /// Median latency of one operation (for contended scenarios: of one wait for the lock), µs.
    pub p50_us: f64,
    /// 99th percentile of the same, µs.
    pub p99_us: f64,
    /// Mutual-exclusion violations, or (seckill) items sold beyond the stock; must be 0.
    pub violations: u64,
    /// Redis commands per operation (`total_commands_processed` delta; commands inside scripts
    /// count too).
    pub redis_cmds_per_op: f64,
    /// Client CPU (user + sys of the whole process, getrusage) per operation, µs.
    pub client_cpu_us_per_op: f64,
    /// Server CPU per operation, µs: the redis-server process's user + sys time
    /// (`INFO cpu`) over the measured window. It counts everything the server spends on the
    /// workload, Lua and networking included; `INFO commandstats` would count a script's
    /// inner commands twice (once in their own entry, once in `EVALSHA`'s).
    pub redis_cpu_us_per_op: f64,
    /// Lua time per operation, µs: the `usec` of `EVAL`/`EVALSHA` in `INFO commandstats`
    /// over the window (a script's inner commands included, once).
    pub lua_us_per_op: f64,
    /// Contended: from one holder's end of section to the next holder's acquire, median µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_p50_us: Option<f64>,
    /// Contended: the same, 99th percentile, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_p99_us: Option<f64>,
    /// Contended: the longest single wait for the lock, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wait_ms: Option<f64>,
    /// Contended: fewest acquisitions of any worker divided by most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness: Option<f64>,
    /// Contended: wait percentiles as (percentile, µs), for the wait-time chart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_percentiles_us: Option<Vec<(f64, f64)>>,
    /// Optimistic scenarios: conflicts retried per successful change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries_per_success: Option<f64>,
    /// Seckill: items sold beyond the stock, over all rounds (must be 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oversold: Option<u64>,
    /// Waiters: Redis commands per second while the waiters wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_redis_cmds_per_sec: Option<f64>,
    /// Waiters: client CPU while the waiters wait, % of one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_client_cpu_percent: Option<f64>,
    /// Waiters: from the holder's release until every waiter has had the lock once, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_ms: Option<f64>,
    /// Renewal: leases held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leases: Option<u64>,
    /// Renewal: renewal round trips (ticks) while measuring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewal_ticks: Option<u64>,
    /// Renewal: leases renewed per tick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leases_per_tick: Option<f64>,
    /// Renewal: Redis commands per tick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_cmds_per_tick: Option<f64>,
    /// Renewal: client CPU per tick, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu_us_per_tick: Option<f64>,
    /// Renewal: leases lost (must be 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leases_lost: Option<u64>,
    /// Stampede: database queries per round of 1000 requests for one cold key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub db_hits_per_round: Option<f64>,
    /// Election: from a leader's cut-off until the waiting candidate is elected, median ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover_p50_ms: Option<f64>,
    /// Election: the same, longest, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover_max_ms: Option<f64>,
    /// Election: from a step down until the waiting candidate is elected, median ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resign_p50_ms: Option<f64>,
    /// Election: from a grant until an observer reported its term, median ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_p50_ms: Option<f64>,
    /// Election: observers of the quiet window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observers: Option<u64>,
    /// Election: Redis commands per second while the observers watch a renewing leader (its
    /// renewals included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quiet_redis_cmds_per_sec: Option<f64>,
    /// Heartbeat takeover: takeovers measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub takeovers: Option<u64>,
    /// Heartbeat takeover: from a hung holder's last beat until the waiter's grant, median ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub takeover_p50_ms: Option<f64>,
    /// Heartbeat takeover: the same, longest, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub takeover_max_ms: Option<f64>,
    /// Heartbeat takeover: what the longest should stay within, ms: the heartbeat's maximum
    /// silence and a ttl (the documented bound), and 100 ms for the waiter to notice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub takeover_target_ms: Option<f64>,
}

impl Row {
    /// Whether the row belongs in the main throughput table (the other kinds have their own).
    fn main_table(&self) -> bool {
        self.leases.is_none()
            && self.drain_ms.is_none()
            && self.db_hits_per_round.is_none()
            && self.failover_p50_ms.is_none()
            && self.takeover_p50_ms.is_none()
    }

    /// Heartbeat takeover: whether the longest takeover came within the target.
    fn takeover_met(&self) -> Option<bool> {
        Some(self.takeover_max_ms? <= self.takeover_target_ms?)
    }
}

/// A pair that was not run, and why.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NotApplicable {
    /// Scenario name.
    pub scenario: String,
    /// Library name.
    pub library: String,
    /// Why the library cannot do this scenario's job.
    pub why: String,
}

/// All rows of one run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Report {
    /// The one-way delay added between the clients and the server, µs (0: plain loopback).
    pub one_way_latency_us: u64,
    /// Whether fenced's clients used keyspace events (and the server sent them).
    pub keyspace_events: bool,
    /// The measured rows, in run order.
    pub scenarios: Vec<Row>,
    /// The pairs left out, with the reason.
    pub not_applicable: Vec<NotApplicable>,
}

impl Report {
    /// The row of `library` in `scenario`, if measured.
    pub fn row(&self, scenario: &str, library: &str) -> Option<&Row> {
        self.scenarios
            .iter()
            .find(|r| r.scenario == scenario && r.library == library)
    }

    /// Ops/s of `library` in `scenario`, if measured.
    pub fn ops(&self, scenario: &str, library: &str) -> Option<f64> {
        self.row(scenario, library).map(|r| r.ops_per_sec)
    }

    /// The tables, as text.
    pub fn table(&self) -> String {
        let dash = || "-".to_string();
        let opt = |v: Option<f64>, digits: usize| v.map_or_else(dash, |v| format!("{v:.digits$}"));
        let mut out = if self.one_way_latency_us > 0 {
            format!(
                "(through a proxy adding {} µs each way)\n",
                self.one_way_latency_us
            )
        } else {
            String::new()
        };
        if self.keyspace_events {
            out += "(keyspace events on: fenced's waiters wake by them, its releases do not publish)\n";
        }
        out += &format!(
            "{:<17} {:<13} {:>9} {:>15} {:>6} {:>8} {:>8} {:>7} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>5} {:>8} {:>4}\n",
            "scenario",
            "library",
            "ops/s",
            "min-max",
            "x raw",
            "p50 µs",
            "p99 µs",
            "cmds/op",
            "srv µs/op",
            "lua µs/op",
            "cpu µs/op",
            "handoff50",
            "handoff99",
            "maxwait",
            "fair",
            "retry/ok",
            "viol"
        );
        for r in self.scenarios.iter().filter(|r| r.main_table()) {
            let ratio = self
                .ops(&r.scenario, "raw")
                .filter(|raw| *raw > 0.0)
                .map_or_else(dash, |raw| format!("{:.2}", r.ops_per_sec / raw));
            out.push_str(&format!(
                "{:<17} {:<13} {:>9.0} {:>15} {:>6} {:>8.0} {:>8.0} {:>7.1} {:>9.1} {:>9.1} {:>8.1} {:>9} {:>9} {:>8} {:>5} {:>8} {:>4}\n",
                r.scenario,
                r.library,
                r.ops_per_sec,
                format!("{:.0}-{:.0}", r.ops_per_sec_min, r.ops_per_sec_max),
                ratio,
                r.p50_us,
                r.p99_us,
                r.redis_cmds_per_op,
                r.redis_cpu_us_per_op,
                r.lua_us_per_op,
                r.client_cpu_us_per_op,
                opt(r.handoff_p50_us, 0),
                opt(r.handoff_p99_us, 0),
                opt(r.max_wait_ms, 1),
                opt(r.fairness, 2),
                opt(r.retries_per_success, 2),
                r.violations,
            ));
        }
        let waiters: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.drain_ms.is_some())
            .collect();
        if !waiters.is_empty() {
            out.push_str(&format!(
                "\n{:<15} {:<8} {:>16} {:>14} {:>10} {:>10} {:>4}\n",
                "scenario",
                "library",
                "cmds/s waiting",
                "cpu % waiting",
                "drain ms",
                "acq/s",
                "viol"
            ));
            for r in waiters {
                out.push_str(&format!(
                    "{:<15} {:<8} {:>16} {:>14} {:>10} {:>10.0} {:>4}\n",
                    r.scenario,
                    r.library,
                    opt(r.waiting_redis_cmds_per_sec, 1),
                    opt(r.waiting_client_cpu_percent, 2),
                    opt(r.drain_ms, 0),
                    r.ops_per_sec,
                    r.violations
                ));
            }
        }
        let renewal: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.leases.is_some())
            .collect();
        if !renewal.is_empty() {
            out.push_str(&format!(
                "\n{:<13} {:<7} {:>7} {:>6} {:>11} {:>11} {:>13} {:>5}\n",
                "scenario",
                "library",
                "leases",
                "ticks",
                "leases/tick",
                "cmds/tick",
                "cpu µs/tick",
                "lost"
            ));
            for r in renewal {
                out.push_str(&format!(
                    "{:<13} {:<7} {:>7} {:>6} {:>11} {:>11} {:>13} {:>5}\n",
                    r.scenario,
                    r.library,
                    r.leases.unwrap_or(0),
                    r.renewal_ticks.unwrap_or(0),
                    opt(r.leases_per_tick, 0),
                    opt(r.redis_cmds_per_tick, 0),
                    opt(r.client_cpu_us_per_tick, 0),
                    r.leases_lost.unwrap_or(0)
                ));
            }
        }
        let stampede: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.db_hits_per_round.is_some())
            .collect();
        if !stampede.is_empty() {
            out.push_str(&format!(
                "\n{:<15} {:<13} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>10}\n",
                "scenario",
                "library",
                "requests/s",
                "db hits/rnd",
                "p50 ms",
                "p99 ms",
                "max ms",
                "cmds/req",
                "srv µs/req"
            ));
            for r in stampede {
                out.push_str(&format!(
                    "{:<15} {:<13} {:>10.0} {:>12} {:>8.1} {:>8.1} {:>8} {:>8.2} {:>10.2}\n",
                    r.scenario,
                    r.library,
                    r.ops_per_sec,
                    opt(r.db_hits_per_round, 1),
                    r.p50_us / 1000.0,
                    r.p99_us / 1000.0,
                    opt(r.max_wait_ms, 1),
                    r.redis_cmds_per_op,
                    r.redis_cpu_us_per_op
                ));
            }
        }
        let elections: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.failover_p50_ms.is_some())
            .collect();
        if !elections.is_empty() {
            out.push_str(&format!(
                "\n{:<17} {:<7} {:>11} {:>11} {:>10} {:>11} {:>9} {:>12} {:>4}\n",
                "scenario",
                "library",
                "cut→new ms",
                "max ms",
                "resign ms",
                "observed ms",
                "observers",
                "quiet cmds/s",
                "viol"
            ));
            for r in elections {
                out.push_str(&format!(
                    "{:<17} {:<7} {:>11} {:>11} {:>10} {:>11} {:>9} {:>12} {:>4}\n",
                    r.scenario,
                    r.library,
                    opt(r.failover_p50_ms, 0),
                    opt(r.failover_max_ms, 0),
                    opt(r.resign_p50_ms, 1),
                    opt(r.observed_p50_ms, 1),
                    r.observers.unwrap_or(0),
                    opt(r.quiet_redis_cmds_per_sec, 1),
                    r.violations
                ));
            }
        }
        let takeovers: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.takeover_p50_ms.is_some())
            .collect();
        if !takeovers.is_empty() {
            out.push_str(&format!(
                "\n{:<18} {:<7} {:>9} {:>13} {:>8} {:>9} {:>10} {:>4}\n",
                "scenario",
                "library",
                "takeovers",
                "beat→grant ms",
                "max ms",
                "target ms",
                "max≤target",
                "viol"
            ));
            for r in takeovers {
                out.push_str(&format!(
                    "{:<18} {:<7} {:>9} {:>13} {:>8} {:>9} {:>10} {:>4}\n",
                    r.scenario,
                    r.library,
                    r.takeovers.unwrap_or(0),
                    opt(r.takeover_p50_ms, 0),
                    opt(r.takeover_max_ms, 0),
                    opt(r.takeover_target_ms, 0),
                    r.takeover_met()
                        .map_or("-", |met| if met { "yes" } else { "no" }),
                    r.violations
                ));
            }
        }
        if !self.not_applicable.is_empty() {
            out.push_str("\nnot run:\n");
            for n in &self.not_applicable {
                out.push_str(&format!("  {} / {}: {}\n", n.scenario, n.library, n.why));
            }
        }
        out
    }

    /// The tables as Markdown, for `docs/benchmarks.md`.
    pub fn markdown(&self) -> String {
        let n0 = |v: f64| group(v.round() as u64);
        let opt =
            |v: Option<f64>, digits: usize| v.map_or_else(String::new, |v| format!("{v:.digits$}"));
        let mut out = if self.one_way_latency_us > 0 {
            format!(
                "Through a proxy adding {} µs each way.\n\n",
                self.one_way_latency_us
            )
        } else {
            String::new()
        };
        if self.keyspace_events {
            out.push_str(
                "Keyspace events on: fenced's waiters wake by them, its releases do not publish.\n\n",
            );
        }
        out.push_str(
            "| scenario | library | ops/s (min–max) | × raw | p50 µs | p99 µs | Redis cmds/op | Redis CPU µs/op | Lua µs/op | client CPU µs/op | handoff p50 / p99 µs | max wait ms | fairness | retries/ok | violations |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for r in self.scenarios.iter().filter(|r| r.main_table()) {
            let ratio = self
                .ops(&r.scenario, "raw")
                .filter(|raw| *raw > 0.0)
                .map_or_else(String::new, |raw| format!("{:.2}", r.ops_per_sec / raw));
            let handoff = match (r.handoff_p50_us, r.handoff_p99_us) {
                (Some(a), Some(b)) => format!("{a:.0} / {b:.0}"),
                _ => String::new(),
            };
            out.push_str(&format!(
                "| {} | {} | {} ({}–{}) | {ratio} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {handoff} | {} | {} | {} | {} |\n",
                r.scenario,
                r.library,
                n0(r.ops_per_sec),
                n0(r.ops_per_sec_min),
                n0(r.ops_per_sec_max),
                n0(r.p50_us),
                n0(r.p99_us),
                r.redis_cmds_per_op,
                r.redis_cpu_us_per_op,
                r.lua_us_per_op,
                r.client_cpu_us_per_op,
                opt(r.max_wait_ms, 1),
                opt(r.fairness, 2),
                opt(r.retries_per_success, 2),
                r.violations
            ));
        }
        let waiters: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.drain_ms.is_some())
            .collect();
        if !waiters.is_empty() {
            out.push_str("\n| scenario | library | Redis cmds/s while waiting | client CPU % while waiting | all 1000 served after (ms) | acquisitions/s draining | violations |\n|---|---|---|---|---|---|---|\n");
            for r in waiters {
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} |\n",
                    r.scenario,
                    r.library,
                    opt(r.waiting_redis_cmds_per_sec, 1),
                    opt(r.waiting_client_cpu_percent, 2),
                    opt(r.drain_ms, 0),
                    n0(r.ops_per_sec),
                    r.violations
                ));
            }
        }
        let renewal: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.leases.is_some())
            .collect();
        if !renewal.is_empty() {
            out.push_str("\n| scenario | library | leases | renewal round trips | leases per round trip | Redis cmds per round trip | client CPU µs per round trip | leases lost |\n|---|---|---|---|---|---|---|---|\n");
            for r in renewal {
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    r.scenario,
                    r.library,
                    r.leases.unwrap_or(0),
                    r.renewal_ticks.unwrap_or(0),
                    opt(r.leases_per_tick, 0),
                    opt(r.redis_cmds_per_tick, 0),
                    opt(r.client_cpu_us_per_tick, 0),
                    r.leases_lost.unwrap_or(0)
                ));
            }
        }
        let stampede: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.db_hits_per_round.is_some())
            .collect();
        if !stampede.is_empty() {
            out.push_str("\n| scenario | library | requests/s | database queries per 1000 requests | p50 ms | p99 ms | max ms | Redis cmds/request | Redis CPU µs/request |\n|---|---|---|---|---|---|---|---|---|\n");
            for r in stampede {
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {:.1} | {:.1} | {} | {:.2} | {:.2} |\n",
                    r.scenario,
                    r.library,
                    n0(r.ops_per_sec),
                    opt(r.db_hits_per_round, 1),
                    r.p50_us / 1000.0,
                    r.p99_us / 1000.0,
                    opt(r.max_wait_ms, 1),
                    r.redis_cmds_per_op,
                    r.redis_cpu_us_per_op
                ));
            }
        }
        let elections: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.failover_p50_ms.is_some())
            .collect();
        if !elections.is_empty() {
            out.push_str("\n| scenario | library | cut off → next leader, p50 / max ms | step down → next leader, p50 ms | grant → observer, p50 ms | observers | Redis cmds/s while quiet | violations |\n|---|---|---|---|---|---|---|---|\n");
            for r in elections {
                out.push_str(&format!(
                    "| {} | {} | {} / {} | {} | {} | {} | {} | {} |\n",
                    r.scenario,
                    r.library,
                    opt(r.failover_p50_ms, 0),
                    opt(r.failover_max_ms, 0),
                    opt(r.resign_p50_ms, 1),
                    opt(r.observed_p50_ms, 1),
                    r.observers.unwrap_or(0),
                    opt(r.quiet_redis_cmds_per_sec, 1),
                    r.violations
                ));
            }
        }
        let takeovers: Vec<&Row> = self
            .scenarios
            .iter()
            .filter(|r| r.takeover_p50_ms.is_some())
            .collect();
        if !takeovers.is_empty() {
            out.push_str("\n| scenario | library | takeovers | last beat → waiter granted, p50 / max ms | target ms (heartbeat + ttl + 100) | max within target | violations |\n|---|---|---|---|---|---|---|\n");
            for r in takeovers {
                out.push_str(&format!(
                    "| {} | {} | {} | {} / {} | {} | {} | {} |\n",
                    r.scenario,
                    r.library,
                    r.takeovers.unwrap_or(0),
                    opt(r.takeover_p50_ms, 0),
                    opt(r.takeover_max_ms, 0),
                    opt(r.takeover_target_ms, 0),
                    r.takeover_met()
                        .map_or("", |met| if met { "yes" } else { "no" }),
                    r.violations
                ));
            }
        }
        if !self.not_applicable.is_empty() {
            out.push_str("\nNot run:\n\n");
            for n in &self.not_applicable {
                out.push_str(&format!(
                    "- `{}` / `{}`: {}\n",
                    n.scenario, n.library, n.why
                ));
            }
        }
        out
    }
}

/// 12345 → "12,345".
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
