//! `fenced status`, `fenced list`, `fenced release --force`.

use fenced::inspect::{LockStatus, NodeStatus, SemaphoreStatus};
use serde_json::{Value, json};

use crate::args::Global;
use crate::cmd::elect::{candidate_json, describe_candidate};
use crate::cmd::{address, check_name, check_url, connect};
use crate::exit::{self, Failure, show};

pub async fn status(global: &Global, name: &str) -> Result<u8, Failure> {
    check_name(name)?;
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let fail = |e| Failure::from_lib(e, &address(global.redis_url()));
    let nodes = client.lock(name).status_by_node().await.map_err(fail)?;
    if nodes.len() > 1 {
        // Redlock: each master's view, and the verdict of a majority.
        return Ok(by_node(global, name, &nodes));
    }
    let status = client.lock(name).status().await.map_err(fail)?;
    // Without scripts too: the library reads these by transaction then.
    let permits = client.semaphore(name, 1).status().await.map_err(fail)?;
    let rw = client.rw_lock(name).status().await.map_err(fail)?;
    let latch = client.latch(name).count().await.map_err(fail)?;
    let queued = client.fair_lock(name).queued().await.map_err(fail)?;
    let election = client.election(name).status().await.map_err(fail)?;
    let readers = Some(&rw).filter(|rw| rw.readers > 0 || rw.waiting_writers > 0);
    let semaphore = Some(&permits).filter(|p| p.holders > 0);
    let leads = Some(&election).filter(|e| e.leader.is_some() || e.candidates > 0);
    // What the name is, from what its keys hold: a semaphore's status does not open with a
    // free lock. A fair lock's holder and a writer share the plain lock's key; their queue
    // or readers tell them apart while there are any.
    let held_as = lock_kind(&status, queued > 0, readers.is_some());
    let mut kinds: Vec<&str> = Vec::new();
    if status.holder.is_some() || readers.is_some() || queued > 0 {
        kinds.push(held_as);
    }
    if semaphore.is_some() {
        kinds.push("semaphore");
    }
    if latch.is_some() {
        kinds.push("latch");
    }
    if leads.is_some() {
        kinds.push("election");
    }
    if global.json {
        let mut value = to_json(&status);
        value["kind"] = json!(kinds.first().map_or("none", |k| json_kind(k)));
        value["kinds"] = json!(kinds.iter().map(|k| json_kind(k)).collect::<Vec<_>>());
        value["semaphore"] = semaphore_json(&permits);
        value["readers"] = json!(rw.readers);
        value["waiting_writers"] = json!(rw.waiting_writers);
        value["latch_count"] = json!(latch);
        value["fair_queue"] = json!(queued);
        value["election"] = json!({
            "leader": election.leader.as_ref().map(|l| l.value.clone()),
            "term": election.leader.as_ref().map(|l| l.term.get()),
            "transitions": election.leader.as_ref().map(|l| l.transitions),
            "candidates": election.candidates,
            "queue": election.queue.iter().map(candidate_json).collect::<Vec<_>>(),
        });
        value["node"] = json!(nodes.first().map(|n| n.node.clone()));
        say!("{value}");
        return Ok(exit::OK);
    }
    say!("name:     {}", status.name);
    say!(
        "kind:     {}",
        if kinds.is_empty() {
            "none: nothing holds, queues on or counts under this name".to_owned()
        } else {
            kinds.join(", ")
        }
    );
    if let Some(n) = nodes.first() {
        say!("node:     {}", n.node);
    }
    // The plain key's lines: for what holds or queues on it, or for a name with nothing.
    if kinds.first() == Some(&held_as) || kinds.is_empty() {
        match &status.holder {
            Some(h) => say!(
                "state:    held by {}{} ({})",
                if readers.is_some() { "a writer, " } else { "" },
                h.owner_prefix,
                h.ttl_left
                    .map_or("no expiry".into(), |t| format!("{} left", show(t)))
            ),
            None => say!("state:    free"),
        }
        if status.holds > 1 {
            say!("holds:    {} (re-entered)", status.holds);
        }
        say!("waiting:  {} client(s)", status.waiting_clients);
    }
    if let Some(rw) = readers {
        say!(
            "readers:  {} reading, {} writer(s) waiting",
            rw.readers,
            rw.waiting_writers
        );
    }
    if queued > 0 {
        say!("queue:    {queued} fair waiter(s), served in order");
    }
    if let Some(permits) = semaphore {
        say!(
            "permits:  {} held by {} holder(s){}",
            permits.held,
            permits.holders,
            permits.next_expiry.map_or(String::new(), |t| format!(
                "; the first lease ends in {}",
                show(t)
            ))
        );
    }
    if let Some(election) = leads {
        if let Some(l) = &election.leader {
            say!(
                "election: led by {:?} in term {}, {} of its lease left; {} candidate(s); {} change(s) of leader",
                l.value,
                l.term,
                show(l.lease_left),
                election.candidates,
                l.transitions
            );
        } else {
            say!("election: no leader; {} candidate(s)", election.candidates);
        }
        // The candidates, in the order they will be elected.
        for (i, c) in election.queue.iter().enumerate() {
            say!("          {}. {}", i + 1, describe_candidate(c));
        }
    }
    if let Some(left) = latch {
        say!(
            "latch:    {}",
            if left == 0 {
                "open".to_owned()
            } else {
                format!("{left} count(s) left")
            }
        );
    }
    match status.fence {
        Some(t) => say!("fence:    {t} (every token handed out is at or below it)"),
        None if kinds.is_empty() || kinds.first() == Some(&held_as) => {
            say!("fence:    none (no grant within the fence retention)")
        }
        None => {}
    }
    Ok(exit::OK)
}

