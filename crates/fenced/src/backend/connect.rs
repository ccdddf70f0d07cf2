//! Connecting: from a [`Topology`] (one server, Sentinel, a Redis Cluster, Redlock) and the
//! connection settings (password, TLS, timeouts) to a [`Backend`].
//!
//! Invariants:
//! 1. A password never leaves this module in text a user can see: [`Secret`] has no `Debug`
//!    of its content, and every URL in an error goes through [`redact`].
//! 2. Connections made later (a Sentinel master after a failover, a cluster node named by
//!    `MOVED`, a transaction's dedicated connection) get the same settings as the first:
//!    each is made from a clone of the [`Connect`] that made the backend.
//! 3. Nothing is sent before every setting is validated, and only one server and Sentinel are
//!    checked against [`MIN_SERVER_VERSION`] (a cluster's and Redlock's nodes are many, and a
//!    script says what an old one lacks).

use std::fmt;
use std::sync::Arc;
#[cfg(feature = "redlock")]
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

#[cfg(feature = "redlock")]
use super::Redlock;
#[cfg(feature = "cluster")]
use super::ShardedPubSub;
use super::{Backend, Conn, Dedicated, Node};
#[cfg(feature = "sentinel")]
use super::{Connector, Failover};
#[cfg(feature = "cluster")]
use crate::error::bounded;
use crate::error::{Error, Result};
use crate::notes::{self, ServerNote};
use crate::options::ClientOptions;

/// The deployment a client talks to.
#[derive(Clone, Debug)]
pub(crate) enum Topology {
    /// One server at this URL.
    Single(String),
    /// Several independent masters (Redlock).
    #[cfg(feature = "redlock")]
    Redlock(Vec<String>),
    /// Seed nodes of a Redis Cluster.
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    /// Sentinels and the service (master name) they watch.
    #[cfg(feature = "sentinel")]
    Sentinel {
        /// The sentinels' URLs.
        sentinels: Vec<String>,
        /// The master's name.
        service: String,
    },
}

/// Everything needed to connect, kept to connect again later (invariant 2).
#[derive(Clone, Debug)]
pub(crate) struct Connect {
    pub(crate) topology: Topology,
    /// How long a restarted Redlock master does not vote (default: the default ttl).
    #[cfg(feature = "redlock")]
    pub(crate) redlock_restart_grace: Option<Duration>,
    /// A password given apart from the URL (never shown by `Debug`).
    pub(crate) password: Option<Secret>,
    pub(crate) options: ClientOptions,
    #[cfg(feature = "tls")]
    pub(crate) tls_root_certificate: Option<Vec<u8>>,
    /// A client certificate and key (PEM) for mutual TLS; the key is never shown.
    #[cfg(feature = "tls")]
    pub(crate) tls_client: Option<(Vec<u8>, Secret)>,
}

impl Connect {
    /// Settings for one server at `url`, with default options.
    pub(crate) fn new(url: &str) -> Connect {
        Connect {
            topology: Topology::Single(url.to_owned()),
            #[cfg(feature = "redlock")]
            redlock_restart_grace: None,
            password: None,
            options: ClientOptions::default(),
            #[cfg(feature = "tls")]
            tls_root_certificate: None,
            #[cfg(feature = "tls")]
            tls_client: None,
        }
    }

