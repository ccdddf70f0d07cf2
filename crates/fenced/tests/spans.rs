//! Every acquire, wait and release is a `tracing` span named the same for every primitive,
//! with the lease's name, its primitive and its fencing token. A test binary of its own: its
//! subscriber is the process's global one (a scoped one misses callsites that other tests'
//! threads met first without a subscriber).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fenced::WaitPolicy;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_core::span::Current;

// The shared helpers, of which this binary uses a few.
#[path = "support/mod.rs"]
#[allow(unused_macros, unused_imports)]
mod support;

use support::{client, server};

/// A span as seen: its name and its fields.
type Seen = (&'static str, BTreeMap<String, String>);

/// A subscriber that keeps every span's name and fields, and the entered stack per thread
/// (`Span::current`, through which the core records the token).
#[derive(Default)]
struct Capture {
    spans: Mutex<Vec<(&'static Metadata<'static>, BTreeMap<String, String>)>>,
    next: AtomicU64,
}

thread_local! {
    static STACK: std::cell::RefCell<Vec<Id>> = const { std::cell::RefCell::new(Vec::new()) };
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let mut spans = self.spans.lock().unwrap();
        spans.push((attrs.metadata(), fields));
        self.next.fetch_add(1, Ordering::Relaxed);
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, id: &Id, values: &Record<'_>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some((_, fields)) = spans.get_mut(id.into_u64() as usize - 1) {
            values.record(&mut Fields(fields));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, id: &Id) {
        STACK.with(|s| s.borrow_mut().push(id.clone()));
    }
    fn exit(&self, _: &Id) {
        STACK.with(|s| s.borrow_mut().pop());
    }
    fn current_span(&self) -> Current {
        let top = STACK.with(|s| s.borrow().last().cloned());
        match top {
            Some(id) => {
                let spans = self.spans.lock().unwrap();
                match spans.get(id.into_u64() as usize - 1) {
                    Some((meta, _)) => Current::new(id, meta),
                    None => Current::none(),
                }
            }
            None => Current::none(),
        }
    }
}

impl Capture {
    fn seen(&self) -> Vec<Seen> {
        let spans = self.spans.lock().unwrap();
        spans.iter().map(|(m, f)| (m.name(), f.clone())).collect()
    }
}

/// The spans named `name` whose fields include every pair of `with`.
fn named<'a>(seen: &'a [Seen], name: &str, with: &[(&str, &str)]) -> Vec<&'a Seen> {
    seen.iter()
        .filter(|(n, f)| {
            *n == name
                && with
                    .iter()
                    .all(|(k, v)| f.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

#[test]
fn every_acquire_wait_and_release_is_a_span_with_its_name_primitive_and_token() {
    let capture = Arc::new(Capture::default());
    let s = server();
    tracing::dispatcher::set_global_default(tracing::Dispatch::from(capture.clone()))
        .expect("the only subscriber of this process");
    let tokens = {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let c = client(&s).await;
            let lock = c
                .lock("spans")
                .with_wait(WaitPolicy::up_to(Duration::from_secs(5)));
            let first = lock.acquire().await.unwrap();
            // A second holder waits for the first: its wait is a span of its own.
            let waiter = tokio::spawn({
                let lock = lock.clone();
                async move { lock.acquire().await.unwrap() }
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            let t1 = first.fencing_token().get();
            first.release().await.unwrap();
            let second = waiter.await.unwrap();
            let t2 = second.fencing_token().get();
            second.release().await.unwrap();
            let permit = c.semaphore("spans-pool", 2).acquire().await.unwrap();
            let t3 = permit.fencing_token().get();
            permit.release().await.unwrap();
            let fair = c.fair_lock("spans-fair").acquire().await.unwrap();
            let t4 = fair.fencing_token().get();
            fair.release().await.unwrap();
            // A try is a span of its own, from the core, for every primitive.
            let tried = c.rw_lock("spans-rw").try_write().await.unwrap().unwrap();
            let t5 = tried.fencing_token().get();
            tried.release().await.unwrap();
            [t1, t2, t3, t4, t5]
        })
    };
    let seen = capture.seen();
    let [t1, t2, t3, t4, t5] = tokens.map(|t| t.to_string());
    for (primitive, name, token) in [
        ("lock", "spans", &t1),
        ("lock", "spans", &t2),
        ("semaphore", "spans-pool", &t3),
        ("fair_lock", "spans-fair", &t4),
    ] {
        let with = [
            ("fenced.name", name),
            ("fenced.primitive", primitive),
            ("fenced.token", token.as_str()),
        ];
        assert_eq!(
            named(&seen, "fenced.acquire", &with).len(),
            1,
            "{with:?}: {seen:?}"
        );
        assert_eq!(
            named(&seen, "fenced.release", &with).len(),
            1,
            "{with:?}: {seen:?}"
        );
    }
    let tried = [
        ("fenced.name", "spans-rw"),
        ("fenced.primitive", "rw_write"),
        ("fenced.token", t5.as_str()),
    ];
    assert_eq!(
        named(&seen, "fenced.try_acquire", &tried).len(),
        1,
        "{seen:?}"
    );
    assert_eq!(named(&seen, "fenced.release", &tried).len(), 1, "{seen:?}");
    assert_eq!(
        named(&seen, "fenced.wait", &[("fenced.name", "spans")]).len(),
        1,
        "{seen:?}"
    );
}
