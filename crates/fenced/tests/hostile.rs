//! Hostile input and hostile servers: injection payloads as names and values stay data; a
//! server that answers garbage, closes mid-reply or never answers gives a typed error in
//! time; keys that another program wrote in another form give typed errors or a timely
//! `NotAcquired`, never a panic or a hang.

use std::time::Duration;

use fenced::resource::{FencedRead, FencedWrite};
use fenced::{Client, Error, WaitPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::support::{all_keys, client, raw, server};

/// Runs one command that another program would have sent.
async fn write(conn: &mut redis::aio::MultiplexedConnection, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    let _: () = cmd.query_async(conn).await.unwrap();
}

/// Names and values that would do harm if they were ever spliced into a script or a command.
const PAYLOADS: [&str; 9] = [
    "a\r\nFLUSHALL\r\n",
    "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\ny\r\n",
    "') redis.call('FLUSHALL') --",
    "]] .. redis.call('FLUSHALL') .. [[",
    "\0nul\0inside",
    "*",
    "?[ab]\\*",
    "ünïcødé ✓ 锁",
    "..:..::.",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injection_payloads_as_names_and_values_stay_data() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    write(&mut conn, &["SET", "canary", "alive"]).await;
    for name in PAYLOADS {
        let lock = c.lock(name);
        let g = lock.acquire().await.unwrap();
        let status = lock.status().await.unwrap();
        assert_eq!(status.name, name);
        assert!(status.holder.is_some(), "{name:?}");
        let token = g.fencing_token();
        let r = c.resource(name);
        for value in PAYLOADS {
            assert_eq!(
                r.set(token, name, value).await.unwrap(),
                FencedWrite::Applied
            );
            assert_eq!(
                r.read(token, name).await.unwrap(),
                FencedRead::Current(Some(value.as_bytes().to_vec()))
            );
        }
        g.release().await.unwrap();
        assert!(lock.status().await.unwrap().holder.is_none());
    }
    // Every payload was a name, never a command.
    let canary: Option<String> = redis::cmd("GET")
        .arg("canary")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(canary.as_deref(), Some("alive"));
    let keys = all_keys(&mut conn).await;
    for name in PAYLOADS {
        assert!(
            keys.contains(&format!("fenced:{{{name}}}:fence")),
            "{name:?}: {keys:?}"
        );
    }
    assert!(
        !keys.iter().any(|k| k == "x"),
        "an injected SET ran: {keys:?}"
    );
    // `list` with a glob pattern treats the names as data too.
    let listed = c.list("*").await.unwrap().locks;
    assert!(listed.is_empty(), "{listed:?}");
}

/// A server on loopback that answers every connection with `reply` (then, if `close`, hangs
/// up), for clients to choke on.
async fn fake_server(reply: &'static [u8], close: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                loop {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            if !reply.is_empty() && socket.write_all(reply).await.is_err() {
                                return;
                            }
                            if close {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    format!("redis://127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_speaks_garbage_closes_mid_reply_or_stays_silent_gives_a_typed_error() {
    for (what, reply, close) in [
        ("garbage", &b"HTTP/1.1 400 Bad Request\r\n\r\n"[..], false),
        ("a reply cut in the middle", &b"$100\r\nshort"[..], true),
        ("a wrong type", &b":42\r\n"[..], false),
        ("silence", &b""[..], false),
        ("an immediate hang-up", &b""[..], true),
    ] {
        let url = fake_server(reply, close).await;
        let started = Instant::now();
        let out = Client::builder(&url)
            .timeout(Duration::from_millis(300))
            .connect()
            .await;
        let took = started.elapsed();
        match out {
            Err(e) => assert!(
                matches!(
                    e,
                    Error::Unavailable { .. }
                        | Error::Timeout { .. }
                        | Error::Redis(_)
                        | Error::UnexpectedReply { .. }
                ),
                "{what}: {e:?}"
            ),
            Ok(_) => panic!("{what}: connected to a server that is not Redis"),
        }
        assert!(took < Duration::from_secs(3), "{what}: took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_written_by_another_program_in_another_form_give_typed_errors() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    // The lock key is a hash: no release will ever free it, so the acquire says so at
    // once, naming the key, without spending its wait.
    write(&mut conn, &["HSET", "fenced:{odd-lock}", "f", "v"]).await;
    let started = Instant::now();
    let out = c
        .lock("odd-lock")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(30)))
        .acquire()
        .await;
    assert!(
        matches!(&out, Err(Error::WrongType { key, .. }) if key == "fenced:{odd-lock}"),
        "{out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // Inspecting it says what is wrong, typed.
    let status = c.lock("odd-lock").status().await;
    assert!(
        matches!(&status, Err(Error::WrongType { key, operation: "status" }) if key == "fenced:{odd-lock}"),
        "{status:?}"
    );
    // The fence is a list, or text that is no token: no token can be counted on it, so the
    // grant is undone and the error names the fence; the name stays free.
    write(&mut conn, &["RPUSH", "fenced:{odd-fence}:fence", "x"]).await;
    write(
        &mut conn,
        &["SET", "fenced:{odd-text}:fence", "not a number"],
    )
    .await;
    for name in ["odd-fence", "odd-text"] {
        let out = c.lock(name).acquire().await;
        let fence = format!("fenced:{{{name}}}:fence");
        assert!(
            matches!(&out, Err(Error::WrongType { key, .. }) if *key == fence),
            "{out:?}"
        );
        let status = c.lock(name).status().await.unwrap();
        assert!(status.holder.is_none(), "{status:?}");
    }
    // A resource whose data is a string and whose fence is garbage: typed errors.
    write(&mut conn, &["SET", "fenced:res:{odd-res}", "x"]).await;
    let out = c
        .resource("odd-res")
        .set(fenced::FencingToken::new(1), "f", "v")
        .await;
    assert!(
        matches!(&out, Err(Error::WrongType { key, .. }) if key == "fenced:res:{odd-res}"),
        "{out:?}"
    );
    write(
        &mut conn,
        &["SET", "fenced:res:{odd-res2}:fence", "garbage"],
    )
    .await;
    let out = c.resource("odd-res2").highest_token().await;
    assert!(matches!(out, Err(Error::UnexpectedReply { .. })), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_given_apart_from_the_url_authenticates_and_is_never_shown() {
    let server = fenced_testkit::RedisServer::start_with(&["--requirepass", "s3cret-pw"])
        .unwrap_or_else(|e| panic!("this test needs a real redis-server: {e}"));
    let builder = Client::builder(&server.url()).password("s3cret-pw");
    assert!(!format!("{builder:?}").contains("s3cret-pw"));
    let c = builder.connect().await.unwrap();
    c.lock("x")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Without it, or with a wrong one: a typed error that does not echo what was sent.
    let none = Client::builder(&server.url())
        .timeout(Duration::from_millis(500))
        .connect()
        .await;
    assert!(none.is_err());
    let wrong = Client::builder(&server.url())
        .timeout(Duration::from_millis(500))
        .password("not-the-one")
        .connect()
        .await
        .unwrap_err();
    assert!(!wrong.to_string().contains("not-the-one"), "{wrong}");
    // It replaces a password written in the URL.
    let url = server.url().replace("redis://", "redis://:wrong@");
    let c = Client::builder(&url)
        .password("s3cret-pw")
        .connect()
        .await
        .unwrap();
    c.lock("y")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Every primitive's answer for a key of the wrong type, bounded so that a wait would fail
/// the test instead of hanging it.
async fn at_once<T: std::fmt::Debug>(
    what: &str,
    call: impl Future<Output = Result<T, Error>>,
) -> Error {
    match tokio::time::timeout(Duration::from_secs(2), call).await {
        Ok(Err(e)) => e,
        Ok(Ok(v)) => panic!("{what}: answered {v:?}"),
        Err(_) => panic!("{what}: still waiting after 2 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_named_by_every_primitive_at_once() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    // Another program put a hash where the lock "odd" keeps its string. Every handle waits
    // forever by default: only an answer at once passes.
    write(&mut conn, &["HSET", "fenced:{odd}", "f", "v"]).await;
    let odd = |e: &Error| matches!(e, Error::WrongType { key, .. } if key == "fenced:{odd}");
    let answers = [
        ("acquire", at_once("acquire", c.lock("odd").acquire()).await),
        (
            "try_acquire",
            at_once("try_acquire", c.lock("odd").try_acquire()).await,
        ),
        (
            "unfenced acquire",
            at_once("unfenced acquire", c.lock("odd").unfenced().acquire()).await,
        ),
        (
            "unfenced try_acquire",
            at_once(
                "unfenced try_acquire",
                c.lock("odd").unfenced().try_acquire(),
            )
            .await,
        ),
        (
            "rw write",
            at_once("rw write", c.rw_lock("odd").write()).await,
        ),
        ("rw read", at_once("rw read", c.rw_lock("odd").read()).await),
        (
            "reentrant acquire",
            at_once("reentrant acquire", c.reentrant_lock("odd").acquire()).await,
        ),
        (
            "fair acquire",
            at_once("fair acquire", c.fair_lock("odd").acquire()).await,
        ),
        (
            "fair try_acquire",
            at_once("fair try_acquire", c.fair_lock("odd").try_acquire()).await,
        ),
        (
            "multi-lock",
            at_once(
                "multi-lock",
                c.multi_lock(["fine", "odd"]).unwrap().acquire(),
            )
            .await,
        ),
        ("status", at_once("status", c.lock("odd").status()).await),
    ];
    for (what, e) in &answers {
        assert!(odd(e), "{what}: {e:?}");
        assert!(e.to_string().contains("fenced:{odd}"), "{what}: {e}");
        assert!(!e.is_transient(), "{what}");
    }
    // Keys of a lease's other parts, of another type: each names its own key.
    write(&mut conn, &["SET", "fenced:{odd-sem}:permits", "x"]).await;
    let e = at_once("semaphore", c.semaphore("odd-sem", 2).acquire()).await;
    assert!(
        matches!(&e, Error::WrongType { key, .. } if key == "fenced:{odd-sem}:permits"),
        "{e:?}"
    );
    write(&mut conn, &["SET", "fenced:{odd-fair}:queue", "x"]).await;
    let e = at_once("fair queue", c.fair_lock("odd-fair").acquire()).await;
    assert!(
        matches!(&e, Error::WrongType { key, .. } if key == "fenced:{odd-fair}:queue"),
        "{e:?}"
    );
    write(&mut conn, &["SET", "fenced:{odd-rw}:readers", "x"]).await;
    for (what, e) in [
        (
            "rw read",
            at_once("rw read", c.rw_lock("odd-rw").read()).await,
        ),
        (
            "rw write",
            at_once("rw write", c.rw_lock("odd-rw").write()).await,
        ),
    ] {
        assert!(
            matches!(&e, Error::WrongType { key, .. } if key == "fenced:{odd-rw}:readers"),
            "{what}: {e:?}"
        );
    }
    // Nothing was taken on the way: the multi-lock's other name, and another lock, are free.
    c.lock("fine")
        .try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    c.lock("other")
        .try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}