    /// Connects to the topology and checks what can be checked now: the backend, and what its
    /// servers' configuration says about lock keys (`notes.rs`).
    pub(crate) async fn backend(&self) -> Result<(Backend, Vec<ServerNote>)> {
        if self.options.without_scripts && !self.scriptless_topology() {
            return Err(Error::unsupported(
                "locks on a Redis Cluster or Redlock need Lua scripts, and this client sends none: drop without_scripts (fenced --no-scripts)",
            ));
        }
        match &self.topology {
            Topology::Single(url) => {
                let (node, client) = self.node(url)?;
                let node = self.one_server(node);
                if let Err(e) = check_server(&node).await {
                    return Err(self.unwanted_password(url, e).await);
                }
                let label = client.get_connection_info().addr().to_string();
                Ok(noted(node, Dedicated::Fixed(client), &label).await)
            }
            #[cfg(feature = "redlock")]
            Topology::Redlock(urls) => {
                if self.options.replica_acks.is_some() {
                    return Err(Error::invalid(
                        "replica_acks asks replicas of one master; Redlock's masters are independent, with no replicas to ask",
                    ));
                }
                self.redlock_backend(urls).await
            }
            #[cfg(feature = "cluster")]
            Topology::Cluster(seeds) => self.cluster_backend(seeds).await,
            #[cfg(feature = "sentinel")]
            Topology::Sentinel { sentinels, service } => {
                self.sentinel_backend(sentinels, service).await
            }
        }
    }

    /// A refused password, said as it is when the server has none set: redis-rs reports
    /// every refused `AUTH` alike, while a server whose default user needs no password
    /// refuses a password sent without a user name ("AUTH <password> called without any
    /// password configured for the default user"). Asked once more without it: a server
    /// that then answers `PING` has none set. Any other error is returned as it is.
    async fn unwanted_password(&self, url: &str, err: Error) -> Error {
        let refused =
            matches!(&err, Error::Redis(e) if e.kind() == redis::ErrorKind::AuthenticationFailed);
        let Some(info) = self.connection_info(url).ok().filter(|_| refused) else {
            return err;
        };
        let settings = info.redis_settings();
        if settings.username().is_some() || settings.password().is_none() {
            return err;
        }
        let bare = redis::RedisConnectionInfo::default().set_db(settings.db());
        let Ok(client) = self.client_of(info.set_redis_settings(bare)) else {
            return err;
        };
        let ping = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        match tokio::time::timeout(self.options.timeout, ping).await {
            Ok(Ok(_)) => Error::invalid(format!(
                "the Redis server at {} has no password set: connect without one, or name its ACL user (redis://USER:PASSWORD@host)",
                redact(url)
            )),
            _ => err,
        }
    }

    /// Whether the lock runs here without scripts: one server, or Sentinel's master.
    fn scriptless_topology(&self) -> bool {
        match &self.topology {
            Topology::Single(_) => true,
            #[cfg(feature = "sentinel")]
            Topology::Sentinel { .. } => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Refuses keyspace events on anything but one server, before anything is sent.
    pub(crate) fn check_key_events(&self) -> Result<()> {
        if self.options.keyspace_events && !matches!(self.topology, Topology::Single(_)) {
            return Err(Error::invalid(
                "keyspace_events works with one server: a cluster's and Redlock's events stay on the node that holds the key, and a Sentinel failover may land on a master without them",
            ));
        }
        Ok(())
    }

    /// With [`ClientOptions::keyspace_events`]: the prefix of the keyspace channels of the
    /// client's database (`__keyspace@<db>__:`), once the server sends the events waiters
    /// wake on, turned on here if they were off (the flags already set are kept). `None`
    /// without the option.
    pub(crate) async fn key_events(&self, backend: &Backend) -> Result<Option<Arc<str>>> {
        if !self.options.keyspace_events {
            return Ok(None);
        }
        self.check_key_events()?;
        // Irrefutable when no other topology is compiled in.
        #[cfg_attr(
            not(any(feature = "cluster", feature = "sentinel", feature = "redlock")),
            allow(irrefutable_let_patterns)
        )]
        let Topology::Single(url) = &self.topology else {
            return Ok(None);
        };
        let db = self
            .connection_info(url)
            .map_err(|e| Error::invalid(format!("bad URL {}: {e}", redact(url))))?
            .redis_settings()
            .db();
        let node = backend.node()?;
        // A map under RESP3, a pair under RESP2: the value is the last string either way.
        let reply: redis::Value = node
            .query(
                "keyspace events",
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("notify-keyspace-events"),
            )
            .await?;
        let current = config_value(reply);
        let current = current.as_str();
        let missing = missing_event_flags(current);
        if !missing.is_empty() {
            let () = node
                .query(
                    "keyspace events",
                    redis::cmd("CONFIG")
                        .arg("SET")
                        .arg("notify-keyspace-events")
                        .arg(format!("{current}{missing}")),
                )
                .await?;
        }
        Ok(Some(format!("__keyspace@{db}__:").into()))
    }

