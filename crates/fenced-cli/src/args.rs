//! The command line, parsed and checked without any I/O.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Run programs under a distributed lock on Redis, and inspect or break locks.
#[derive(Parser, Debug)]
#[command(name = "fenced", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes, shown after the subcommand's own.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Connection")]
pub struct Global {
    /// Redis URL: redis://host:port/db, rediss:// for TLS, redis://user:pass@host for ACL.
    /// Given 3 or more times: Redlock over those independent masters (locks and semaphores:
    /// `run`).
    #[arg(long, global = true, env = "FENCED_REDIS_URL", value_name = "URL")]
    pub redis: Vec<String>,
    /// A Redis Cluster: the URL of one of its nodes (repeat for more seeds). Every command
    /// works on a cluster; the listings (`list`, `top`) scan every master.
    #[arg(long, global = true, value_name = "URL", conflicts_with = "redis")]
    pub cluster: Vec<String>,
    /// A Redis Sentinel to find the master through (repeat for more), with --service. The
    /// master gets the password; the sentinel URLs carry their own.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        requires = "service",
        conflicts_with_all = ["redis", "cluster"]
    )]
    pub sentinel: Vec<String>,
    /// The master name the sentinels watch (with --sentinel).
    #[arg(long, global = true, value_name = "NAME", requires = "sentinel")]
    pub service: Option<String>,
    /// Prefix of every key fenced uses.
    #[arg(long, global = true, default_value = "fenced:", value_name = "PREFIX", value_parser = utf8("--namespace"))]
    pub namespace: String,
    /// Bound on each Redis call (e.g. 500ms, 2s).
    #[arg(long, global = true, default_value = "2s", value_parser = duration, value_name = "DUR")]
    pub timeout: Duration,
    /// Send no Lua scripts: for a user whose ACL leaves out @scripting, or a proxy without
    /// them (learned from the first refusal anyway). Locks work (run, release --force), and
    /// status and list read every kind; commands that need scripts exit 78.
    #[arg(long, global = true)]
    pub no_scripts: bool,
    /// Read the Redis password from this file (its first line) instead of the URL. Without
    /// it, FENCED_REDIS_PASSWORD, then REDISCLI_AUTH, are used when set. Never printed.
    #[arg(long, global = true, value_name = "FILE")]
    pub password_file: Option<std::path::PathBuf>,
    /// Set for servers fenced starts itself (the demo's throwaway one), which have no
    /// password whatever the environment says.
    #[arg(skip)]
    pub no_password: bool,
    /// For rediss:// URLs: trust this CA certificate (PEM file) instead of the web's roots.
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca_cert: Option<std::path::PathBuf>,
    /// For rediss:// URLs to a server that requires client certificates: this certificate
    /// (PEM file), with --tls-key.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM file) of --tls-cert. Never printed.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Say what is happening on stderr.
    #[arg(short, long, global = true, help_heading = "Output")]
    pub verbose: bool,
    /// Print data as JSON (status, list, doctor, demo; `run` adds JSON lines on stderr when
    /// the lock is taken and when it ends).
    #[arg(long, global = true, help_heading = "Output")]
    pub json: bool,
}

/// The default when neither --redis nor FENCED_REDIS_URL is given.
pub const DEFAULT_REDIS: &str = "redis://127.0.0.1:6379";

