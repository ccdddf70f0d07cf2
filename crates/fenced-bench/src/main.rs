//! `fenced-bench`: runs the benchmark scenarios on a redis-server it starts itself, prints a
//! table and optionally writes JSON.
//!
//! ```text
//! cargo run --release -p fenced-bench -- --quick --json out.json
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use fenced_bench::{Config, Library, Scenario};

/// Benchmarks fenced against the raw redis-rs floor, side by side, on one fresh redis-server.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// One 1.5s run per scenario and library (the whole set in about a minute), instead of
    /// three 5s runs.
    #[arg(long)]
    quick: bool,
    /// Runs per scenario and library (default: 1 with --quick, else 3); medians are reported.
    #[arg(long)]
    repeat: Option<usize>,
    /// Write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the tables as Markdown to this file.
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Write SVG charts (throughput, contended wait times) into this directory.
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    /// Only these scenarios (uncontended-1, uncontended-32, contended-8, semaphore-4of16,
    /// reentrant-depth-3, striped-1, striped-16, striped-256, striped-1024, fair-8, rw-reads, latch-1000, multi-3, waiters-1000, renew-10000, seckill, counter-contended, stampede-1000, redlock-3, redlock-5, redlock-5-slow, cluster-uncontended-32, election-failover, heartbeat-takeover).
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<Scenario>,
    /// Only these libraries (fenced, fenced-scripted, fenced-noscripts, fenced-unfenced, raw, rslock, redlock, fenced-tx, fenced-script,
    /// fenced-lock, fenced-cache, cache-aside).
    #[arg(long, value_delimiter = ',')]
    libraries: Vec<Library>,
    /// Do not measure: read a report written earlier with --json, and print or write it
    /// again (table, --markdown, --svg).
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    from_json: Option<PathBuf>,
    /// Measure against this server instead of starting one (loopback only, please).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Start this server binary (`redis-server` or `valkey-server`; `scripts/servers` fetches
    /// Redis 6.2 and Valkey 9.1) instead of the test kit's default.
    #[arg(long, value_name = "PATH", conflicts_with = "redis")]
    server: Option<PathBuf>,
    /// Put a proxy between every client and the server that delays each direction by this
    /// many microseconds (200: a Redis in the same zone), to see what users see; a loopback
    /// exaggerates the server's cost and hides round trips.
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=100_000))]
    latency_us: u64,
    /// fenced's clients use keyspace events (`ClientBuilder::keyspace_events`): waiters wake
    /// on the lock key's `del` and `expired`, releases do not publish. Connecting turns the
    /// events on, so every library runs against a server that sends them.
    #[arg(long)]
    keyspace_events: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fenced-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (duration, warmup, hold) = if args.quick {
        (
            Duration::from_millis(1500),
            Duration::from_millis(200),
            Duration::from_secs(2),
        )
    } else {
        (
            Duration::from_secs(5),
            Duration::from_millis(500),
            Duration::from_secs(3),
        )
    };
    let config = Config {
        duration,
        warmup,
        hold,
        scenarios: if args.scenarios.is_empty() {
            Scenario::ALL.to_vec()
        } else {
            args.scenarios.clone()
        },
        libraries: if args.libraries.is_empty() {
            Library::ALL.to_vec()
        } else {
            args.libraries.clone()
        },
        repeat: args.repeat.unwrap_or(if args.quick { 1 } else { 3 }),
        keyspace_events: args.keyspace_events,
        renew_leases: 10_000,
    };
    let report = match &args.from_json {
        Some(path) => serde_json::from_str(&std::fs::read_to_string(path)?)?,
        None => measure(&args, &config)?,
    };
    println!("{}", report.table());
    if let Some(dir) = &args.svg {
        for path in fenced_bench::write_charts(&report, dir)? {
            println!("wrote {}", path.display());
        }
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, report.markdown())?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
        println!("wrote {}", path.display());
    }
    let violations: u64 = report.scenarios.iter().map(|r| r.violations).sum();
    if violations > 0 {
        return Err(format!("{violations} mutual-exclusion violations").into());
    }
    Ok(())
}

/// Starts a server (unless --redis names one) and runs the configured pairs.
fn measure(
    args: &Args,
    config: &Config,
) -> Result<fenced_bench::Report, Box<dyn std::error::Error + Send + Sync>> {
    let server = match &args.redis {
        Some(_) => None,
        None => Some(match &args.server {
            Some(path) => fenced_testkit::RedisServer::start_binary(path, &[])?,
            None => fenced_testkit::RedisServer::start()?,
        }),
    };
    let url = match (&args.redis, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(s)) => s.url(),
        (None, None) => return Err("no server".into()),
    };
    let proxy = match (args.latency_us, &server) {
        (0, _) => None,
        (us, Some(s)) => Some(fenced_testkit::LatencyProxy::start(
            s.addr(),
            std::time::Duration::from_micros(us),
        )?),
        (_, None) => return Err("--latency-us needs the server this program starts".into()),
    };
    let url = proxy
        .as_ref()
        .map_or(url, fenced_testkit::LatencyProxy::url);
    // redlock is synchronous: up to 32 of its threads block at once, beside the async tasks.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(64)
        .build()?;
    let mut report = runtime.block_on(fenced_bench::run(config, &url))?;
    report.one_way_latency_us = args.latency_us;
    report.keyspace_events = args.keyspace_events;
    Ok(report)
}