/// What holds the plain lock key, as far as the other keys tell: a re-entrant lock counts its
/// holds, a fair lock has a queue, a read-write lock has readers or waiting writers. A fair
/// lock's holder or a writer with nobody queued behind it reads as a lock: they hold the
/// same key.
fn lock_kind(status: &LockStatus, queued: bool, readers: bool) -> &'static str {
    if readers {
        "read-write lock"
    } else if queued {
        "fair lock"
    } else if status.holds > 0 {
        "re-entrant lock"
    } else {
        "lock"
    }
}

/// A kind's name in JSON: one word, as `list --json` names them.
fn json_kind(kind: &str) -> &str {
    match kind {
        "re-entrant lock" => "reentrant_lock",
        "fair lock" => "fair_lock",
        "read-write lock" => "rw_lock",
        other => other,
    }
}

/// `fenced status` on several masters (Redlock): one line per master, then who holds the
/// lock on a majority, if anyone.
fn by_node(global: &Global, name: &str, nodes: &[NodeStatus]) -> u8 {
    let quorum = nodes.len() / 2 + 1;
    let owners: Vec<Option<&str>> = nodes
        .iter()
        .map(|n| {
            n.status
                .as_ref()
                .ok()
                .and_then(|s| s.holder.as_ref())
                .map(|h| h.owner_prefix.as_str())
        })
        .collect();
    let on_quorum = owners
        .iter()
        .flatten()
        .find(|o| owners.iter().filter(|x| x == &&Some(**o)).count() >= quorum)
        .copied();
    let free = nodes
        .iter()
        .filter(|n| n.status.as_ref().is_ok_and(|s| s.holder.is_none()))
        .count();
    let one_line = |e: &fenced::Error| e.to_string().replace('\n', " ");
    if global.json {
        let each: Vec<Value> = nodes
            .iter()
            .map(|n| match &n.status {
                Ok(s) => {
                    let mut v = to_json(s);
                    v["node"] = json!(n.node);
                    v
                }
                Err(e) => json!({"node": n.node, "error": one_line(e)}),
            })
            .collect();
        say!(
            "{}",
            json!({"kind": "lock", "name": name, "masters": nodes.len(), "quorum": quorum,
                   "held": on_quorum.is_some(), "holder": on_quorum, "nodes": each})
        );
        return exit::OK;
    }
    say!(
        "lock:     {name} (Redlock over {} masters, quorum {quorum})",
        nodes.len()
    );
    for n in nodes {
        match &n.status {
            Ok(s) => say!(
                "  {}: {}{}",
                n.node,
                s.holder.as_ref().map_or("free".to_owned(), |h| format!(
                    "held by {} ({})",
                    h.owner_prefix,
                    h.ttl_left
                        .map_or("no expiry".into(), |t| format!("{} left", show(t)))
                )),
                s.fence.map_or(String::new(), |t| format!(", fence {t}"))
            ),
            Err(e) => say!("  {}: unreadable: {}", n.node, one_line(e)),
        }
    }
    match on_quorum {
        Some(owner) => say!("state:    held by {owner} on a majority"),
        None if free >= quorum => say!("state:    free on a majority"),
        None => say!(
            "state:    no majority agrees (masters unreadable, or holding for different owners)"
        ),
    }
    exit::OK
}

