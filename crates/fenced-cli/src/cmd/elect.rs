//! `fenced elect NAME -- CMD`: campaign, then run CMD while leader (the supervision of
//! `fenced run`); and `fenced leader NAME [--watch]`: who leads.

use std::time::Duration;

use fenced::election::Candidate;
use fenced::{Leader, WaitPolicy};
use serde_json::json;
use tokio::time::Instant;

use crate::args::{ElectArgs, Global};
use crate::cmd::hold::{self, Hold, Terms};
use crate::cmd::run::{Signals, Under, heartbeat_of, run_held};
use crate::cmd::{address, check_name, check_url, connect};
use crate::exit::{self, Failure, show};

/// How long `--again` waits between a leadership and the next campaign, at first; it doubles
/// each time a leadership ends sooner than [`AGAIN_MAX`], up to that.
const AGAIN_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause of `--again`; a leadership that lasted longer starts again from
/// [`AGAIN_PAUSE`].
const AGAIN_MAX: Duration = Duration::from_secs(10);

/// The pause before the next campaign after a leadership of `led`, following `previous`.
fn next_pause(previous: Option<Duration>, led: Duration) -> Duration {
    match previous {
        Some(p) if led < AGAIN_MAX => (p * 2).min(AGAIN_MAX),
        _ => AGAIN_PAUSE,
    }
}

/// `fenced elect`: exits with CMD's code, 76 if the leadership was lost (without --again),
/// 75 if not elected within --wait, 128+N on signal N.
pub async fn elect(global: &Global, args: &ElectArgs) -> Result<u8, Failure> {
    check_name(&args.name)?;
    check_url(global.redis_url())?;
    fenced::check_ttl(args.ttl).map_err(|e| Failure::from_lib(e, ""))?;
    if args.value.len() > fenced::election::MAX_VALUE_LEN {
        return Err(Failure::usage(format!(
            "--value is {} bytes long; the limit is {}",
            args.value.len(),
            fenced::election::MAX_VALUE_LEN
        )));
    }
    hold::check_lease_flags(&args.lease)?;
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(Failure::usage("no command given after `--`"));
    };
    let mut signals = Signals::new()?;
    let client = connect(global).await?;
    let fail = |e| Failure::from_lib(e, &address(global.redis_url()));
    let election = client
        .election(&args.name)
        .with_ttl(args.ttl)
        .terms_of(None, &args.lease)
        .with_wait(args.wait.map_or(WaitPolicy::FOREVER, WaitPolicy::up_to));
    let mut pause = None;
    loop {
        let asked = Instant::now();
        let campaign = tokio::select! {
            result = election.campaign(args.value.as_str()) => result,
            sig = signals.next() => {
                // Interrupted while campaigning: the place in the queue is given up.
                client.flush().await;
                return Ok(128 + sig as u8);
            }
        };
        let leadership = match campaign {
            Ok(l) => l,
            Err(e) => {
                client.flush().await;
                return Err(fail(e));
            }
        };
        let term = leadership.term();
        if global.json {
            warn!(
                "{}",
                json!({"event": "elected", "name": args.name, "term": term.get(), "value": args.value, "waited_ms": u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX)})
            );
        }
        if global.verbose {
            warn!(
                "fenced: elected in {:?} with term {term} after {}",
                args.name,
                show(asked.elapsed())
            );
        }
        let under = Under {
            name: &args.name,
            program,
            program_args,
            kill_after: args.kill_after,
            max_hold: None,
            heartbeat: heartbeat_of(&args.lease),
            hand_off: false,
            ticket: None,
            env: vec![
                ("FENCED_TERM", term.to_string()),
                ("FENCED_VALUE", args.value.clone()),
            ],
            announced: true,
        };
        let elected = Instant::now();
        let outcome = run_held(
            global,
            &client,
            Hold::Leader(Box::new(leadership)),
            &under,
            &mut signals,
            asked,
        )
        .await;
        let lost = matches!(outcome, Ok(exit::LEASE_LOST))
            || matches!(&outcome, Err(f) if f.code == exit::LEASE_LOST);
        if !args.again || signals.received.is_some() || (outcome.is_err() && !lost) {
            return outcome;
        }
        // A command that ends at once must not make a standby hammer Redis: a pause before
        // each new campaign, doubled while leaderships stay short (the next candidate, if any,
        // leads meanwhile). How the leadership ended is said every time.
        let led = elected.elapsed();
        let wait = next_pause(pause, led);
        pause = Some(wait);
        let how = match &outcome {
            _ if lost => "the leadership was lost".to_owned(),
            Ok(code) => format!("{} exited with code {code}", program.to_string_lossy()),
            Err(f) => f.message.clone(),
        };
        if global.json {
            warn!(
                "{}",
                json!({"event": "ended", "name": args.name, "term": term.get(), "lost": lost, "code": outcome.as_ref().ok(), "led_ms": millis(led), "again_in_ms": millis(wait)})
            );
        } else {
            warn!(
                "fenced: {how} after {} as leader of {:?} (term {term}); campaigning again in {}",
                show(led),
                args.name,
                show(wait)
            );
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            sig = signals.next() => {
                client.flush().await;
                return Ok(128 + sig as u8);
            }
        }
    }
}

