//! The fence: one stream per name (`XADD fence MAXLEN 0 *`), appended to by every grant of
//! every primitive, by script or by transaction. Tokens strictly increase across every way a
//! fence is lost or put back older (deleted, flushed, restored by `RESTORE`, reloaded from a
//! stale append-only file, a restart from an older snapshot or append-only file, a clock far
//! behind the fence), a fence lost in the same millisecond as a grant included, and a fence
//! key that is no fence answers `WrongType` naming it.

use std::time::Duration;

use fenced::{Client, Error, FencedGuard, LeaseGuard};
use fenced_testkit::RedisServer;
use tokio::time::Instant;

use crate::acl::LOCK_COMMANDS;
use crate::acl_family::user;
use crate::support::{calls, client, lock_key, raw, server};

/// A client that grants by script only.
async fn by_script(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .counted_grants(false)
        .connect()
        .await
        .unwrap()
}

async fn command(conn: &mut redis::aio::MultiplexedConnection, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query_async(conn).await.unwrap();
}

/// Every primitive that hands out tokens, and the way the plain lock is granted.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// By transaction, the default.
    Lock,
    /// By script (`counted_grants(false)`).
    LockByScript,
    Reentrant,
    Fair,
    RwWrite,
    RwRead,
    Semaphore,
    Election,
    Multi,
}

const KINDS: [Kind; 9] = [
    Kind::Lock,
    Kind::LockByScript,
    Kind::Reentrant,
    Kind::Fair,
    Kind::RwWrite,
    Kind::RwRead,
    Kind::Semaphore,
    Kind::Election,
    Kind::Multi,
];

impl Kind {
    fn name(self) -> String {
        format!("{self:?}").to_lowercase()
    }

    /// The key of this kind's fence, for its name.
    fn fence(self) -> String {
        let name = self.name();
        match self {
            Kind::Semaphore => format!("fenced:{{{name}}}:permits:fence"),
            Kind::Election => format!("fenced:election:{{{name}}}:fence"),
            _ => format!("fenced:{{{name}}}:fence"),
        }
    }

    /// One grant and its release: the token.
    async fn grant(self, c: &Client, by_script: &Client) -> Result<u64, Error> {
        let name = self.name();
        let token = match self {
            Kind::Lock => {
                let g = c.lock(&name).acquire().await?;
                let t = g.fencing_token();
                g.release().await?;
                t
            }
            Kind::LockByScript => {
                let g = by_script.lock(&name).acquire().await?;
                let t = g.fencing_token();
                g.release().await?;
                t
            }
            Kind::Reentrant => {
                let g = c.reentrant_lock(&name).acquire().await?;
                let t = g.fencing_token();
                g.release().await?;
                t
            }
            Kind::Fair => {
                let g = c.fair_lock(&name).acquire().await?;
                let t = g.fencing_token();
                g.release().await?;
                t
            }
            Kind::RwWrite => {
                let g = c.rw_lock(&name).write().await?;
                let t = g.fencing_token();
                g.release().await?;
                t
            }
            Kind::RwRead => {
                let g = c.rw_lock(&name).read().await?;
                let t = g.fencing_token();
                g.release().await?;
                t
            }
            Kind::Semaphore => {
                let g = c.semaphore(&name, 2).acquire().await?;
                let t = g.fencing_token();
                g.release().await?;
                t
            }
            Kind::Election => {
                let l = c.election(&name).campaign("me").await?;
                let t = l.term();
                l.resign().await?;
                t
            }
            Kind::Multi => {
                let g = c
                    .multi_lock([name.clone(), format!("{name}-b")])?
                    .acquire()
                    .await?;
                let t = g.fencing_token();
                g.release().await?;
                t
            }
        };
        Ok(token.get())
    }
}

/// `n` grants of every kind: the tokens of each, in order.
async fn every_kind(c: &Client, s: &Client, n: usize) -> Vec<Vec<u64>> {
    let mut all = Vec::new();
    for kind in KINDS {
        let mut tokens = Vec::new();
        for _ in 0..n {
            tokens.push(kind.grant(c, s).await.unwrap());
        }
        all.push(tokens);
    }
    all
}