impl Global {
    /// The server to name in messages and to check: the first of --cluster or --redis.
    pub fn redis_url(&self) -> &str {
        self.cluster
            .first()
            .or(self.sentinel.first())
            .or(self.redis.first())
            .map_or(DEFAULT_REDIS, String::as_str)
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run CMD while holding the lock NAME; renew it while CMD runs; release it when CMD exits.
    ///
    /// CMD gets FENCED_TOKEN (the fencing token: pass it along with every write) and
    /// FENCED_NAME in its environment, and FENCED_HOLDS, through which a `fenced run` on the
    /// same NAME started under CMD re-enters the lock instead of waiting for itself. If the lease is lost, CMD is sent SIGTERM, then SIGKILL
    /// after --kill-after, and fenced exits 76; these go to CMD and every process it started. SIGTERM and SIGHUP sent to fenced are
    /// forwarded to CMD, and SIGINT and SIGQUIT too unless fenced runs on a terminal (where
    /// Ctrl-C already reaches CMD).
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Campaign in the election NAME, then run CMD while leader.
    ///
    /// Candidates are elected in the order they campaigned, across machines. CMD gets
    /// FENCED_TERM (the term: a fencing token, greater than every earlier leader's; pass it
    /// along with every write), FENCED_TOKEN (the same), FENCED_NAME and FENCED_VALUE in its
    /// environment. If the leadership is lost, CMD and everything it started are sent SIGTERM,
    /// then SIGKILL after --kill-after, and fenced exits 76 (with --again it campaigns again).
    /// When CMD ends, fenced steps down at once and the next candidate leads.
    #[command(after_help = ELECT_HELP)]
    Elect(ElectArgs),
    /// Print the leader of the election NAME: its value, term, since when, lease left and how
    /// many times leadership changed hands; then the candidates in the order they will be
    /// elected, with their values and how long each has queued. Exit 75 when nobody leads.
    /// With --watch, print one line per change (a new term, a new value, nobody) until
    /// interrupted.
    #[command(
        after_help = "Examples:\n  fenced leader billing-scheduler\n  fenced --json leader billing-scheduler | jq -r .leader.value\n  fenced leader billing-scheduler --watch"
    )]
    Leader {
        /// The election's name.
        #[arg(value_parser = utf8("NAME"))]
        name: String,
        /// Follow the leader: one line per change, until interrupted.
        #[arg(long)]
        watch: bool,
    },
    /// Show whether NAME is held, by whom (first 8 characters of its owner token), for how
    /// much longer, how many re-entrant holds, its fence (every token handed out is at or
    /// below it), how many clients wait
    /// for it; and, when they exist, the readers and waiting writers of the read-write lock
    /// NAME, the count of the latch NAME, the permits held of the semaphore NAME and the
    /// leader and candidates of the election NAME.
    #[command(
        after_help = "Examples:\n  fenced status deploy:web\n  fenced --json status deploy:web | jq .fence"
    )]
    Status {
        /// The lock's name.
        #[arg(value_parser = utf8("NAME"))]
        name: String,
    },
    /// List what is held, queued or counting in the namespace: locks, semaphores, read-write
    /// locks, fair queues, latches and elections (found with SCAN, never KEYS).
    ///
    /// A key that holds another type of data than fenced keeps there (another program wrote
    /// it) is named on stderr, one line each (with --json, also as an object of kind
    /// "unreadable"), after the rest is listed; the exit code is then 65.
    #[command(
        after_help = "Examples:\n  fenced list\n  fenced list 'deploy:*'\n  fenced --json list"
    )]
    List {
        /// Only names matching this glob.
        #[arg(default_value = "*", value_parser = utf8("PATTERN"))]
        pattern: String,
    },
    /// A live view of the namespace: every lock, semaphore, read-write lock, fair queue, latch
    /// and election, with its holder (or leader), ttl left, waiters, grants per second and
    /// their trend.
    ///
    /// Grants per second are exact when the server sends keyspace events (`CONFIG SET
    /// notify-keyspace-events K$`); otherwise they are counted from fencing-token changes
    /// between refreshes, a lower bound marked ≥. Needs a terminal; works over SSH. q quits.
    #[command(
        after_help = "Examples:\n  fenced top\n  fenced top 'deploy:*' --interval 500ms\n  fenced --redis redis://10.0.0.5:6379 top"
    )]
    Top {
        /// Only names matching this glob.
        #[arg(default_value = "*", value_parser = utf8("PATTERN"))]
        pattern: String,
        /// How often to refresh (at least 100ms).
        #[arg(long, default_value = "1s", value_parser = duration, value_name = "DUR")]
        interval: Duration,
    },
    /// Report whether the server suits locks: a line per check, each with what to change.
    ///
    /// The checks: the server's version and the native commands it offers, whether it runs
    /// Lua scripts, the permissions each primitive needs (ACL DRYRUN, Redis 7 and later), the
    /// eviction policy, persistence, replicas (and what waiting for them needs), keyspace
    /// events, and its clock against this machine's. Exits 0 when no line breaks a
    /// guarantee, 78 when one is marked fail: a server that may evict lock keys, or one older
    /// than fenced supports. A check the server refuses (CONFIG refused by an ACL or a
    /// managed service) reads unknown and fails nothing. Each --redis is checked (one server,
    /// or each Redlock master), every master of a --cluster, the master behind --sentinel.
    /// Nothing is written.
    #[command(
        after_help = "Examples:\n  fenced doctor\n  fenced --json doctor | jq '.nodes[].checks.eviction'\n  fenced --cluster redis://10.0.0.5:7000 doctor  # every master"
    )]
    Doctor,
    /// Break a lock whoever holds it (needs --force), and wake its waiters; or, with
    /// --ticket, release the lease a program handed over.
    #[command(
        after_help = "Examples:\n  fenced status deploy:web          # who holds it, for how long\n  fenced release deploy:web --force\n  fenced release --ticket \"$TICKET\"  # a lease handed over by a program"
    )]
    Release {
        /// The lock's name.
        #[arg(required_unless_present = "ticket", conflicts_with = "ticket", value_parser = utf8("NAME"))]
        name: Option<String>,
        /// Really delete somebody else's lock. Given twice, also delete the lock's keys that
        /// hold another program's data (WRONGTYPE).
        #[arg(long, conflicts_with = "ticket", action = clap::ArgAction::Count)]
        force: u8,
        /// Release the lease of this ticket (from `into_ticket` in a program), as its holder.
        #[arg(long, value_name = "TICKET")]
        ticket: Option<String>,
    },
    /// Set the lease of a ticket to DUR from now; prints the ticket to use from then on.
    #[command(
        after_help = "Examples:\n  TICKET=$(fenced extend --ticket \"$TICKET\" --ttl 5m)  # more time for the job"
    )]
    Extend {
        /// The lease's ticket (from `into_ticket` in a program, or an earlier `fenced extend`).
        #[arg(long, value_name = "TICKET")]
        ticket: String,
        /// The new lease length, from now.
        #[arg(long, value_parser = duration, value_name = "DUR")]
        ttl: Duration,
    },
    /// The classic lock scenarios end to end: a contended product lock, a seckill sale, a stale holder.
    ///
    /// Uses --redis if given; otherwise the server at the default address if one answers, or
    /// else a throwaway redis-server started on a free loopback port and stopped at the end.
    #[command(
        after_help = "Examples:\n  fenced demo\n  fenced --redis redis://127.0.0.1:6380 demo"
    )]
    Demo,
    /// A countdown latch across machines: arm it with a count, count it down, wait for it.
    ///
    /// `wait` exits 0 once the latch is open (or does not exist), 75 at --wait's deadline.
    /// `count-down` and `count` print the count left (`none` when the latch does not exist).
    /// `arm` exits 75 when the latch is armed and still counting.
    #[command(
        after_help = "Examples:\n  fenced latch migrations arm 3\n  fenced latch migrations count-down      # once per finished worker\n  fenced latch migrations wait --wait 10m  # then start the app"
    )]
    Latch {
        /// The latch's name.
        #[arg(value_parser = utf8("NAME"))]
        name: String,
        #[command(subcommand)]
        action: LatchAction,
    },
    /// Print a shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  fenced completions bash > ~/.local/share/bash-completion/completions/fenced\n  fenced completions zsh > \"${fpath[1]}/_fenced\"\n  fenced completions fish > ~/.config/fish/completions/fenced.fish"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write one per subcommand into --dir.
    #[command(
        after_help = "Examples:\n  fenced man | man -l -\n  fenced man --dir /usr/local/share/man/man1"
    )]
    Man {
        /// Write fenced.1 and fenced-<subcommand>.1 into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

/// `fenced run --help`: examples (the exit codes follow, from [`command`]).
pub const RUN_HELP: &str = "Examples:
  fenced run deploy:web -- ./deploy.sh                  # one deploy at a time
  fenced run backup --ttl 30s --wait 10m -- pg_dump db  # wait up to 10 minutes for the lock
  fenced run report --no-wait -- ./report.sh            # skip this run if another holds it
  fenced run pool --permits 4 -- ./worker               # at most 4 at once
  fenced run index --read -- ./query.sh                 # many readers, or one --write
  fenced run nightly --no-wait --min-hold 5m -- ./job   # from cron on every machine: runs once
  fenced run sync --max-hold 1h -- ./sync.sh            # stop a hung run after an hour (exit 124)
  fenced run etl --heartbeat-file /run/etl.beat --heartbeat-timeout 1m -- ./etl.sh
                                                        # ./etl.sh touches the file; hung, it loses the lock
  fenced run billing --lock-delay 30s -- ./bill.sh      # a lost holder's name stays taken 30s more
  fenced run dedupe --unfenced -- ./dedupe.sh           # no fencing token needed: SET NX PX only
  fenced run order:7 --ticket \"$TICKET\" -- ./finish.sh  # continue a lease a program handed over
  fenced run order:7 --hand-off -- ./enqueue.sh         # CMD queues $FENCED_TICKET; a worker finishes";

/// `fenced elect --help`: examples.
pub const ELECT_HELP: &str = "Examples:
  fenced elect billing-scheduler -- ./scheduler                   # one leader runs it
  fenced elect billing-scheduler --value \"$HOSTNAME\" --again -- ./scheduler  # a standby
  fenced elect billing-scheduler --heartbeat-file /run/sched.beat --heartbeat-timeout 1m -- ./scheduler
                                                                   # leads while ./scheduler touches the file
  fenced leader billing-scheduler                                  # who leads";

/// The whole command line, with the exit codes (`exit::TABLE`) after the help of `fenced`
/// and of `fenced run`: what parsing, `--help`, the man page and completions all use.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let table = crate::exit::help_table();
    Cli::command()
        .after_help(table.clone())
        .mut_subcommand("run", |run| {
            run.after_help(format!("{RUN_HELP}\n\n{table}"))
        })
}