/// `fenced leader NAME`: 0 with a leader, 75 without; with `--watch`, one line per change
/// until a signal (128+N).
pub async fn leader(global: &Global, name: &str, watch: bool) -> Result<u8, Failure> {
    check_name(name)?;
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let fail = |e| Failure::from_lib(e, &address(global.redis_url()));
    let election = client.election(name);
    if !watch {
        let status = election.status().await.map_err(fail)?;
        if global.json {
            // `candidates` counts them; `queue` lists them, in the order they will be elected.
            let queue: Vec<_> = status.queue.iter().map(candidate_json).collect();
            say!(
                "{}",
                json!({"election": name, "leader": status.leader.as_ref().map(leader_json), "candidates": status.candidates, "queue": queue})
            );
        } else {
            say!("election:   {name}");
            match &status.leader {
                Some(l) => say!("leader:     {}", describe(l)),
                None => say!("leader:     none"),
            }
            say!("candidates: {}", status.candidates);
            for (i, c) in status.queue.iter().enumerate() {
                say!("            {}. {}", i + 1, describe_candidate(c));
            }
        }
        return Ok(if status.leader.is_some() {
            exit::OK
        } else {
            exit::NOT_ACQUIRED
        });
    }
    let mut signals = Signals::new()?;
    let mut changes = election.observe().map_err(fail)?;
    loop {
        let change = tokio::select! {
            change = changes.next() => change,
            sig = signals.next() => return Ok(128 + sig as u8),
        };
        let Some(leader) = change else {
            return Ok(exit::OK);
        };
        if global.json {
            say!(
                "{}",
                json!({"election": name, "leader": leader.as_ref().map(leader_json)})
            );
        } else {
            let at = humantime::format_rfc3339_millis(std::time::SystemTime::now());
            match &leader {
                Some(l) => say!("{at} {}", describe(l)),
                None => say!("{at} none"),
            }
        }
    }
}

/// `VALUE (term T, since WHEN, DUR of its lease left; N change(s) of leader)`.
fn describe(l: &Leader) -> String {
    format!(
        "{} (term {}, since {}, {} of its lease left; {} change(s) of leader)",
        quoted(&l.value),
        l.term,
        humantime::format_rfc3339_seconds(l.since),
        show(l.lease_left),
        l.transitions
    )
}

/// A value as the output shows it: quoted, or `(no value)` for an empty one.
fn quoted(value: &str) -> String {
    if value.is_empty() {
        "(no value)".to_owned()
    } else {
        format!("{value:?}")
    }
}

/// `VALUE, queued for DUR`: one candidate, for `fenced leader` and `fenced status`.
pub fn describe_candidate(c: &Candidate) -> String {
    let value = c
        .value
        .as_deref()
        .map_or_else(|| "(value not recorded)".to_owned(), quoted);
    match c.queued_for {
        Some(d) => format!("{value}, queued for {}", show(d)),
        None => format!("{value}, queued for an unknown time"),
    }
}

/// One candidate in JSON: its value and how long it has queued (null where its campaign
/// recorded none), since when by the server's clock.
pub fn candidate_json(c: &Candidate) -> serde_json::Value {
    let since_ms = c
        .queued_since
        .map(|t| t.duration_since(std::time::UNIX_EPOCH).map_or(0, millis));
    json!({
        "value": c.value,
        "queued_ms": c.queued_for.map(millis),
        "queued_since_ms": since_ms,
    })
}

fn leader_json(l: &Leader) -> serde_json::Value {
    let since_ms = l
        .since
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    json!({
        "value": l.value,
        "term": l.term.get(),
        "since_ms": since_ms,
        "lease_left_ms": u64::try_from(l.lease_left.as_millis()).unwrap_or(u64::MAX),
        "proclaims": l.proclaims,
        "transitions": l.transitions,
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_while_leaderships_stay_short_and_starts_over_after_a_long_one() {
        let short = Duration::from_millis(5);
        let mut pause = None;
        let mut seen = Vec::new();
        for _ in 0..10 {
            let p = next_pause(pause, short);
            seen.push(p.as_millis());
            pause = Some(p);
        }
        assert_eq!(
            seen,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
        );
        assert_eq!(next_pause(pause, AGAIN_MAX), AGAIN_PAUSE);
    }
}