    /// On a cluster, a maker of clients for the node at `host:port` (named by a `MOVED`
    /// reply), with the seeds' settings: where transactions go. `None` elsewhere.
    pub(crate) fn node_clients(&self) -> Option<super::pool::NodeClient> {
        #[cfg(feature = "cluster")]
        if let Topology::Cluster(seeds) = &self.topology {
            let me = self.clone();
            let template = seeds.first().cloned().unwrap_or_default();
            return Some(Arc::new(move |host: &str, port: u16| {
                me.client_at(&template, host, port)
            }));
        }
        None
    }
}

/// One server's backend (alone or behind Sentinel), with the notes on that server.
async fn noted(node: Node, client: Dedicated, label: &str) -> (Backend, Vec<ServerNote>) {
    let notes = notes::eviction(&node, label).await.into_iter().collect();
    (Backend::Single { node, client }, notes)
}

impl Connect {
    /// `node` with the client's settings for one server or Sentinel: replica
    /// acknowledgements, the grant by transaction, scripts or none (a cluster takes only the
    /// first, Redlock's masters none).
    fn one_server(&self, node: Node) -> Node {
        node.with_acks(self.options.replica_acks)
            .with_counted_grants(self.options.counted_grants)
            .with_scripts_forbidden(self.options.without_scripts)
    }

    /// A reconnecting connection to `url`, not connected yet (it connects on first use), and
    /// a client for dedicated connections to the same server.
    fn node(&self, url: &str) -> Result<(Node, redis::Client)> {
        let (conn, redis_client) = self
            .redis_client(url)
            .and_then(|client| self.manager_of(client))
            .map_err(|e| {
                Error::invalid(format!("Redis URL {:?} is not usable: {e}", redact(url)))
            })?;
        Ok((
            Node::new(Conn::Single(conn), self.options.timeout),
            redis_client,
        ))
    }

    /// A reconnecting connection manager for `redis_client`'s server (lazy).
    fn manager_of(
        &self,
        redis_client: redis::Client,
    ) -> redis::RedisResult<(ConnectionManager, redis::Client)> {
        let timeout = self.options.timeout;
        // No response timeout of redis-rs' own: every call through a node is bounded by the
        // same timeout already (`node.rs`, invariant 1), and a second timer per call cost a
        // lock cycle a tenth of its client instructions.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(None)
            .set_number_of_retries(2)
            .set_max_delay(timeout);
        let conn = ConnectionManager::new_lazy_with_config(redis_client.clone(), config)?;
        Ok((conn, redis_client))
    }

