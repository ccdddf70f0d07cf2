//! `fenced latch NAME arm N | count-down | wait | count`.

use fenced::WaitPolicy;

use crate::args::{Global, LatchAction};
use crate::cmd::{address, check_name, check_url, connect};
use crate::exit::{self, Failure};

pub async fn latch(global: &Global, name: &str, action: &LatchAction) -> Result<u8, Failure> {
    check_name(name)?;
    check_url(global.redis_url())?;
    let client = connect(global).await?;
    let fail = |e| Failure::from_lib(e, &address(global.redis_url()));
    let latch = client.latch(name);
    let show = |left: Option<u64>| left.map_or("none".to_owned(), |n| n.to_string());
    match action {
        LatchAction::Arm { count, lifetime } => {
            if latch
                .clone()
                .with_lifetime(*lifetime)
                .arm(*count)
                .await
                .map_err(fail)?
            {
                Ok(exit::OK)
            } else {
                Err(Failure::new(
                    exit::NOT_ACQUIRED,
                    format!("latch {name:?} is armed and still counting; not re-armed"),
                ))
            }
        }
        LatchAction::CountDown => {
            say!("{}", show(latch.count_down().await.map_err(fail)?));
            Ok(exit::OK)
        }
        LatchAction::Count => {
            say!("{}", show(latch.count().await.map_err(fail)?));
            Ok(exit::OK)
        }
        LatchAction::Wait { wait } => {
            let policy = wait.map_or(WaitPolicy::FOREVER, WaitPolicy::up_to);
            match latch.with_wait(policy).wait().await {
                Ok(()) => Ok(exit::OK),
                Err(fenced::Error::NotAcquired { waited, .. }) => Err(Failure::new(
                    exit::NOT_ACQUIRED,
                    format!(
                        "latch {name:?} did not open within {}",
                        crate::exit::show(waited)
                    ),
                )),
                Err(e) => Err(fail(e)),
            }
        }
    }
}
