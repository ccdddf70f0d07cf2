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
    /// Times two holders were inside the critical section at once (must be 0).
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
            "{:<15} {:<7} {:>10} {:>15} {:>7} {:>9} {:>9} {:>8} {:>10} {:>10} {:>9} {:>8} {:>5}\n",
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
            "viol"
        );
        for r in &self.scenarios {
            let ratio = self
                .ops(&r.scenario, "raw")
                .filter(|raw| *raw > 0.0)
                .map(|raw| format!("{:.2}", r.ops_per_sec / raw))
                .unwrap_or_else(|| "-".into());
            let opt = |v: Option<f64>, unit: &str| {
                v.map(|v| format!("{v:.0}{unit}"))
                    .unwrap_or_else(|| "-".into())
            };
            out.push_str(&format!(
                "{:<15} {:<7} {:>10.0} {:>15} {:>7} {:>9.0} {:>9.0} {:>8.1} {:>10} {:>10} {:>9} {:>8} {:>5}\n",
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
                r.fairness.map(|f| format!("{f:.2}")).unwrap_or_else(|| "-".into()),
                r.violations,
            ));
        }
        out
    }
}