    #[cfg(feature = "sentinel")]
    /// The master of `service` behind Sentinel, located now and followed from then on
    /// (`backend/sentinel.rs`), and the notes on it.
    async fn sentinel_backend(
        &self,
        sentinels: &[String],
        service: &str,
    ) -> Result<(Backend, Vec<ServerNote>)> {
        if sentinels.is_empty() || service.is_empty() {
            return Err(Error::invalid(
                "a Sentinel client needs at least one sentinel URL and the service (master) name",
            ));
        }
        let timeout = self.options.timeout;
        let mut clients = Vec::with_capacity(sentinels.len());
        for url in sentinels {
            // The builder's TLS settings (a private CA, a client certificate) apply to the
            // sentinels too; its password does not (sentinels often have none, and an AUTH
            // they do not expect fails the connection): give theirs in their URLs.
            use redis::IntoConnectionInfo;
            let info = url.as_str().into_connection_info();
            clients.push(info.and_then(|info| self.client_of(info)).map_err(|e| {
                Error::invalid(format!("Sentinel URL {:?} is not usable: {e}", redact(url)))
            })?);
        }
        // The master is reached like the first sentinel (TLS or not, the same password and
        // CA), at the address Sentinel names: a hostname or an IPv6 address needs no URL.
        let me = self.clone();
        let template = sentinels[0].clone();
        let connect: Connector = Arc::new(move |host: &str, port: u16| {
            me.manager_of(me.client_at(&template, host, port)?)
        });
        let failover = Failover::start(service.to_owned(), clients, connect, timeout);
        let node = self.one_server(Node::new(Conn::Sentinel(failover.clone()), timeout));
        check_server(&node).await?;
        // The master as located for the check just made (kept, so no call is sent here).
        let label = match failover.conn().await {
            Ok((_, (host, port))) => format!("{host}:{port} (master of {service})"),
            Err(_) => format!("the master of {service}"),
        };
        Ok(noted(node, Dedicated::Sentinel(failover), &label).await)
    }

    #[cfg(feature = "cluster")]
    /// A Redis Cluster from its seed nodes: the slot map is read now, from the first seed
    /// that answers. With the notes on every master.
    async fn cluster_backend(&self, seeds: &[String]) -> Result<(Backend, Vec<ServerNote>)> {
        if seeds.is_empty() {
            return Err(Error::invalid(
                "a Redis Cluster client needs at least one seed node URL",
            ));
        }
        let timeout = self.options.timeout;
        let mut clients = Vec::with_capacity(seeds.len());
        for url in seeds {
            clients.push(self.redis_client(url).map_err(|e| {
                Error::invalid(format!("Redis URL {:?} is not usable: {e}", redact(url)))
            })?);
        }
        let cluster = self
            .cluster_client_builder(seeds)?
            // At most once (backend/node.rs, invariant 4): the node seam resends only what
            // the cluster says did not run.
            .retries(0)
            .build()
            .map_err(|e| Error::invalid(format!("Redis Cluster seeds are not usable: {e}")))?;
        let conn = bounded(timeout, "connect", cluster.get_async_connection()).await?;
        let node = Node::new(Conn::Cluster(conn), timeout).with_acks(self.options.replica_acks);
        // Sharded pub/sub when the nodes run SPUBLISH (Redis 7+) and the user may: releases
        // then travel to the channel's slot master only, not over the whole cluster bus.
        let mut probe = redis::cmd("SPUBLISH");
        probe
            .arg(format!(
                "{}{{fenced-probe}}:released",
                self.options.namespace
            ))
            .arg("probe");
        let sharded = match node.query::<i64>("sharded pub/sub probe", &probe).await {
            Ok(_) => {
                let me = self.clone();
                let seeds = seeds.to_vec();
                let make: ShardedPubSub = Arc::new(move |pushes| {
                    me.cluster_client_builder(&seeds)
                        .map_err(|e| {
                            redis::RedisError::from((
                                redis::ErrorKind::InvalidClientConfig,
                                "cluster seeds",
                                e.to_string(),
                            ))
                        })?
                        .use_protocol(redis::ProtocolVersion::RESP3)
                        .push_sender(pushes)
                        .build()
                });
                Some(make)
            }
            Err(e) => {
                tracing::debug!(error = %e, "fenced: no sharded pub/sub on this cluster; releases use PUBLISH");
                None
            }
        };
        let notes = notes::eviction_on_every_master(&node).await;
        Ok((
            Backend::Cluster {
                node: node.with_sharded_pubsub(sharded.is_some()),
                clients: clients.into_iter().map(Dedicated::Fixed).collect(),
                sharded,
            },
            notes,
        ))
    }

