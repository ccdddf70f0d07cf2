//! `fenced status`, `fenced list`, `fenced release --force`.

use fenced::LockStatus;
use serde_json::{Value, json};

use crate::args::Global;
use crate::cmd::{address, check_name, check_url, connect};
use crate::exit::{self, Failure, show};

pub async fn status(global: &Global, name: &str) -> Result<u8, Failure> {
    check_name(name)?;
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let status = client
        .lock(name)
        .status()
        .await
        .map_err(|e| Failure::from_lib(e, &address(global.redis_url())))?;
    if global.json {
        say!("{}", to_json(&status));
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
        say!("waiting:  {} client(s)", status.waiting_clients);
    }
    Ok(exit::OK)
}

pub async fn list(global: &Global, pattern: &str) -> Result<u8, Failure> {
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let locks = client
        .locks(pattern)
        .await
        .map_err(|e| Failure::from_lib(e, &address(global.redis_url())))?;
    if global.json {
        say!("{}", Value::Array(locks.iter().map(to_json).collect()));
        return Ok(exit::OK);
    }
    if locks.is_empty() {
        say!(
            "no held locks match {pattern:?} in namespace {:?}",
            global.namespace
        );
        return Ok(exit::OK);
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

fn to_json(s: &LockStatus) -> Value {
    json!({
        "name": s.name,
        "held": s.holder.is_some(),
        "holder": s.holder.as_ref().map(|h| h.owner_prefix.clone()),
        "ttl_left_ms": s.holder.as_ref().and_then(|h| h.ttl_left).map(|t| t.as_millis() as u64),
        "last_fencing_token": s.last_fencing_token.map(|t| t.get()),
        "waiting_clients": s.waiting_clients,
    })
}