/// Parses `argv` with [`command`].
pub fn parse(argv: &[std::ffi::OsString]) -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let matches = command().try_get_matches_from(argv)?;
    Cli::from_arg_matches(&matches)
}

/// What `fenced latch NAME` does.
#[derive(Subcommand, Debug)]
pub enum LatchAction {
    /// Arm the latch with COUNT (refused while it is armed and counting).
    Arm {
        /// The count, at least 1.
        #[arg(value_parser = clap::value_parser!(u64).range(1..=1_000_000_000_000_000))]
        count: u64,
        /// How long the latch lives, open or not.
        #[arg(long, default_value = "24h", value_parser = duration, value_name = "DUR")]
        lifetime: Duration,
    },
    /// Count the latch down by one; the count down that opens it wakes every waiter.
    CountDown,
    /// Wait until the latch is open.
    Wait {
        /// Wait at most this long (default: forever).
        #[arg(long, value_parser = duration, value_name = "DUR")]
        wait: Option<Duration>,
    },
    /// Print the count left.
    Count,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The lock's name.
    #[arg(value_parser = utf8("NAME"))]
    pub name: String,
    /// Lease length; renewed every third of it while CMD runs.
    #[arg(long, default_value = "30s", value_parser = duration, value_name = "DUR")]
    pub ttl: Duration,
    /// Wait at most this long for the lock (default: wait forever), and for a Redis that is
    /// down or not answering when fenced starts (without it, that fails at once).
    #[arg(long, value_parser = duration, value_name = "DUR", conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Try once; exit 75 if the lock is held.
    #[arg(long)]
    pub no_wait: bool,
    /// Run under one of N leased permits of the semaphore NAME instead of the lock: at most N
    /// commands run at once. (Nesting re-enters locks only; a nested run with --permits takes
    /// another permit.)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub permits: Option<u32>,
    /// Take the lock in FIFO order with every other `--fair` waiter, across machines.
    #[arg(long, conflicts_with_all = ["permits", "read", "write"])]
    pub fair: bool,
    /// Run as one of many readers of the read-write lock NAME (writers wait for all readers).
    #[arg(long, conflicts_with_all = ["permits", "write"])]
    pub read: bool,
    /// Run as the one writer of the read-write lock NAME (writer-preferring: new readers wait
    /// while it waits).
    #[arg(long, conflicts_with = "permits")]
    pub write: bool,
    /// Hold an unfenced lock: exclusion without a fencing token (no FENCED_TOKEN for CMD), at
    /// the cost of a bare SET NX PX. For jobs whose double run only wastes work; not
    /// re-entrant (a nested run of the same name waits).
    #[arg(long, conflicts_with_all = ["permits", "fair", "read", "write"])]
    pub unfenced: bool,
    /// Keep the lock at least this long from the grant, even when CMD ends sooner: the lock is
    /// then left to expire at that moment (fenced returns at once), so cron runs of one job
    /// on machines whose clocks differ do not each run it. The name is free at the minimum,
    /// or when CMD ends if that is later. Takes a plain lock (not re-entrant: a nested run of
    /// the same name waits), unless this run is nested in one that holds the name. Not with
    /// --ticket or --hand-off, whose lease is another process's to end.
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub min_hold: Option<Duration>,
    /// Let CMD run at most this long with the lock: then stop it as on a lost lease (SIGTERM,
    /// SIGKILL after --kill-after), release the lock and exit 124.
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub max_hold: Option<Duration>,
    #[command(flatten)]
    pub lease: LeaseFlags,
    /// Run under the lease of this ticket (handed over by a program with `into_ticket`)
    /// instead of acquiring: NAME must be the ticket's. Released when CMD ends.
    #[arg(long, value_name = "TICKET", conflicts_with_all = ["permits", "fair", "read", "write", "unfenced", "no_wait", "wait", "min_hold", "heartbeat_file", "lock_delay"])]
    pub ticket: Option<String>,
    /// Hand the lease to a ticket at once and give it to CMD in FENCED_TICKET to pass on: this
    /// run neither renews nor releases it, and whoever resumes the ticket (a program's
    /// `Client::resume`, `fenced run --ticket`, `fenced release --ticket`) within the lease's
    /// --ttl finishes the job. Takes a plain lock (not re-entrant).
    #[arg(long, conflicts_with_all = ["permits", "read", "write", "ticket", "min_hold", "heartbeat_file", "lock_delay"])]
    pub hand_off: bool,
    /// After the lease is lost: time between SIGTERM and SIGKILL to CMD (at most 1 day).
    #[arg(long, default_value = "10s", value_parser = kill_after, value_name = "DUR")]
    pub kill_after: Duration,
    /// The program to run, and its arguments, after `--` (passed on byte for byte).
    #[arg(last = true, required = true, value_name = "CMD", value_parser = clap::builder::OsStringValueParser::new())]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// The election's name.
    #[arg(value_parser = utf8("NAME"))]
    pub name: String,
    /// What this candidate advertises once elected (its address, say): `fenced leader`
    /// prints it, and CMD gets it as FENCED_VALUE.
    #[arg(long, default_value = "", value_name = "VALUE", value_parser = utf8("--value"))]
    pub value: String,
    /// Lease length; renewed every third of it while CMD runs. A leader that dies is replaced
    /// within it.
    #[arg(long, default_value = "30s", value_parser = duration, value_name = "DUR")]
    pub ttl: Duration,
    /// Campaign at most this long (default: until elected); exit 75 if not elected by then.
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub wait: Option<Duration>,
    /// Stay a candidate: after a lost leadership, or once CMD ends, say how it ended and
    /// campaign again (after a pause from 100 ms, doubled while leaderships last under 10 s,
    /// up to 10 s), and run CMD again when elected; until interrupted.
    #[arg(long)]
    pub again: bool,
    #[command(flatten)]
    pub lease: LeaseFlags,
    /// After the leadership is lost: time between SIGTERM and SIGKILL to CMD (at most 1 day).
    #[arg(long, default_value = "10s", value_parser = kill_after, value_name = "DUR")]
    pub kill_after: Duration,
    /// The program to run, and its arguments, after `--` (passed on byte for byte).
    #[arg(last = true, required = true, value_name = "CMD", value_parser = clap::builder::OsStringValueParser::new())]
    pub command: Vec<std::ffi::OsString>,
}

