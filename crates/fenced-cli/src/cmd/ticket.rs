//! Tickets from the command line: a lease handed over by a program (with
//! `LockGuard::into_ticket`) is released or extended here (`fenced release --ticket`,
//! `fenced extend --ticket`), or continued under a command (`fenced run NAME --ticket`).

use std::time::Duration;

use fenced::{Client, LockGuard, UnfencedGuard};

use crate::args::Global;
use crate::cmd::{address, check_url, connect};
use crate::exit::{self, Failure};

/// A lease taken over from a ticket.
pub enum Resumed {
    /// A lock's or a fair lock's.
    Lock(LockGuard),
    /// An unfenced lock's.
    Unfenced(UnfencedGuard),
}

/// Takes over the lease of `ticket` (a lock's, a fair lock's or an unfenced lock's). A stale
/// or made-up ticket is a data error (65), a malformed one a usage error (64).
///
/// A take-over whose outcome stays unknown (a timeout, a lost reply, too few replicas) is
/// repeated for a few timeouts: the same client repeats it as itself. Should it still not be
/// known, the retry ticket is printed on standard output in place of the original, which the
/// take-over may have spent: the lease is never left held by nobody.
pub async fn resume(client: &Client, global: &Global, ticket: &str) -> Result<Resumed, Failure> {
    let give_up_at = tokio::time::Instant::now() + global.timeout * 4;
    loop {
        match resume_once(client, global, ticket).await {
            Err((true, _)) if tokio::time::Instant::now() < give_up_at => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err((true, failure)) => {
                return Err(match client.retry_ticket(ticket) {
                    Some(retry) => {
                        say!("{retry}");
                        Failure::new(
                            failure.code,
                            format!(
                                "{}; the take-over may have happened: use the retry ticket printed on standard output in place of this one",
                                failure.message
                            ),
                        )
                    }
                    None => failure,
                });
            }
            other => return other.map_err(|(_, failure)| failure),
        }
    }
}

/// One take-over; an error says whether its outcome is unknown, and how it is reported.
async fn resume_once(
    client: &Client,
    global: &Global,
    ticket: &str,
) -> Result<Resumed, (bool, Failure)> {
    let server = address(global.redis_url());
    let fail = |e: fenced::Error| match e {
        fenced::Error::NotHeld { name } => (
            false,
            Failure::new(
                exit::DATA,
                format!(
                    "the ticket's lease on {name:?} is no longer held by its owner: it ran out or was released (a stale ticket), or the ticket was not written for it"
                ),
            ),
        ),
        e => (e.is_transient(), Failure::from_lib(e, &server)),
    };
    // The kind is the ticket's second field; `resume` checks the rest.
    if ticket.split('.').nth(1) == Some("unfenced") {
        client
            .resume_unfenced(ticket)
            .await
            .map(Resumed::Unfenced)
            .map_err(fail)
    } else {
        client.resume(ticket).await.map(Resumed::Lock).map_err(fail)
    }
}

/// The name a ticket is for (its last field, hex), if it reads as one.
pub fn name_of(ticket: &str) -> Option<String> {
    let field = ticket.trim().rsplit('.').next()?;
    let bytes = (0..field.len())
        .step_by(2)
        .map(|i| {
            field
                .get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// `fenced release --ticket T`: releases the lease a program handed over.
pub async fn release(global: &Global, ticket: &str) -> Result<u8, Failure> {
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let server = address(global.redis_url());
    let (name, released) = match resume(&client, global, ticket).await? {
        Resumed::Lock(g) => (g.name().to_owned(), g.release().await),
        Resumed::Unfenced(g) => (g.name().to_owned(), g.release().await),
    };
    // A release that failed goes on in the background: give it its chance before exiting.
    client.flush().await;
    released.map_err(|e| Failure::from_lib(e, &server))?;
    say!("released {name:?}");
    Ok(exit::OK)
}

/// `fenced extend --ticket T --ttl DUR`: sets the lease to DUR from now and prints the ticket
/// to use from now on (the old one is superseded by this change).
pub async fn extend(global: &Global, ticket: &str, ttl: Duration) -> Result<u8, Failure> {
    check_url(global.redis_url())?;
    fenced::check_ttl(ttl).map_err(|e| Failure::from_lib(e, ""))?;
    let client = connect(global).await?;
    let server = address(global.redis_url());
    // Whatever the extend answers, the lease is handed back to a ticket, never released:
    // it is not this command's to end.
    let (extended, next) = match resume(&client, global, ticket).await? {
        Resumed::Lock(g) => (g.extend(ttl).await, g.into_ticket()),
        Resumed::Unfenced(g) => (g.extend(ttl).await, g.into_ticket()),
    };
    if let Err(e) = extended {
        client.flush().await;
        // The extend may have applied, and it spent the old ticket either way: the next
        // one is the only ticket that still works.
        if e.is_transient() {
            say!("{next}");
        }
        return Err(Failure::from_lib(e, &server));
    }
    client.flush().await;
    say!("{next}");
    Ok(exit::OK)
}