    #[cfg(feature = "cluster")]
    /// A cluster client builder over `seeds` with this builder's timeout, password and TLS.
    fn cluster_client_builder(
        &self,
        seeds: &[String],
    ) -> Result<redis::cluster::ClusterClientBuilder> {
        let timeout = self.options.timeout;
        let mut infos = Vec::with_capacity(seeds.len());
        for url in seeds {
            infos.push(self.connection_info(url).map_err(|e| {
                Error::invalid(format!("Redis URL {:?} is not usable: {e}", redact(url)))
            })?);
        }
        let mut builder = redis::cluster::ClusterClientBuilder::new(infos)
            .connection_timeout(timeout)
            .response_timeout(timeout);
        if let Some(Secret(password)) = &self.password {
            builder = builder.password(password);
        }
        #[cfg(feature = "tls")]
        if self.tls_root_certificate.is_some() || self.tls_client.is_some() {
            builder = builder.certs(self.tls_certificates());
        }
        Ok(builder)
    }

    #[cfg(feature = "redlock")]
    /// Several masters: at least 3 distinct URLs, a majority of which answer now (the others
    /// are reconnected to when they come back). With the notes on the masters that answered.
    async fn redlock_backend(&self, urls: &[String]) -> Result<(Backend, Vec<ServerNote>)> {
        if urls.len() < 3 {
            return Err(Error::invalid(format!(
                "Redlock needs at least 3 independent masters, not {}",
                urls.len()
            )));
        }
        for (i, url) in urls.iter().enumerate() {
            if urls[..i].contains(url) {
                return Err(Error::invalid(format!(
                    "Redlock master {:?} is listed twice; its vote would count twice",
                    redact(url)
                )));
            }
        }
        let mut nodes = Vec::with_capacity(urls.len());
        let mut clients = Vec::with_capacity(urls.len());
        for url in urls {
            let (node, client) = self.node(url)?;
            nodes.push(node);
            clients.push(client);
        }
        let grace = self
            .redlock_restart_grace
            .unwrap_or(self.options.default_ttl);
        let redlock = Redlock::new(nodes, clients, grace);
        let (answered, notes) = redlock.ping().await;
        let needed = urls.len() / 2 + 1;
        if answered < needed {
            return Err(Error::NoQuorum {
                granted: answered,
                needed,
                nodes: urls.len(),
            });
        }
        Ok((Backend::Redlock(Arc::new(redlock)), notes))
    }

    /// Where to connect: the URL, with the separate password in place of the URL's.
    fn connection_info(&self, url: &str) -> redis::RedisResult<redis::ConnectionInfo> {
        use redis::IntoConnectionInfo;
        let info = url
            .into_connection_info()
            .map_err(|e| match url_problem(url) {
                Some(problem) => redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "unusable URL",
                    problem,
                )),
                None => e,
            })?;
        Ok(match &self.password {
            Some(Secret(password)) => {
                let settings = info.redis_settings().clone().set_password(password);
                info.set_redis_settings(settings)
            }
            None => info,
        })
    }

    fn redis_client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        self.client_of(self.connection_info(url)?)
    }

    /// A client of the server at `host:port`, with the settings of `template` (its scheme,
    /// user, password and database) and of this builder (TLS certificates): the address of a
    /// master named by Sentinel, or of a cluster node named by a `MOVED` reply.
    pub(crate) fn client_at(
        &self,
        template: &str,
        host: &str,
        port: u16,
    ) -> redis::RedisResult<redis::Client> {
        use redis::ConnectionAddr;
        let info = self.connection_info(template)?;
        let addr = match info.addr() {
            ConnectionAddr::Tcp(..) => ConnectionAddr::Tcp(host.to_owned(), port),
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "a node named by the server is reached over TCP; the URL given is not a TCP one",
                )));
            }
        };
        self.client_of(info.set_addr(addr))
    }

    #[cfg(feature = "tls")]
    fn client_of(&self, info: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
        if self.tls_root_certificate.is_none() && self.tls_client.is_none() {
            return redis::Client::open(info);
        }
        redis::Client::build_with_tls(info, self.tls_certificates())
    }

    #[cfg(feature = "tls")]
    fn tls_certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self.tls_client.as_ref().map(|(cert, Secret(key))| {
                redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone().into_bytes(),
                }
            }),
            root_cert: self.tls_root_certificate.clone(),
        }
    }

    #[cfg(not(feature = "tls"))]
    fn client_of(&self, info: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
        redis::Client::open(info)
    }
}