/// How the lease of `run` and `elect` outlives, or falls short of, CMD's health.
#[derive(Args, Debug, Clone)]
pub struct LeaseFlags {
    /// Renew the lease only while this file was modified less than --heartbeat-timeout ago:
    /// CMD touches it as it makes progress (`touch PATH`, at least every half of that). When
    /// it grows older, the lease is no longer renewed: CMD is stopped as on a lost lease (exit
    /// 76), and the name is free within the timeout and a --ttl of the last touch, even while
    /// CMD hangs on. The start counts as a touch.
    #[arg(long, value_name = "PATH", requires = "heartbeat_timeout")]
    pub heartbeat_file: Option<std::path::PathBuf>,
    /// How old --heartbeat-file may grow before the lease is no longer renewed.
    #[arg(long, value_parser = duration, value_name = "DUR", requires = "heartbeat_file")]
    pub heartbeat_timeout: Option<Duration>,
    /// Keep the name taken this long past the end of a lease that was lost rather than
    /// released (fenced killed or cut off from Redis, a heartbeat gone quiet), so that CMD's
    /// writes still on their way land before the next holder starts: the lock key lives --ttl
    /// and DUR in Redis. A release, when CMD ends, frees the name at once.
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub lock_delay: Option<Duration>,
}

/// A text argument read as the OS gave it, refused in one line that names it when it is not
/// UTF-8 (clap's own check names no argument).
fn utf8(what: &'static str) -> impl clap::builder::TypedValueParser<Value = String> {
    use clap::builder::TypedValueParser as _;
    clap::builder::OsStringValueParser::new().try_map(move |text| {
        text.into_string()
            .map_err(|_| format!("{what} must be UTF-8"))
    })
}

