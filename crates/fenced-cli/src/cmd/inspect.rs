//! `fenced status`, `fenced list`, `fenced release --force`.

use fenced::{LockStatus, SemaphoreStatus};
use serde_json::{Value, json};

use crate::args::Global;
use crate::cmd::{address, check_name, check_url, connect};
use crate::exit::{self, Failure, show};

pub async fn status(global: &Global, name: &str) -> Result<u8, Failure> {
    check_name(name)?;
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let fail = |e| Failure::from_lib(e, &address(global.redis_url()));
    let status = client.lock(name).status().await.map_err(fail)?;
    let permits = client.semaphore(name, 1).status().await.map_err(fail)?;
    let rw = client.rw_lock(name).readers().await.map_err(fail)?;
    let latch = client.latch(name).count().await.map_err(fail)?;
    let queued = client.fair_lock(name).queued().await.map_err(fail)?;
    if global.json {
        let mut value = to_json(&status);
        value["semaphore"] = semaphore_json(&permits);
        value["readers"] = json!(rw.readers);
        value["waiting_writers"] = json!(rw.waiting_writers);
        value["latch_count"] = json!(latch);
        value["fair_queue"] = json!(queued);
        say!("{value}");
    } else {
        say!("lock:     {}", status.name);
        match &status.holder {
            Some(h) => say!(
                "state:    held by {} ({})",
                h.owner_prefix,
                h.ttl_left
                    .map_or("no expiry".into(), |t| format!("{} left", show(t)))
            ),
            None => say!("state:    free"),
        }
        match status.last_fencing_token {
            Some(t) => say!("fencing:  last token {t}"),
            None => say!("fencing:  no token handed out recently"),
        }
        if status.holds > 1 {
            say!("holds:    {} (re-entered)", status.holds);
        }
        say!("waiting:  {} client(s)", status.waiting_clients);
        if rw.readers > 0 || rw.waiting_writers > 0 {
            say!(
                "readers:  {} reading, {} writer(s) waiting",
                rw.readers,
                rw.waiting_writers
            );
        }
        if queued > 0 {
            say!("queue:    {queued} fair waiter(s), served in order");
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
        if permits.holders > 0 {
            say!(
                "permits:  {} held by {} holder(s) of the semaphore {:?}{}",
                permits.held,
                permits.holders,
                permits.name,
                permits.next_expiry.map_or(String::new(), |t| format!(
                    "; the first lease ends in {}",
                    show(t)
                ))
            );
        }
    }
    Ok(exit::OK)
}

pub async fn list(global: &Global, pattern: &str) -> Result<u8, Failure> {
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let fail = |e| Failure::from_lib(e, &address(global.redis_url()));
    let locks = client.locks(pattern).await.map_err(fail)?;
    let semaphores = client.semaphores(pattern).await.map_err(fail)?;
    if global.json {
        let all = locks
            .iter()
            .map(to_json)
            .chain(semaphores.iter().map(semaphore_json));
        say!("{}", Value::Array(all.collect()));
        return Ok(exit::OK);
    }
    if locks.is_empty() && semaphores.is_empty() {
        say!(
            "no held locks or semaphores match {pattern:?} in namespace {:?}",
            global.namespace
        );
        return Ok(exit::OK);
    }
    if !semaphores.is_empty() {
        let width = semaphores
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(4)
            .max(9);
        say!(
            "{:<width$}  {:>7}  {:>7}  {:>10}",
            "SEMAPHORE",
            "HELD",
            "HOLDERS",
            "NEXT END"
        );
        for s in &semaphores {
            let next = s.next_expiry.map_or("-".into(), show);
            say!(
                "{:<width$}  {:>7}  {:>7}  {next:>10}",
                s.name,
                s.held,
                s.holders
            );
        }
        if locks.is_empty() {
            return Ok(exit::OK);
        }
        say!("");
    }
    let width = locks.iter().map(|l| l.name.len()).max().unwrap_or(4).max(4);
    say!(
        "{:<width$}  {:<8}  {:>10}  {:>20}  {:>7}",
        "NAME",
        "HOLDER",
        "TTL LEFT",
        "LAST TOKEN",
        "WAITING"
    );
    for l in &locks {
        let (holder, ttl) = match &l.holder {
            Some(h) => (
                h.owner_prefix.clone(),
                h.ttl_left.map_or("none".into(), show),
            ),
            None => ("-".into(), "-".into()),
        };
        let token = l.last_fencing_token.map_or("-".into(), |t| t.to_string());
        say!(
            "{:<width$}  {holder:<8}  {ttl:>10}  {token:>20}  {:>7}",
            l.name,
            l.waiting_clients
        );
    }
    Ok(exit::OK)
}

pub async fn release(global: &Global, name: &str, force: bool) -> Result<u8, Failure> {
    check_name(name)?;
    if !force {
        return Err(Failure::usage(format!(
            "refusing to break {name:?} without --force: it deletes the lock whoever holds it, and a live holder may still be writing (only fencing tokens protect the resource then); see who holds it with `fenced status {name}`"
        )));
    }
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let was = client
        .lock(name)
        .force_release()
        .await
        .map_err(|e| Failure::from_lib(e, &address(global.redis_url())))?;
    match was {
        Some(owner) => say!("released {name:?}, which was held by {owner}"),
        None => say!("{name:?} was not held; nothing to release"),
    }
    Ok(exit::OK)
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
        "last_fencing_token": s.last_fencing_token.map(|t| t.get()),
        "waiting_clients": s.waiting_clients,
    })
}
