//! One module per subcommand; shared helpers here.

pub mod demo;
pub mod docs;
pub mod doctor;
pub mod elect;
pub mod hold;
pub mod inspect;
pub mod latch;
pub mod run;
pub mod supervise;
pub mod throwaway;
pub mod ticket;
pub mod top;

use fenced::Client;

use crate::args::Global;
use crate::exit::Failure;

/// Connects to the server of `--redis`, mapping failures to exit codes.
pub async fn connect(global: &Global) -> Result<Client, Failure> {
    connect_to(global, global.redis_url()).await
}

/// Connects as [`connect`], riding out a Redis that is down or not answering yet until
/// `deadline`: a failure that may pass is said once on stderr and tried again, 100 ms apart at
/// first, doubled up to 1 s. Anything else (a bad password, a bad URL) fails at once, as does
/// the last try before the deadline.
pub async fn connect_until(
    global: &Global,
    deadline: tokio::time::Instant,
) -> Result<Client, Failure> {
    let url = global.redis_url();
    let fail = |e| Failure::from_lib(e, &address(url));
    let e = match builder(global, url)?.connect().await {
        Err(e) if e.is_transient() => e,
        done => return done.map_err(fail),
    };
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if left.is_zero() {
        return Err(fail(e));
    }
    warn!(
        "fenced: {}; trying again until the wait runs out",
        fail(e).message
    );
    // The library's connect wait: backoff, and an end by the deadline.
    builder(global, url)?
        .connect_wait(left)
        .connect()
        .await
        .map_err(fail)
}

/// Connects to `url`; when `url` is the configured target, to the cluster of `--cluster`,
/// or to Redlock over the masters of several `--redis`.
pub async fn connect_to(global: &Global, url: &str) -> Result<Client, Failure> {
    builder(global, url)?
        .connect()
        .await
        .map_err(|e| Failure::from_lib(e, &address(url)))
}

/// The client's builder for `url`, as [`connect_to`] connects it.
fn builder(global: &Global, url: &str) -> Result<fenced::ClientBuilder, Failure> {
    let target = url == global.redis_url();
    let builder = if target && !global.cluster.is_empty() {
        Client::cluster_builder(&global.cluster)
    } else if let (true, false, Some(service)) =
        (target, global.sentinel.is_empty(), &global.service)
    {
        Client::sentinel_builder(&global.sentinel, service)
    } else if target && global.redis.len() > 1 {
        Client::redlock_builder(&global.redis)
    } else {
        Client::builder(url)
    };
    let mut builder = builder
        .namespace(global.namespace.clone())
        .timeout(global.timeout);
    if let Some(password) = password(global)? {
        builder = builder.password(password);
    }
    if global.no_scripts {
        builder = builder.without_scripts();
    }
    if let (Some(cert), Some(key)) = (&global.tls_cert, &global.tls_key) {
        let read = |path: &std::path::Path, what: &str| {
            std::fs::read(path)
                .map_err(|e| Failure::usage(format!("cannot read {what} {}: {e}", path.display())))
        };
        builder =
            builder.tls_client_certificate(read(cert, "--tls-cert")?, read(key, "--tls-key")?);
    }
    if let Some(path) = &global.tls_ca_cert {
        let pem = std::fs::read(path).map_err(|e| {
            Failure::usage(format!("cannot read --tls-ca-cert {}: {e}", path.display()))
        })?;
        builder = builder.tls_root_certificate(pem);
    }
    Ok(builder)
}

/// The password given apart from the URL: `--password-file`, else `FENCED_REDIS_PASSWORD`,
/// else `REDISCLI_AUTH` (redis-cli's variable), else none (the URL's, if any).
pub fn password(global: &Global) -> Result<Option<String>, Failure> {
    if global.no_password {
        return Ok(None);
    }
    if let Some(path) = &global.password_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::usage(format!(
                "cannot read --password-file {}: {e}",
                path.display()
            ))
        })?;
        let first = text.lines().next().unwrap_or("").to_owned();
        if first.is_empty() {
            return Err(Failure::usage(format!(
                "--password-file {} is empty",
                path.display()
            )));
        }
        return Ok(Some(first));
    }
    Ok(["FENCED_REDIS_PASSWORD", "REDISCLI_AUTH"]
        .into_iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty())))
}

/// `host:port` of a Redis URL, without credentials, for messages.
pub fn address(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// Checks a name before connecting, so bad input exits 64 even when Redis is down.
pub fn check_name(name: &str) -> Result<(), Failure> {
    fenced::check_name(name).map_err(|e| Failure::from_lib(e, ""))
}

/// Checks a URL before connecting.
pub fn check_url(url: &str) -> Result<(), Failure> {
    fenced::check_url(url).map_err(|e| Failure::from_lib(e, ""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn addresses_hide_credentials() {
        assert_eq!(
            super::address("redis://app:pw@10.0.0.1:6380/2"),
            "10.0.0.1:6380"
        );
        assert_eq!(super::address("redis://127.0.0.1:6379"), "127.0.0.1:6379");
        assert_eq!(super::address("rediss://h:1?x=y"), "h:1");
    }
}