/// `--kill-after`: a duration of at most a day.
fn kill_after(text: &str) -> Result<Duration, String> {
    let d = duration(text)?;
    if d > Duration::from_secs(24 * 3600) {
        return Err(format!("{text:?} is longer than a day"));
    }
    Ok(d)
}

/// Parses `500ms`, `30s`, `5m`, `1h30m`.
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration like 500ms, 30s or 5m ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("5m"), Ok(Duration::from_secs(300)));
        assert!(duration("5").is_err());
        assert!(duration("soon").is_err());
        assert!(duration("-1s").is_err());
    }

    proptest::proptest! {
        /// Any text gets a duration or a one-line message naming it, never a panic.
        #[test]
        fn any_duration_text_parses_or_says_why_in_one_line(text in ".{0,24}") {
            if let Err(message) = duration(&text) {
                proptest::prop_assert!(!message.contains('\n'), "{}", message);
            }
        }

        #[test]
        fn whole_units_parse_exactly(n in 0u64..1_000_000, unit in proptest::sample::select(vec![("ms", 1u64), ("s", 1000), ("m", 60_000)])) {
            proptest::prop_assert_eq!(
                duration(&format!("{n}{}", unit.0)),
                Ok(Duration::from_millis(n * unit.1))
            );
        }
    }

    #[test]
    fn the_command_line_is_well_formed() {
        command().debug_assert();
    }
}