/// A grant of every kind, retried while the server comes back: each must exceed every
/// earlier token of its kind.
async fn exceed(c: &Client, s: &Client, earlier: &[Vec<u64>], what: &str) {
    for (kind, earlier) in KINDS.iter().zip(earlier) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let token = loop {
            match kind.grant(c, s).await {
                Ok(token) => break token,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "{what}: {kind:?} never granted: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let last = earlier.iter().copied().max().unwrap_or(0);
        assert!(
            token > last,
            "{what}: {kind:?}'s token {token} must exceed every earlier one ({earlier:?})"
        );
        // Each token is below 2^53: JSON and JavaScript carry it exactly.
        assert!(token < 1 << 53, "{token}");
    }
}

/// Every kind's tokens so far, and more after them.
fn then(mut before: Vec<Vec<u64>>, after: Vec<Vec<u64>>) -> Vec<Vec<u64>> {
    for (b, a) in before.iter_mut().zip(after) {
        b.extend(a);
    }
    before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_grant_is_one_transaction_and_its_token_the_server_clocks() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let before = s * 1_000_000 + us;
    let (exec, evalsha) = (
        calls(&mut conn, "exec").await,
        calls(&mut conn, "evalsha").await,
    );
    let mut last = 0;
    for _ in 0..10 {
        let g = c.lock("job").acquire().await.unwrap();
        assert!(g.fencing_token().get() > last);
        last = g.fencing_token().get();
        g.release().await.unwrap();
    }
    // One transaction a grant, the first one's included (and a probe's, at most).
    let transactions = calls(&mut conn, "exec").await - exec;
    assert!((10..=11).contains(&transactions), "{transactions}");
    // Only the releases run a script (`release.lua`, where the server has no `DELIFEQ`), and
    // the first grant, whose script starts the name's fence one ms past the clock.
    assert!(calls(&mut conn, "evalsha").await - evalsha <= 11);
    assert!(
        last / 1000 >= before / 1000,
        "a token is the server clock's ms × 1000 and a sequence: {last}, {before} µs"
    );
}

/// The commands `first_grants_cost_one_transaction_and_one_script` counts.
const COUNTED: [&str; 5] = ["multi", "exec", "evalsha", "script|load", "watch"];

/// How many times the server has run each of [`COUNTED`].
async fn counted(conn: &mut redis::aio::MultiplexedConnection) -> [u64; 5] {
    let mut counts = [0; 5];
    for (count, command) in counts.iter_mut().zip(COUNTED) {
        *count = calls(conn, command).await;
    }
    counts
}

/// The first grant of a name by transaction, where the server runs scripts: the
/// transaction, which finds no fence, then one script that starts it one ms past the clock
/// while the lease is held. Two round trips: no transaction more, no script load, no mint
/// under `WATCH`. Each round loses the fence after a release, so every grant is a first one,
/// and its token is still above the last one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_grants_cost_one_transaction_and_one_script() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    // The client's first grant probes the transaction, and its first start of a fence loads
    // the script: not counted. Twice, as a probe that could not run in time (a slow machine)
    // goes again at the next grant.
    for i in 0..2 {
        c.lock(format!("warm-up{i}"))
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let lock = c.lock("fresh");
    let fence = format!("{}:fence", lock_key("fresh"));
    let mut last = 0;
    for round in 0..20 {
        // A ms past the last start: a fence lost within the ms it started in, after a grant,
        // starts again at the same ID (`fence.lua`).
        tokio::time::sleep(Duration::from_millis(2)).await;
        let before = counted(&mut conn).await;
        let g = lock.acquire().await.unwrap();
        let after = counted(&mut conn).await;
        let sent: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        assert_eq!(sent, [1, 1, 1, 0, 0], "round {round}: {COUNTED:?}");
        let token = g.fencing_token().get();
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
        g.release().await.unwrap();
        command(&mut conn, &["DEL", &fence]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_holders_granted_by_script_and_by_transaction() {
    let server = server();
    // A user without `multi` and `exec`: its client grants by script; so does a client that
    // turned transactions off.
    let scripted_url = user(&server, "scripted", &LOCK_COMMANDS).await;
    let scripted = Client::connect(&scripted_url).await.unwrap();
    let by_script = by_script(&server).await;
    let counted = client(&server).await;
    let mut conn = raw(&server).await;
    let exec_before = calls(&mut conn, "exec").await;
    let mut last = 0;
    for i in 0..40 {
        let c = match i % 3 {
            0 => &scripted,
            1 => &by_script,
            _ => &counted,
        };
        let g = c.lock("mixed").acquire().await.unwrap();
        let token = g.fencing_token().get();
        assert!(token > last, "grant {i}: {token} after {last}");
        last = token;
        g.release().await.unwrap();
    }
    assert!(
        calls(&mut conn, "exec").await - exec_before >= 13,
        "the default client granted by transaction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_when_the_fence_is_deleted_or_flushed() {
    let server = server();
    let (c, s) = (client(&server).await, by_script(&server).await);
    let mut conn = raw(&server).await;
    let mut earlier = every_kind(&c, &s, 3).await;
    for kind in KINDS {
        command(&mut conn, &["DEL", &kind.fence()]).await;
    }
    exceed(&c, &s, &earlier, "deleted").await;
    earlier = then(earlier, every_kind(&c, &s, 2).await);
    command(&mut conn, &["FLUSHALL"]).await;
    exceed(&c, &s, &earlier, "FLUSHALL").await;
}

/// Rounds of: a grant, held; its lease and its fence lost together (one transaction deleting
/// `keys`, as an eviction or a `FLUSHALL` loses them); the next grant at once. On a loopback
/// connection the three fit in one server millisecond, where a fence started again at the
/// clock's `ms-0` would answer a token equal to or below the first.
async fn grant_lose_grant<G, F, Fut>(
    conn: &mut redis::aio::MultiplexedConnection,
    what: &str,
    keys: &[String],
    mut grant: F,
) where
    G: FencedGuard,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<G>, Error>>,
{
    // The fence each first grant counts on is started before: a fence lost within the ms it
    // started in, after a grant, is the one case a fence floored by the clock cannot tell
    // from its first start (`fence.lua`). A round starts a ms past the last one's start.
    let start = grant().await.unwrap().expect("the name is free");
    LeaseGuard::release(start).await.unwrap();
    for round in 0..200 {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let first = grant().await.unwrap().expect("the name is free");
        let mut lose = redis::pipe();
        lose.atomic();
        for key in keys {
            lose.cmd("DEL").arg(key).ignore();
        }
        let () = lose.query_async(&mut *conn).await.unwrap();
        let second = grant()
            .await
            .unwrap()
            .expect("the lease went with its keys");
        let (t1, t2) = (
            FencedGuard::fencing_token(&first),
            FencedGuard::fencing_token(&second),
        );
        assert!(
            t2 > t1,
            "{what}, round {round}: {t2} after {t1}, the fence lost between them"
        );
        LeaseGuard::release(second).await.unwrap();
        // Its keys are gone: the give-back on drop finds nothing of it to delete.
        drop(first);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_a_fence_lost_in_the_same_millisecond_as_a_grant() {
    let server = server();
    let (c, s) = (client(&server).await, by_script(&server).await);
    let mut conn = raw(&server).await;
    // A try: the first guard still counts as held by this task, so a waiting acquire would
    // answer `WouldDeadlock`.
    let lock = c.lock("lost");
    let keys = [lock_key("lost"), format!("{}:fence", lock_key("lost"))];
    grant_lose_grant(&mut conn, "by transaction", &keys, || lock.try_acquire()).await;
    // Without scripts the fence is started by two transactions instead of a script.
    let without = Client::builder(&server.url())
        .without_scripts()
        .connect()
        .await
        .unwrap();
    let lock = without.lock("lost-without-scripts");
    let keys = [
        lock_key("lost-without-scripts"),
        format!("{}:fence", lock_key("lost-without-scripts")),
    ];
    grant_lose_grant(&mut conn, "without scripts", &keys, || lock.try_acquire()).await;
    let lock = s.lock("lost-by-script");
    let keys = [
        lock_key("lost-by-script"),
        format!("{}:fence", lock_key("lost-by-script")),
    ];
    grant_lose_grant(&mut conn, "by script", &keys, || lock.try_acquire()).await;
    let reentrant = c.reentrant_lock("lost-reentrant");
    let base = lock_key("lost-reentrant");
    let keys = [
        base.clone(),
        format!("{base}:holds"),
        format!("{base}:fence"),
    ];
    grant_lose_grant(&mut conn, "re-entrant", &keys, || reentrant.try_acquire()).await;
    let semaphore = c.semaphore("lost-permits", 2);
    let base = format!("{}:permits", lock_key("lost-permits"));
    let keys = [base.clone(), format!("{base}:n"), format!("{base}:fence")];
    grant_lose_grant(&mut conn, "semaphore", &keys, || semaphore.try_acquire()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_when_an_older_fence_is_restored_on_a_running_master() {
    let server = server();
    let (c, s) = (client(&server).await, by_script(&server).await);
    let mut conn = raw(&server).await;
    let first = every_kind(&c, &s, 3).await;
    let mut dumps = Vec::new();
    for kind in KINDS {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(kind.fence())
            .query_async(&mut conn)
            .await
            .unwrap();
        dumps.push(dump);
    }
    let earlier = then(first, every_kind(&c, &s, 5).await);
    for (kind, dump) in KINDS.iter().zip(dumps) {
        let _: () = redis::cmd("RESTORE")
            .arg(kind.fence())
            .arg(60_000)
            .arg(dump)
            .arg("REPLACE")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    exceed(&c, &s, &earlier, "RESTORE").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_when_a_stale_append_only_file_is_loaded_again() {
    let server = RedisServer::start_with(&["--appendonly", "yes"]).unwrap();
    let (c, s) = (client(&server).await, by_script(&server).await);
    let mut conn = raw(&server).await;
    let first = every_kind(&c, &s, 3).await;
    // The file stops here; the grants after it are only in memory.
    command(&mut conn, &["CONFIG", "SET", "appendonly", "no"]).await;
    let earlier = then(first, every_kind(&c, &s, 5).await);
    command(&mut conn, &["DEBUG", "LOADAOF"]).await;
    exceed(&c, &s, &earlier, "DEBUG LOADAOF").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_after_a_restart_from_an_older_snapshot() {
    let mut server = server();
    let (c, s) = (client(&server).await, by_script(&server).await);
    let mut conn = raw(&server).await;
    let first = every_kind(&c, &s, 3).await;
    command(&mut conn, &["SAVE"]).await;
    let earlier = then(first, every_kind(&c, &s, 5).await);
    server.restart().unwrap();
    exceed(&c, &s, &earlier, "restart from a snapshot").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_after_a_restart_from_an_older_append_only_file() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes"]).unwrap();
    let (c, s) = (client(&server).await, by_script(&server).await);
    let mut conn = raw(&server).await;
    let first = every_kind(&c, &s, 3).await;
    command(&mut conn, &["CONFIG", "SET", "appendonly", "no"]).await;
    let earlier = then(first, every_kind(&c, &s, 5).await);
    server.restart().unwrap();
    exceed(&c, &s, &earlier, "restart from an append-only file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_ahead_of_the_server_clock_counts_on_from_its_last_id() {
    // A clock that stepped back by a day, as the fence sees it: every grant counts on.
    let server = server();
    let (c, s) = (client(&server).await, by_script(&server).await);
    let mut conn = raw(&server).await;
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let ahead = (now + 86_400) * 1000;
    for kind in KINDS {
        command(&mut conn, &["DEL", &kind.fence()]).await;
        let id = format!("{ahead}-0");
        command(
            &mut conn,
            &["XADD", &kind.fence(), "MAXLEN", "0", &id, "f", "1"],
        )
        .await;
    }
    let earlier: Vec<Vec<u64>> = KINDS.iter().map(|_| vec![ahead * 1000]).collect();
    exceed(&c, &s, &earlier, "a fence a day ahead").await;
    for (kind, tokens) in KINDS.iter().zip(every_kind(&c, &s, 2).await) {
        assert!(
            tokens.iter().all(|t| t / 1000 == ahead),
            "{kind:?}: {tokens:?} stay in the fence's ms"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_key_of_another_type_answers_wrong_type_naming_it() {
    let server = server();
    let (c, s) = (client(&server).await, by_script(&server).await);
    let mut conn = raw(&server).await;
    for (i, damage) in ["hash", "text", "huge", "far"].into_iter().enumerate() {
        for kind in KINDS {
            let fence = kind.fence();
            command(&mut conn, &["DEL", &fence]).await;
            match damage {
                "hash" => command(&mut conn, &["HSET", &fence, "last", "7"]).await,
                "text" => command(&mut conn, &["SET", &fence, "not a token"]).await,
                // Past 2^53: no token could be above it and below 2^53.
                "huge" => command(&mut conn, &["SET", &fence, "9223372036854775807"]).await,
                _ => {
                    command(&mut conn, &["XADD", &fence, "9007199254740-0", "f", "1"]).await;
                }
            }
            match kind.grant(&c, &s).await {
                Err(Error::WrongType { key, .. }) => assert_eq!(key, fence, "{damage} {kind:?}"),
                other => panic!("{damage} {kind:?}: {other:?}"),
            }
            // Nothing was left taken: with the fence gone, the name grants at once.
            command(&mut conn, &["DEL", &fence]).await;
            let token = tokio::time::timeout(Duration::from_secs(5), kind.grant(&c, &s))
                .await
                .unwrap_or_else(|_| panic!("{damage} {kind:?}: the name stayed taken"))
                .unwrap();
            assert!(token > 0, "{i}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_key_of_another_type_answers_wrong_type_at_once_with_or_without_an_expiry() {
    let server = server();
    let (c, s) = (client(&server).await, by_script(&server).await);
    let mut conn = raw(&server).await;
    for expiry in [false, true] {
        for client in [&c, &s] {
            let key = "fenced:{foreign}";
            command(&mut conn, &["DEL", key]).await;
            command(&mut conn, &["HSET", key, "f", "v"]).await;
            if expiry {
                command(&mut conn, &["PEXPIRE", key, "60000"]).await;
            }
            let lock = client.lock("foreign");
            match lock.try_acquire().await {
                Err(Error::WrongType { key: named, .. }) => assert_eq!(named, key),
                other => panic!("expiry {expiry}: {other:?}"),
            }
            let started = Instant::now();
            match lock.acquire().await {
                Err(Error::WrongType { .. }) => {}
                other => panic!("expiry {expiry}: {other:?}"),
            }
            assert!(started.elapsed() < Duration::from_secs(2), "at once");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_taken_away_later_sends_grants_by_script_with_increasing_tokens() {
    let server = server();
    let mut conn = raw(&server).await;
    let mut last = 0;
    let grants = |c: Client| async move {
        let mut tokens = Vec::new();
        for _ in 0..2 {
            let g = c.lock("ledger").acquire().await.unwrap();
            tokens.push(g.fencing_token().get());
            g.release().await.unwrap();
        }
        tokens
    };
    for (i, refused) in ["exec", "multi", "type"].into_iter().enumerate() {
        let commands: Vec<&str> = LOCK_COMMANDS
            .iter()
            .copied()
            .chain(["multi", "exec", "type", "watch"])
            .collect();
        let name = format!("later{i}");
        let url = user(&server, &name, &commands).await;
        let c = Client::connect(&url).await.unwrap();
        // Learned: grants by transaction.
        let exec = calls(&mut conn, "exec").await;
        for token in grants(c.clone()).await {
            assert!(token > last);
            last = token;
        }
        assert!(
            calls(&mut conn, "exec").await >= exec + 2,
            "granted by transaction"
        );
        command(
            &mut conn,
            &["ACL", "SETUSER", &name, &format!("-{refused}")],
        )
        .await;
        // The first grant after it meets the refusal and still answers a token; the next ones
        // go by script and send no transaction.
        for token in grants(c.clone()).await {
            assert!(token > last, "without {refused}: {token} after {last}");
            last = token;
        }
        let multi = calls(&mut conn, "multi").await;
        for token in grants(c.clone()).await {
            assert!(token > last);
            last = token;
        }
        assert_eq!(
            calls(&mut conn, "multi").await,
            multi,
            "without {refused}, no more transactions"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_grants_of_a_client_probe_the_server_once() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    // Every name is new: a grant by transaction starts its fence by script, with no
    // transaction more.
    let multi = calls(&mut conn, "multi").await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let lock = c.lock(format!("first{i}"));
            tokio::spawn(async move { lock.acquire().await.unwrap().release().await.unwrap() })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // One probe: the pool's empty transaction on a new connection, then the grant's; the
    // grants that came while it ran went by script, the others by one transaction each.
    let first = calls(&mut conn, "multi").await - multi;
    assert!(first <= 2 + 16, "one probe at a time: {first} transactions");
    // Learned: one transaction a grant, no probe.
    let multi = calls(&mut conn, "multi").await;
    for i in 0..16 {
        c.lock(format!("first{i}"))
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    assert_eq!(calls(&mut conn, "multi").await - multi, 16);
}
