//! Tickets: a held lease handed from one process to another. A web request takes a lock and
//! queues the work with a ticket; a worker resumes the lease from it, finishes the work and
//! releases.
//!
//! A ticket is text: `fenced1.<kind>.<ttl ms>.<epoch>.<token>.<owner>.<hex namespace>.<hex
//! name>`. It carries the lease's owner token, which is what releasing or extending it takes:
//! treat a ticket as a secret, as the holder's own. A ticket resumes only while its lease is
//! still held by that owner; a lease re-granted since (its ticket is stale), a made-up owner or
//! a ticket of another namespace is refused, and never touches another holder's lease.
//!
//! A retry ticket has one more field after the owner, the marks a take-over of unknown outcome
//! may have left, joined by `-`: `fenced1.<kind>.<ttl ms>.<epoch>.<token>.<owner>.<marks>.<hex
//! namespace>.<hex name>`. It repeats that very take-over, which the original ticket no longer
//! can ([`Client::retry_ticket`](crate::Client::retry_ticket)).

use std::sync::Arc;

use crate::core::{Core, Held};
use crate::error::{Error, Result};
use crate::fair::FairLock;
use crate::guard::LockGuard;
use crate::keys::validate_name;
use crate::kind::LeaseKind;
use crate::lock::Lock;
use crate::token::{FencingToken, OwnerToken, hex};
use crate::unfenced::UnfencedGuard;

/// The first field of every ticket: its format's version.
const VERSION: &str = "fenced1";

/// A parsed ticket.
struct Ticket {
    kind: String,
    ttl: std::time::Duration,
    epoch: u64,
    token: FencingToken,
    owner: OwnerToken,
    /// A retry ticket's: the marks the take-over it repeats may have left.
    marks: Vec<OwnerToken>,
    namespace: String,
    name: String,
}

impl Ticket {
    /// The ticket's text, with `marks` as a retry ticket's.
    fn text(&self, marks: &[OwnerToken]) -> String {
        let nonce = if marks.is_empty() {
            String::new()
        } else {
            let marks: Vec<&str> = marks.iter().map(OwnerToken::as_str).collect();
            format!("{}.", marks.join("-"))
        };
        format!(
            "{VERSION}.{}.{}.{}.{}.{}.{nonce}{}.{}",
            self.kind,
            self.ttl.as_millis(),
            self.epoch,
            self.token.get(),
            self.owner.as_str(),
            hex(self.namespace.as_bytes()),
            hex(self.name.as_bytes()),
        )
    }
}

/// Writes a ticket for a lease handed off by `held`.
pub(crate) fn write(namespace: &str, held: Held) -> String {
    let name = held.lease().name().to_owned();
    let token = held.lease().fencing_token();
    let (kind, owner, ttl, epoch) = held.hand_off();
    Ticket {
        kind: kind
            .ticketed()
            .map_or("lock", |t| t.ticket_kind())
            .to_owned(),
        ttl,
        epoch,
        token,
        owner,
        marks: Vec::new(),
        namespace: namespace.to_owned(),
        name,
    }
    .text(&[])
}