pub async fn list(global: &Global, pattern: &str) -> Result<u8, Failure> {
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let fail = |e| Failure::from_lib(e, &address(global.redis_url()));
    let listing = client.list(pattern).await.map_err(fail)?;
    let (locks, semaphores, rw, queues, latches, elections, unreadable) = (
        listing.locks,
        listing.semaphores,
        listing.rw_locks,
        listing.fair_queues,
        listing.latches,
        listing.elections,
        listing.unreadable,
    );
    // Keys of another type are named after the rest is listed, and make the exit code 65.
    for u in &unreadable {
        warn!(
            "fenced: {} {:?}: {}",
            u.kind.replace('_', " "),
            u.name,
            exit::wrong_type(&u.key)
        );
    }
    let done = if unreadable.is_empty() {
        exit::OK
    } else {
        exit::DATA
    };
    // A lock row's kind, from the queues and readers listed with it (see `lock_kind`).
    let held_as = |l: &LockStatus| {
        let queued = queues.iter().any(|q| q.name == l.name);
        let read = rw.iter().any(|r| r.name == l.name);
        lock_kind(l, queued, read)
    };
    if global.json {
        let all = locks
            .iter()
            .map(|l| {
                let mut v = to_json(l);
                v["held_as"] = json!(json_kind(held_as(l)));
                v
            })
            .chain(semaphores.iter().map(semaphore_json))
            .chain(rw.iter().map(|r| {
                json!({"kind": "rw_lock", "name": r.name, "readers": r.readers,
                       "waiting_writers": r.waiting_writers})
            }))
            .chain(
                queues
                    .iter()
                    .map(|q| json!({"kind": "fair_queue", "name": q.name, "queued": q.queued})),
            )
            .chain(
                latches
                    .iter()
                    .map(|l| json!({"kind": "latch", "name": l.name, "count": l.count})),
            )
            .chain(elections.iter().map(|e| {
                let leader = e.status.leader.as_ref();
                json!({"kind": "election", "name": e.name,
                       "leader": leader.map(|l| l.value.clone()),
                       "term": leader.map(|l| l.term.get()),
                       "lease_left_ms": leader.map(|l| u64::try_from(l.lease_left.as_millis()).unwrap_or(u64::MAX)),
                       "candidates": e.status.candidates})
            }))
            .chain(unreadable.iter().map(
                |u| json!({"kind": "unreadable", "name": u.name, "key": u.key, "read_as": u.kind}),
            ));
        say!("{}", Value::Array(all.collect()));
        return Ok(done);
    }
    let mut tables = Vec::new();
    if !locks.is_empty() {
        let rows = locks.iter().map(|l| {
            let (holder, ttl) = match &l.holder {
                Some(h) => (
                    h.owner_prefix.clone(),
                    h.ttl_left.map_or("none".into(), show),
                ),
                None => ("-".into(), "-".into()),
            };
            let token = l.fence.map_or("-".into(), |t| t.to_string());
            let holds = if l.holds > 1 {
                l.holds.to_string()
            } else {
                "-".into()
            };
            vec![
                l.name.clone(),
                held_as(l).replace("read-write lock", "rw writer"),
                holder,
                ttl,
                token,
                holds,
                l.waiting_clients.to_string(),
            ]
        });
        let head = [
            "NAME", "KIND", "HOLDER", "TTL LEFT", "FENCE", "HOLDS", "WAITING",
        ];
        tables.push(table(&head, rows));
    }
    if !semaphores.is_empty() {
        let rows = semaphores.iter().map(|s| {
            let next = s.next_expiry.map_or("-".into(), show);
            vec![
                s.name.clone(),
                s.held.to_string(),
                s.holders.to_string(),
                next,
            ]
        });
        tables.push(table(&["SEMAPHORE", "HELD", "HOLDERS", "NEXT END"], rows));
    }
    if !rw.is_empty() {
        let rows = rw.iter().map(|r| {
            vec![
                r.name.clone(),
                r.readers.to_string(),
                r.waiting_writers.to_string(),
            ]
        });
        tables.push(table(&["RW LOCK", "READERS", "WRITERS WAITING"], rows));
    }
    if !queues.is_empty() {
        let rows = queues
            .iter()
            .map(|q| vec![q.name.clone(), q.queued.to_string()]);
        tables.push(table(&["FAIR LOCK", "QUEUED"], rows));
    }
    if !latches.is_empty() {
        let rows = latches.iter().map(|l| {
            let state = if l.count == 0 {
                "open".to_owned()
            } else {
                l.count.to_string()
            };
            vec![l.name.clone(), state]
        });
        tables.push(table(&["LATCH", "COUNT LEFT"], rows));
    }
    if !elections.is_empty() {
        let rows = elections.iter().map(|e| {
            let (leader, term, left) = match &e.status.leader {
                Some(l) => (l.value.clone(), l.term.to_string(), show(l.lease_left)),
                None => ("-".into(), "-".into(), "-".into()),
            };
            vec![
                e.name.clone(),
                leader,
                term,
                left,
                e.status.candidates.to_string(),
            ]
        });
        tables.push(table(
            &["ELECTION", "LEADER", "TERM", "TTL LEFT", "CANDIDATES"],
            rows,
        ));
    }
    if tables.is_empty() {
        say!(
            "nothing held, queued or counting matches {pattern:?} in namespace {:?}",
            global.namespace
        );
        return Ok(done);
    }
    say!("{}", tables.join("\n").trim_end());
    Ok(done)
}

