//! Results: one row per (scenario, library), printed as a table and written as JSON.

use serde::Serialize;

/// One measured (scenario, library) pair.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Scenario name, e.g. `uncontended-1`.
    pub scenario: String,
    /// Library name, e.g. `fenced`.
    pub library: String,
    /// Completed acquire + release cycles per second (median of the runs).
    pub ops_per_sec: f64,
    /// Slowest run's ops/s.
    pub ops_per_sec_min: f64,
    /// Fastest run's ops/s.
    pub ops_per_sec_max: f64,
    /// How many runs the median is taken from.
    pub runs: usize,
    /// Median latency of one cycle (uncontended) or of one acquire (contended), µs.
    pub p50_us: f64,
    /// 99th percentile of the same, µs.
    pub p99_us: f64,
    /// Times two holders were inside the critical section at once, or (seckill) items sold
    /// beyond the stock (must be 0).
    pub violations: u64,
    /// Redis commands per cycle (`total_commands_processed` delta; script bodies count).
    pub redis_cmds_per_op: f64,
    /// Contended only: from one holder's end of section to the next holder's acquire, median µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_p50_us: Option<f64>,
    /// Contended only: the same, 99th percentile, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_p99_us: Option<f64>,
    /// Contended only: the longest single wait for the lock, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wait_ms: Option<f64>,
    /// Optimistic scenarios: conflicts retried per successful change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries_per_success: Option<f64>,
    /// Seckill: items sold beyond the stock, over all rounds (must be 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oversold: Option<u64>,
    /// Contended only: fewest acquisitions of any worker divided by most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness: Option<f64>,
}

/// All rows of one run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// The measured rows, in run order.
    pub scenarios: Vec<Row>,
}

impl Report {
    /// Ops/s of `library` in `scenario`, if measured.
    pub fn ops(&self, scenario: &str, library: &str) -> Option<f64> {
        self.scenarios
            .iter()
            .find(|r| r.scenario == scenario && r.library == library)
            .map(|r| r.ops_per_sec)
    }

    /// The table, with each library's ops/s as a ratio of `raw` in the same scenario.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<17} {:<13} {:>9} {:>15} {:>6} {:>8} {:>8} {:>7} {:>9} {:>9} {:>8} {:>5} {:>8} {:>5}\n",
            "scenario",
            "library",
            "ops/s",
            "min-max",
            "x raw",
            "p50 µs",
            "p99 µs",
            "cmds/op",
            "handoff50",
            "handoff99",
            "maxwait",
            "fair",
            "retry/ok",
            "viol"
        );
        let dash = || "-".to_string();
        for r in &self.scenarios {
            let ratio = self
                .ops(&r.scenario, "raw")
                .filter(|raw| *raw > 0.0)
                .map_or_else(dash, |raw| format!("{:.2}", r.ops_per_sec / raw));
            let opt = |v: Option<f64>, unit: &str| v.map_or_else(dash, |v| format!("{v:.0}{unit}"));
            out.push_str(&format!(
                "{:<17} {:<13} {:>9.0} {:>15} {:>6} {:>8.0} {:>8.0} {:>7.1} {:>9} {:>9} {:>8} {:>5} {:>8} {:>5}\n",
                r.scenario,
                r.library,
                r.ops_per_sec,
                format!("{:.0}-{:.0}", r.ops_per_sec_min, r.ops_per_sec_max),
                ratio,
                r.p50_us,
                r.p99_us,
                r.redis_cmds_per_op,
                opt(r.handoff_p50_us, "µs"),
                opt(r.handoff_p99_us, "µs"),
                opt(r.max_wait_ms, "ms"),
                r.fairness.map_or_else(dash, |f| format!("{f:.2}")),
                r.retries_per_success.map_or_else(dash, |x| format!("{x:.2}")),
                r.violations,
            ));
        }
        out
    }
}