fn parse(text: &str) -> Result<Ticket> {
    let bad = |what: &str| {
        Error::invalid(format!(
            "not a fenced ticket ({what}); a ticket is passed on exactly as `into_ticket` wrote it"
        ))
    };
    let fields: Vec<&str> = text.trim().split('.').collect();
    let (version, kind, ttl, epoch, token, owner, nonce, namespace, name) = match fields[..] {
        [version, kind, ttl, epoch, token, owner, namespace, name] => (
            version, kind, ttl, epoch, token, owner, None, namespace, name,
        ),
        [
            version,
            kind,
            ttl,
            epoch,
            token,
            owner,
            nonce,
            namespace,
            name,
        ] => (
            version,
            kind,
            ttl,
            epoch,
            token,
            owner,
            Some(nonce),
            namespace,
            name,
        ),
        _ => return Err(bad("it has the wrong number of fields: truncated?")),
    };
    if version != VERSION {
        return Err(bad("unknown version"));
    }
    let number = |field: &str, what: &str| field.parse::<u64>().map_err(|_| bad(what));
    let unhex = |field: &str, what: &str| {
        let bytes = (0..field.len())
            .step_by(2)
            .map(|i| {
                field
                    .get(i..i + 2)
                    .and_then(|d| u8::from_str_radix(d, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| bad(what))?;
        String::from_utf8(bytes).map_err(|_| bad(what))
    };
    let ttl = std::time::Duration::from_millis(number(ttl, "its ttl")?);
    // Epochs count the extends of one lease: far below 2^53, where Lua's numbers stop being
    // exact.
    let epoch = number(epoch, "its epoch")?;
    if epoch >= 1 << 52 {
        return Err(bad("its epoch"));
    }
    crate::options::validate_ttl(ttl)?;
    Ok(Ticket {
        kind: kind.to_owned(),
        ttl,
        epoch,
        token: FencingToken::new(number(token, "its token")?),
        owner: OwnerToken::parse(owner).ok_or_else(|| bad("its owner"))?,
        marks: match nonce {
            // A handful at most: one per process that retried the take-over.
            Some(marks) if marks.split('-').count() <= 64 => marks
                .split('-')
                .map(|m| OwnerToken::parse(m).ok_or_else(|| bad("its marks")))
                .collect::<Result<_>>()?,
            Some(_) => return Err(bad("its marks")),
            None => Vec::new(),
        },
        namespace: unhex(namespace, "its namespace")?,
        name: unhex(name, "its name")?,
    })
}

/// [`Client::resume`](crate::Client::resume).
pub(crate) async fn resume(core: &Arc<Core>, ticket: &str) -> Result<LockGuard> {
    let ticket = parse_for(core, ticket, &["lock", "fair"])?;
    let kind: Arc<dyn LeaseKind> = match ticket.kind.as_str() {
        "fair" => Arc::new(FairLock::new(core, ticket.name.clone()).ticket_kind()),
        _ => Arc::new(Lock::new(core, ticket.name.clone()).exclusive_kind()),
    };
    resume_held(core, kind, ticket).await.map(LockGuard::new)
}

/// [`Client::resume_unfenced`](crate::Client::resume_unfenced).
pub(crate) async fn resume_unfenced(core: &Arc<Core>, ticket: &str) -> Result<UnfencedGuard> {
    let ticket = parse_for(core, ticket, &["unfenced"])?;
    let kind = Lock::new(core, ticket.name.clone()).unfenced().kind();
    resume_held(core, Arc::new(kind), ticket)
        .await
        .map(UnfencedGuard::new)
}

/// `text` parsed, if it is a ticket of one of `kinds` in this client's namespace.
fn parse_for(core: &Core, text: &str, kinds: &[&str]) -> Result<Ticket> {
    let ticket = parse(text)?;
    if !kinds.contains(&ticket.kind.as_str()) {
        return Err(Error::invalid(format!(
            "this is a ticket of a {} lease; resume it with {}",
            ticket.kind,
            if ticket.kind == "unfenced" {
                "resume_unfenced"
            } else {
                "resume"
            }
        )));
    }
    let namespace = &core.options().namespace;
    if &ticket.namespace != namespace {
        return Err(Error::invalid(format!(
            "the ticket is for namespace {:?}, this client's is {:?}",
            ticket.namespace, namespace
        )));
    }
    validate_name("lock", &ticket.name)?;
    Ok(ticket)
}

async fn resume_held(core: &Arc<Core>, kind: Arc<dyn LeaseKind>, ticket: Ticket) -> Result<Held> {
    core.resume(
        kind,
        (ticket.owner, ticket.token),
        ticket.ttl,
        ticket.epoch,
        ticket.marks,
    )
    .await
}

/// [`Client::retry_ticket`](crate::Client::retry_ticket).
pub(crate) fn retry_ticket(core: &Core, ticket: &str) -> Option<String> {
    let ticket = parse(ticket).ok()?;
    let marks = core.retry_take_over(&ticket.owner, ticket.epoch)?;
    Some(ticket.text(&marks))
}

impl LockGuard {
    /// Hands this lease to another process: the text to pass on (a queue message, a job's
    /// arguments), from which [`Client::resume`](crate::Client::resume) takes it over. From now on
    /// this process neither renews nor releases it, and its [`Lease`](crate::Lease) clones say it
    /// ended; the lease lives on for its ttl, in which the other process must resume it.
    ///
    /// The ticket holds the lease's owner token: whoever has it can release or extend the
    /// lease. Keep it as secret as the work's own credentials.
    pub fn into_ticket(self) -> String {
        let namespace = self.held().core_namespace();
        write(&namespace, self.into_held())
    }
}

impl UnfencedGuard {
    /// [`LockGuard::into_ticket`] for an unfenced lease; resume it with
    /// [`Client::resume_unfenced`](crate::Client::resume_unfenced).
    pub fn into_ticket(self) -> String {
        let namespace = self.held().core_namespace();
        write(&namespace, self.into_held())
    }
}