/// A table: the first column left-aligned, the others right-aligned, each as wide as its
/// widest cell.
fn table(head: &[&str], rows: impl Iterator<Item = Vec<String>>) -> String {
    let mut all: Vec<Vec<String>> = vec![head.iter().map(|h| (*h).to_owned()).collect()];
    all.extend(rows);
    let widths: Vec<usize> = (0..head.len())
        .map(|c| {
            all.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &all {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if c == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

pub async fn release(global: &Global, name: &str, force: u8) -> Result<u8, Failure> {
    check_name(name)?;
    if force == 0 {
        return Err(Failure::usage(format!(
            "refusing to break {name:?} without --force: it deletes the lock whoever holds it, and a live holder may still be writing (only fencing tokens protect the resource then); see who holds it with `fenced status {name}`"
        )));
    }
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let fail = |e| Failure::from_lib(e, &address(global.redis_url()));
    // Another program's data where the lock keeps its own (its key, its holds): with --force
    // twice, deleted one key at a time, and the lock broken then.
    let mut deleted = 0;
    let was = loop {
        match client.lock(name).force_release().await {
            Err(fenced::Error::WrongType { key, .. }) if force >= 2 && deleted < 2 => {
                delete_foreign(&client, &key).await.map_err(fail)?;
                deleted += 1;
            }
            Err(fenced::Error::WrongType { key, .. }) => {
                return Err(Failure::new(
                    exit::DATA,
                    format!(
                        "the key {key:?} holds another program's data (WRONGTYPE): give --force twice to delete it, or use another name or --namespace"
                    ),
                ));
            }
            other => break other.map_err(fail)?,
        }
    };
    match was {
        Some(owner) => say!("released {name:?}, which was held by {owner}"),
        None => say!("{name:?} was not held; nothing to release"),
    }
    Ok(exit::OK)
}

/// Deletes `key`, a lock's key (or its holds) that holds another program's data, in a
/// transaction on it: what is deleted is what was read, and neither a key gone since nor one
/// of the type fenced keeps there (a lock taken since) is touched.
async fn delete_foreign(client: &fenced::Client, key: &str) -> fenced::Result<()> {
    let ours = if key.ends_with('}') { "string" } else { "hash" };
    let found = client
        .transaction(&[key], |tx| async move {
            let found: String = tx.query(fenced::redis::cmd("TYPE").arg(key)).await?;
            if found == "none" || found == ours {
                return Ok::<_, fenced::Error>(None);
            }
            tx.del(key);
            Ok(Some(found))
        })
        .await?;
    if let Some(found) = found {
        say!("deleted the key {key:?}, which held another program's data (a {found})");
    }
    Ok(())
}

fn semaphore_json(s: &SemaphoreStatus) -> Value {
    json!({
        "kind": "semaphore",
        "name": s.name,
        "permits_held": s.held,
        "holders": s.holders,
        "next_expiry_ms": s.next_expiry.map(|t| t.as_millis() as u64),
    })
}

fn to_json(s: &LockStatus) -> Value {
    json!({
        "kind": "lock",
        "name": s.name,
        "holds": s.holds,
        "held": s.holder.is_some(),
        "holder": s.holder.as_ref().map(|h| h.owner_prefix.clone()),
        "ttl_left_ms": s.holder.as_ref().and_then(|h| h.ttl_left).map(|t| t.as_millis() as u64),
        "fence": s.fence.map(|t| t.get()),
        "waiting_clients": s.waiting_clients,
    })
}