/// Why `url`, which did not parse, cannot name a Redis server, in the user's terms: a scheme
/// that is not Redis's, or TLS in a build without it (whose own error names no feature).
/// `None` when the parser's own error says it better.
fn url_problem(url: &str) -> Option<String> {
    let scheme = url.trim().split_once(':').map(|(s, _)| s).filter(|s| {
        s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    let Some(scheme) = scheme else {
        return Some("a Redis URL starts with redis:// (or rediss:// for TLS)".to_owned());
    };
    match scheme.to_ascii_lowercase().as_str() {
        "redis" | "valkey" | "unix" | "redis+unix" | "valkey+unix" => None,
        "rediss" | "valkeys" if cfg!(feature = "tls") => None,
        "rediss" | "valkeys" => Some(format!(
            "{scheme}:// is TLS, which needs fenced's `tls` feature (this build has it off)"
        )),
        _ => Some(format!(
            "the scheme {scheme}:// is not Redis's: use redis:// (or rediss:// for TLS)"
        )),
    }
}

/// [`crate::check_url`]: the URL as connecting reads it, with nothing sent.
pub(crate) fn check_url(url: &str) -> crate::Result<()> {
    use redis::IntoConnectionInfo;
    match url.into_connection_info() {
        Ok(_) => Ok(()),
        Err(e) => {
            let why = url_problem(url).unwrap_or_else(|| e.to_string());
            Err(Error::invalid(format!(
                "{:?} is not a usable Redis URL: {why}",
                redact(url)
            )))
        }
    }
}

/// A password: kept, sent to Redis, never shown.
#[derive(Clone)]
pub(crate) struct Secret(pub(crate) String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The URL without its password, for error messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{check_url, redact};

    #[test]
    fn a_url_is_refused_for_its_scheme_and_for_tls_without_the_feature() {
        for good in [
            "redis://h:1/0",
            "valkey://h",
            "unix:///tmp/r.sock",
            "REDIS://h",
        ] {
            assert!(check_url(good).is_ok(), "{good}");
        }
        let message = |url: &str| check_url(url).map_err(|e| e.to_string()).err();
        let http = message("http://u:pw@h:1").unwrap_or_default();
        assert!(
            http.contains("scheme http://") && !http.contains("pw"),
            "{http}"
        );
        let bare = message("127.0.0.1:6379").unwrap_or_default();
        assert!(bare.contains("starts with redis://"), "{bare}");
        let tls = message("rediss://h:1");
        if cfg!(feature = "tls") {
            assert_eq!(tls, None);
        } else {
            assert!(tls.unwrap_or_default().contains("`tls` feature"));
        }
    }

    #[test]
    fn passwords_are_not_echoed() {
        assert_eq!(
            redact("redis://app:s3cret@127.0.0.1:6379"),
            "redis://app:***@127.0.0.1:6379"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:pw@h/0"), "redis://:***@h/0");
    }

    proptest::proptest! {
        #[test]
        fn no_password_survives_redaction(
            user in "[a-z]{0,8}",
            password in "[A-Za-z0-9!#%&*+=~-]{1,16}",
            host in "[a-z0-9.]{1,12}",
            rest in "(:[0-9]{1,5})?(/[0-9])?",
        ) {
            // A password that is the mask itself cannot be told from its redaction.
            proptest::prop_assume!(password != "***");
            let url = format!("redis://{user}:{password}@{host}{rest}");
            let shown = redact(&url);
            proptest::prop_assert!(!shown.contains(&format!(":{password}@")), "{}", shown);
        }

        #[test]
        fn redaction_answers_for_any_text(text in ".{0,64}") {
            let _ = redact(&text);
        }
    }
}

/// The oldest server fenced supports: Redis 6.2 (`KEEPTTL`, `GETDEL`, `SET … GET`, ACL
/// selectors' predecessors; every Valkey reports 7.2 or later). Older servers are refused at
/// connect, before a script fails on a command they lack.
pub const MIN_SERVER_VERSION: (u32, u32) = (6, 2);

/// The value of a one-parameter `CONFIG GET` reply (a pair, or a map under RESP3).
fn config_value(reply: redis::Value) -> String {
    use redis::Value;
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items.get(1).and_then(text),
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
        _ => None,
    }
    .unwrap_or_default()
}

/// The keyspace-event classes waiters need: `K` (keyspace channels), `g` (`del`) and `x`
/// (`expired`), those of `current` missing (`A` stands for every class but `m`, `n` and `d`).
fn missing_event_flags(current: &str) -> String {
    let all = current.contains('A');
    [('K', true), ('g', !all), ('x', !all)]
        .into_iter()
        .filter(|&(flag, needed)| needed && !current.contains(flag))
        .map(|(flag, _)| flag)
        .collect()
}

/// Reads the server's version (`INFO server`, which also proves it answers) and refuses one
/// older than [`MIN_SERVER_VERSION`]. A server that refuses `INFO` (an ACL without it, a
/// renamed command, a proxy) is let through after a `PING`: the version cannot be read, and
/// the scripts will say what they lack. (One server and Sentinel; a Redis Cluster and
/// Redlock's masters are not checked.)
async fn check_server(node: &Node) -> Result<()> {
    let info = match node
        .query::<String>("connect", redis::cmd("INFO").arg("server"))
        .await
    {
        Ok(info) => info,
        Err(Error::Permission { .. } | Error::Redis(_) | Error::UnexpectedReply { .. }) => {
            let _: String = node.query("ping", &redis::cmd("PING")).await?;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    node.probe_commands().await;
    match server_version(&info) {
        Some(v) if (v.0, v.1) < MIN_SERVER_VERSION => Err(Error::unsupported(format!(
            "Redis {}.{}.{} is older than {}.{}, the oldest fenced supports: upgrade the server (or use Valkey)",
            v.0, v.1, v.2, MIN_SERVER_VERSION.0, MIN_SERVER_VERSION.1
        ))),
        _ => Ok(()),
    }
}

/// `redis_version` of an `INFO server` text (Valkey reports the Redis version it is
/// compatible with there, 7.2.4 for every Valkey so far).
fn server_version(info: &str) -> Option<(u32, u32, u32)> {
    let text = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))?
        .trim();
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

#[cfg(test)]
mod version_tests {
    use super::{missing_event_flags, server_version};

    #[test]
    fn only_the_missing_event_classes_are_added() {
        assert_eq!(missing_event_flags(""), "Kgx");
        assert_eq!(missing_event_flags("Ex"), "Kg");
        assert_eq!(missing_event_flags("KA"), "");
        assert_eq!(missing_event_flags("AE"), "K");
        assert_eq!(missing_event_flags("gxK"), "");
    }

    #[test]
    fn the_server_version_is_read_from_info() {
        let info = "# Server\r\nredis_version:6.0.16\r\nredis_git_sha1:0\r\n";
        assert_eq!(server_version(info), Some((6, 0, 16)));
        assert_eq!(
            server_version("redis_version:7.2.4\r\nvalkey_version:9.1.2"),
            Some((7, 2, 4))
        );
        assert!(
            server_version("redis_version:6.0.16")
                .is_some_and(|v| (v.0, v.1) < super::MIN_SERVER_VERSION)
        );
        assert_eq!(server_version("nothing"), None);
    }
}
